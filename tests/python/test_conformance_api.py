"""The ONNX node tests and the parity models, run through the Python API.

The conformance ctest runs the node tests through the C++ API (tests/conformance/runner.cpp);
here the same tests go through onyx.InferenceSession (the model's bytes in, numpy feeds, numpy
outputs) with the runner's tolerances, and at least the committed baseline must pass. A worker
process runs them in turn and reports each; a test that kills it counts as failed and the next
worker goes on after it.

The parity models (tools/gen_models.py: MLP, BERT layer, Llama layer with a past) run through
onyx.InferenceSession against onnxruntime on fresh random inputs.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
def node_baseline():
    """The node set's count in the C++ runner's ratchet ("node COUNT" lines, or a bare count)."""
    for line in (REPO / "tests" / "conformance" / "baseline.txt").read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "node":
            return int(fields[1])
        if len(fields) == 1 and fields[0].isdigit():
            return int(fields[0])
    raise ValueError("tests/conformance/baseline.txt has no node count")


BASELINE = node_baseline()

WORKER = r"""
import glob, os, sys
import numpy as np
import onnx
from onnx import numpy_helper
import onyx

TOL = {"float32": (1e-3, 1e-5), "float64": (1e-3, 1e-5), "float16": (1e-2, 1e-3)}

NARROW = {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn",
          "int4", "uint4", "int2", "uint2"}

def read(path, type_proto):
    kind = type_proto.WhichOneof("value")
    proto = {"sequence_type": onnx.SequenceProto, "optional_type": onnx.OptionalProto}.get(kind, onnx.TensorProto)()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    if kind == "sequence_type":
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        return numpy_helper.to_optional(proto)
    return numpy_helper.to_array(proto)

def same(got, want):
    if isinstance(want, list) or want is None:
        if want is None or got is None:
            return "" if got is None and want is None else f"{got!r} vs {want!r}"
        if not isinstance(got, list) or len(got) != len(want):
            return f"a sequence of {len(want)} expected"
        for g, w in zip(got, want):
            why = same(g, w) if isinstance(w, list) else same(np.asarray(g), w)
            if why:
                return why
        return ""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "USO":
        return "" if [str(x) for x in got.reshape(-1)] == [str(x) for x in want.reshape(-1)] else "strings differ"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    name = want.dtype.name
    if name in NARROW:  # their values, NaN equal to NaN
        return "" if np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True) else "values differ"
    if name == "bfloat16":
        rtol, atol = 2e-2, 1e-2
    else:
        rtol, atol = TOL.get(name, (0, 0))
    if rtol == 0:
        return "" if np.array_equal(got, want) else "values differ"
    a, b = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(a) | np.isnan(b)
    inf = np.isinf(a) | np.isinf(b)
    ok = np.where(nan, np.isnan(a) & np.isnan(b),
                  np.where(inf, a == b, np.abs(a - b) <= atol + rtol * np.abs(b)))
    return "" if ok.all() else f"{int((~ok).sum())} elements differ"

for d in sys.argv[1:]:
    print("START", os.path.basename(d), flush=True)
    try:
        with open(os.path.join(d, "model.onnx"), "rb") as f:
            sess = onyx.InferenceSession(f.read())
        names = [i.name for i in sess.get_inputs()]
        model = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        in_types = {v.name: v.type for v in model.graph.input}
        out_types = [v.type for v in model.graph.output]
        sets = sorted(glob.glob(os.path.join(d, "test_data_set_*")))
        why = ""
        key = lambda p: int(p.rsplit("_", 1)[1][:-3])
        for s in sets:
            ins = [read(p, in_types[n]) for p, n in zip(sorted(glob.glob(os.path.join(s, "input_*.pb")), key=key), names)]
            outs = [read(p, t) for p, t in zip(sorted(glob.glob(os.path.join(s, "output_*.pb")), key=key), out_types)]
            got = sess.run(None, dict(zip(names, ins)))
            if len(got) != len(outs):
                why = f"{len(got)} outputs, expected {len(outs)}"
            for g, w in zip(got, outs):
                why = why or same(g, w)
            if why:
                break
        print("PASS" if not why else "FAIL " + why, os.path.basename(d), flush=True)
    except Exception as e:
        print("FAIL", os.path.basename(d), type(e).__name__, str(e)[:200].replace("\n", " "), flush=True)
"""


def node_test_dirs():
    import onnx
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    return sorted(str(d) for d in root.iterdir() if (d / "model.onnx").is_file())


def test_node_tests_through_python_api(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    remaining = node_test_dirs()
    results = {}
    while remaining:
        proc = subprocess.run([sys.executable, str(worker), *remaining], capture_output=True, text=True, timeout=1200)
        started = None
        for line in proc.stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word == "START":
                started = rest
            elif word in ("PASS", "FAIL"):
                results[started] = (word, rest)
                started = None
        if started is not None:  # the worker died in this test
            results[started] = ("FAIL", f"the worker died (exit {proc.returncode}): {proc.stderr[-300:]}")
        elif proc.returncode != 0:
            pytest.fail(f"the worker failed outside a test (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        remaining = [d for d in remaining if os.path.basename(d) not in results]
    passed = sorted(n for n, (w, _) in results.items() if w == "PASS")
    died = sorted(n for n, (w, r) in results.items() if "worker died" in r)
    print(f"\nnode tests through the Python API: {len(passed)} of {len(results)} pass "
          f"(C++ runner baseline {BASELINE}); worker died in {len(died)}: {died[:10]}")
    assert len(passed) >= BASELINE, (
        f"{len(passed)} node tests pass through the Python API, below the C++ runner's baseline {BASELINE}")


@pytest.fixture(scope="module")
def parity_models(tmp_path_factory):
    out = tmp_path_factory.mktemp("parity_models")
    subprocess.run([sys.executable, str(REPO / "tools" / "gen_models.py"), "--out", str(out), "--only",
                    "mlp", "bert_layer", "llama_layer"], check=True, capture_output=True)
    return out


@pytest.mark.parametrize("name, past", [("mlp", 0), ("bert_layer", 0), ("llama_layer", 0), ("llama_layer", 5)])
def test_parity_models_through_python_api(name, past, parity_models):
    import onnxruntime as ort
    import onyx
    sys.path.insert(0, str(REPO / "tests" / "parity"))
    import test_parity as tp
    out = parity_models
    seed = int(np.random.SeedSequence().entropy)
    rng = np.random.default_rng(seed)
    make = {"mlp": tp.mlp_inputs, "bert_layer": tp.bert_inputs, "llama_layer": tp.llama_inputs}[name]
    feeds = make(rng, past)
    model = str(out / f"{name}.onnx")
    got = onyx.InferenceSession(model).run(None, feeds)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    lines = [tp.compare(o.name, g, w) for o, g, w in zip(sess.get_outputs(), got, want)]
    assert all(ok for ok, _ in lines), f"seed {seed}:\n" + "\n".join(line for _, line in lines)
