"""Numerical parity between the onyx CLI and onnxruntime (CPU).

Each test draws fresh random inputs; the seed is printed (pytest -s) and put in
every failure message. Reproduce a run with ONYX_PARITY_SEED=<seed>.
"""

import os
import re
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

TOOLS_DIR = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS_DIR not in sys.path:
    sys.path.insert(0, TOOLS_DIR)
import gen_models  # noqa: E402

BATCH, SEQ = 2, 7
REL_TOL = 1e-4


def safe_name(name):
    """File stem the CLI uses for an output tensor in --save-outputs."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def fresh_rng():
    seed = int(os.environ.get("ONYX_PARITY_SEED", np.random.SeedSequence().entropy))
    print(f"\nparity seed: {seed}  (rerun with ONYX_PARITY_SEED={seed})")
    return np.random.default_rng(seed), seed


def mlp_inputs(rng, _past):
    return {"x": rng.standard_normal((BATCH, gen_models.MLP["in_dim"])).astype(np.float32)}


def bert_inputs(rng, _past):
    ids = rng.integers(0, gen_models.BERT["vocab"], (BATCH, SEQ), dtype=np.int64)
    mask = np.ones((BATCH, SEQ), np.int64)
    # Right padding in the last row (0..SEQ-2 pad tokens; never a fully masked row).
    n_pad = int(rng.integers(0, SEQ - 1))
    if n_pad:
        mask[-1, SEQ - n_pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def llama_inputs(rng, past):
    c = gen_models.LLAMA
    total = past + SEQ
    mask = np.ones((BATCH, total), np.int64)
    if past >= 2:
        # Left padding inside the cache for the last row; every query still
        # sees at least its own token, so no softmax row is fully masked.
        mask[-1, :2] = 0
    feeds = {
        "input_ids": rng.integers(0, c["vocab"], (BATCH, SEQ), dtype=np.int64),
        "attention_mask": mask,
        "position_ids": np.tile(np.arange(past, total, dtype=np.int64), (BATCH, 1)),
    }
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (BATCH, c["kv_heads"], past, c["head_dim"])).astype(np.float32)
    return feeds


CASES = [
    pytest.param("mlp", mlp_inputs, 0, id="mlp"),
    pytest.param("bert_layer", bert_inputs, 0, id="bert_layer"),
    pytest.param("llama_layer", llama_inputs, 0, id="llama_past0"),
    pytest.param("llama_layer", llama_inputs, 5, id="llama_past5"),
]


def compare(name, got, ref):
    """Returns (ok, report line) for one output."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False, (f"{name}: onyx {got.dtype}{list(got.shape)} vs "
                       f"onnxruntime {ref.dtype}{list(ref.shape)}")
    if ref.size == 0:
        return True, f"{name}: empty {list(ref.shape)}"
    if not np.issubdtype(ref.dtype, np.floating):
        mismatches = int(np.count_nonzero(got != ref))
        return mismatches == 0, f"{name}: {mismatches} mismatching elements"
    if not np.all(np.isfinite(got)):
        return False, f"{name}: onyx output has non-finite values"
    abs_err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    rel_err = abs_err / max(float(np.max(np.abs(ref))), 1e-6)
    line = f"{name}: max_abs_err={abs_err:.3e} rel_err={rel_err:.3e} (tol {REL_TOL:g})"
    return rel_err <= REL_TOL, line


@pytest.mark.parametrize("model_name, make_inputs, past", CASES)
def test_parity(model_name, make_inputs, past, models_dir, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    model = models_dir / f"{model_name}.onnx"
    feeds = make_inputs(rng, past)

    in_dir, out_dir = tmp_path / "inputs", tmp_path / "outputs"
    in_dir.mkdir()
    args = ["run", model]
    for name, arr in feeds.items():
        path = in_dir / f"{safe_name(name)}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    args += ["--save-outputs", out_dir]

    proc = run_onyx(*args)
    assert proc.returncode == 0, (
        f"onyx failed (rc={proc.returncode}, seed={seed})\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    refs = sess.run(names, feeds)

    lines, ok = [], True
    for name, ref in zip(names, refs):
        path = out_dir / f"{safe_name(name)}.npy"
        if not path.is_file():
            ok = False
            lines.append(f"{name}: onyx wrote no {path.name}")
            continue
        good, line = compare(name, np.load(path), ref)
        ok &= good
        lines.append(("ok   " if good else "FAIL ") + line)

    report = "\n".join(lines)
    print(f"{model_name} (past={past}):\n{report}")
    assert ok, f"parity failure for {model_name} (past={past}, seed={seed}):\n{report}"


def run_and_compare(model, feeds, run_onyx, tmp_path, extra_args=(), label=""):
    """Runs `model` in onyx (with extra CLI args) and onnxruntime on `feeds`; asserts parity."""
    in_dir, out_dir = tmp_path / "inputs", tmp_path / "outputs"
    in_dir.mkdir(exist_ok=True)
    args = ["run", model]
    for name, arr in feeds.items():
        path = in_dir / f"{safe_name(name)}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    args += ["--save-outputs", out_dir, *extra_args]
    proc = run_onyx(*args)
    assert proc.returncode == 0, f"onyx failed ({label}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    lines, ok = [], True
    for name, ref in zip(names, sess.run(names, feeds)):
        good, line = compare(name, np.load(out_dir / f"{safe_name(name)}.npy"), ref)
        ok &= good
        lines.append(("ok   " if good else "FAIL ") + line)
    report = "\n".join(lines)
    print(f"{label}:\n{report}")
    assert ok, f"parity failure ({label}):\n{report}"


def test_external_data_weights(models_dir, run_onyx, tmp_path):
    """The MLP with its weights in an external data file (memory-mapped by onyx)."""
    import onnx
    rng, seed = fresh_rng()
    m = onnx.load(str(models_dir / "mlp.onnx"))
    path = tmp_path / "mlp_external.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mlp_external.weights", size_threshold=0)
    assert (tmp_path / "mlp_external.weights").stat().st_size > 100_000
    run_and_compare(path, mlp_inputs(rng, 0), run_onyx, tmp_path, label=f"mlp, external data (seed {seed})")


@pytest.mark.parametrize("memory", ["release", "keep"])
def test_memory_modes_match(memory, models_dir, run_onyx, tmp_path):
    """The run-time release and keep-everything modes give the planned mode's results."""
    rng, seed = fresh_rng()
    run_and_compare(models_dir / "llama_layer.onnx", llama_inputs(rng, 5), run_onyx, tmp_path,
                    extra_args=("--memory", memory, "--repeat", "2"), label=f"llama, --memory {memory} (seed {seed})")


@pytest.mark.parametrize("past", [0, 5])
def test_fused_llama_matches_onnxruntime(past, models_dir, run_onyx, tmp_path):
    """Load-time fusion of the Llama layer (RMSNorm, rotary by halves, SiLU-gated MLP, eager
    attention with repeated KV heads -> Attention, residual add + RMSNorm), forced on for the CPU: the fused graph has
    none of the chains' ops left and computes what onnxruntime computes on the original."""
    import json
    rng, seed = fresh_rng()
    model = models_dir / "llama_layer.onnx"
    proc = run_onyx("run", model, "--fuse-attention", "on", "--json", "--dim", "batch=2", "--dim", "sequence=3",
                    "--dim", "past_sequence=4", "--dim", "total_sequence=7")
    assert proc.returncode == 0, proc.stderr
    ops = json.loads(proc.stdout)["ops"]
    layers = gen_models.LLAMA["layers"]
    assert ops.get("Attention") == layers and ops.get("onyx::RotaryHalf") == 2 * layers, ops
    # Every RMSNorm but the first takes the residual add before it.
    assert ops.get("onyx::SiluMul") == layers and ops.get("SimplifiedLayerNormalization") == 1, ops
    assert ops.get("com.microsoft::SkipSimplifiedLayerNormalization") == 2 * layers, ops
    for gone in ("Softmax", "Expand", "Neg", "Sigmoid", "Sqrt"):
        assert gone not in ops, (gone, ops)
    run_and_compare(model, llama_inputs(rng, past), run_onyx, tmp_path, extra_args=("--fuse-attention", "on"),
                    label=f"llama fused, past {past} (seed {seed})")


def test_fused_rotary_half_uneven_split(run_onyx, tmp_path):
    """The rotary pattern with halves of unequal size (x[..., 5:] and x[..., :5] of 12): fused
    into onyx::RotaryHalf, and equal to onnxruntime on the original graph."""
    import json
    import onnx
    from onnx import TensorProto, helper
    rng, seed = fresh_rng()
    big = np.iinfo(np.int64).max
    c = lambda name, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, TensorProto.INT64, [len(v)], v))
    nodes = [c("s5", [5]), c("end", [big]), c("z", [0]), c("ax", [-1]), c("one", [1]),
             helper.make_node("Slice", ["x", "s5", "end", "ax", "one"], ["hi"]),
             helper.make_node("Slice", ["x", "z", "s5", "ax", "one"], ["lo"]),
             helper.make_node("Neg", ["hi"], ["nhi"]),
             helper.make_node("Concat", ["nhi", "lo"], ["rot"], axis=-1),
             helper.make_node("Mul", ["cos", "x"], ["xc"]),
             helper.make_node("Mul", ["rot", "sin"], ["rs"]),
             helper.make_node("Add", ["xc", "rs"], ["y"])]
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(nodes, "rot", [f("x", [2, 3, 12]), f("cos", [3, 12]), f("sin", [3, 12])], [f("y", [2, 3, 12])])
    path = tmp_path / "rot.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    proc = run_onyx("run", path, "--json")
    assert proc.returncode == 0, proc.stderr
    ops = json.loads(proc.stdout)["ops"]
    assert ops.get("onyx::RotaryHalf") == 1 and not {"Slice", "Neg", "Concat", "Mul", "Add"} & set(ops), ops
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("x", (2, 3, 12)), ("cos", (3, 12)), ("sin", (3, 12)))}
    run_and_compare(path, feeds, run_onyx, tmp_path, label=f"rotary split 5 of 12 (seed {seed})")


def test_attention_weights_read_elsewhere_are_not_fused(models_dir, run_onyx, tmp_path):
    """The Llama layer with its attention probabilities also a graph output (as an export with
    output_attentions): the attention chain must stay as it is (its Softmax is needed), and the
    outputs, the probabilities among them, equal onnxruntime's."""
    import json
    import onnx
    rng, seed = fresh_rng()
    m = onnx.load(str(models_dir / "llama_layer.onnx"))
    softmax = [n for n in m.graph.node if n.op_type == "Softmax"]
    assert len(softmax) == gen_models.LLAMA["layers"]
    m.graph.output.append(onnx.helper.make_empty_tensor_value_info(softmax[0].output[0]))
    path = tmp_path / "llama_probs.onnx"
    onnx.save(m, str(path))
    proc = run_onyx("run", path, "--fuse-attention", "on", "--json", "--dim", "batch=2", "--dim", "sequence=3",
                    "--dim", "past_sequence=4", "--dim", "total_sequence=7")
    assert proc.returncode == 0, proc.stderr
    ops = json.loads(proc.stdout)["ops"]
    layers = gen_models.LLAMA["layers"]
    assert ops.get("Softmax") == 1 and ops.get("Attention") == layers - 1, ops
    run_and_compare(path, llama_inputs(rng, 5), run_onyx, tmp_path, extra_args=("--fuse-attention", "on"),
                    label=f"llama with probabilities out (seed {seed})")
