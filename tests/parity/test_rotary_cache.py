"""The rotary-cache fusion (src/passes/fuse_rotary_cache.h) on tools/gen_models.py's Llama decoder,
the graph torch.onnx exports for HF Llama: with it on, each layer's rotary embeddings and cache
Concats are one onyx::RotaryCache (`onyx run --json`'s op histogram), and the logits and every
present equal the unfused run's (--fuse-rotary-cache off) on fresh random inputs: float32 and
float16, head sizes 64 and 128, 4 query heads over 2 KV heads, batch 3, past lengths 0, 1 and 17.

On the CPU by default (the fusion forced on); ONYX_TEST_DEVICE=cuda:0 runs the same on a GPU,
where the fusion is on by default (the GPU machine's check of the CUDA kernel in a whole graph).
"""

import json
import os

import numpy as np
import onnx
import pytest

import gen_models
from test_parity import fresh_rng

DEVICE = os.environ.get("ONYX_TEST_DEVICE", "cpu")
BATCH = 3


def config(head_dim):
    return dict(vocab=97, hidden=4 * head_dim, heads=4, kv_heads=2, head_dim=head_dim, ffn=160, layers=2,
                max_pos=64, rope_theta=10000.0, rms_eps=1e-6)


def inputs(rng, c, past, dtype):
    total = past + 1
    mask = np.ones((BATCH, total), np.int64)
    if past >= 2:
        mask[-1, :2] = 0  # left padding in the last row
    feeds = {"input_ids": rng.integers(0, c["vocab"], (BATCH, 1), dtype=np.int64),
             "attention_mask": mask,
             "position_ids": np.full((BATCH, 1), past, np.int64)}
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (BATCH, c["kv_heads"], past, c["head_dim"])).astype(dtype)
    return feeds


@pytest.mark.parametrize("past", [0, 1, 17])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fused_decoder_matches_unfused(run_onyx, tmp_path, dtype, head_dim, past):
    rng, seed = fresh_rng()
    c = config(head_dim)
    m = gen_models.make_llama_layer(c, "llama_rc", seed=int(rng.integers(1 << 30)))
    if dtype == "float16":
        import convert_float_precision as cfp
        cfp.convert(m, onnx.TensorProto.FLOAT16)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    feeds = inputs(rng, c, past, np.float32 if dtype == "float32" else np.float16)
    args = ["run", path, "--device", DEVICE, "--json"]
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    outs, ops = {}, {}
    for label in ("on", "off"):
        proc = run_onyx(*args, "--fuse-rotary-cache", label, "--save-outputs", tmp_path / label)
        assert proc.returncode == 0, proc.stderr
        ops[label] = json.loads(proc.stdout)["ops"]
    assert ops["on"].get("onyx::RotaryCache", 0) == c["layers"], ops["on"]
    assert "onyx::RotaryHalf" not in ops["on"], ops["on"]
    assert "onyx::RotaryCache" not in ops["off"] and ops["off"].get("onyx::RotaryHalf", 0) == 2 * c["layers"], ops["off"]
    names = ["logits"] + [f"present.{i}.{k}" for i in range(c["layers"]) for k in ("key", "value")]
    tol = 1e-5 if dtype == "float32" else 1e-2
    for name in names:
        on = np.load(tmp_path / "on" / f"{name}.npy").astype(np.float64)
        off = np.load(tmp_path / "off" / f"{name}.npy").astype(np.float64)
        assert on.shape == off.shape, (name, on.shape, off.shape)
        if name.startswith("present"):
            assert on.shape[2] == past + 1
        assert np.all(np.isfinite(on)), name
        err = float(np.max(np.abs(on - off))) / max(float(np.max(np.abs(off))), 1e-6)
        print(f"{DEVICE} {dtype} head {head_dim} past {past} {name}: relative difference {err:.2e} (seed {seed})")
        assert err <= tol, f"{name}: fused vs unfused relative difference {err:.3e} (seed {seed})"


def test_generator_keeps_static_cache_and_tokens(run_onyx, tmp_path):
    """The generator's form: the cache rewrite gives each RotaryCache the index (in place); the
    static cache is kept (its load-time check against the growing form passes; a RotaryCache it
    could not rewrite would leave the growing cache) and greedy tokens of a batch of two prompts
    of different lengths equal the unfused decoder's. float32: this graph's float16 copy masks
    padding with float32's minimum, which float16 cannot hold."""
    rng, seed = fresh_rng()
    c = dict(config(64), max_pos=128)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"], "hidden_size": c["hidden"], "head_dim": c["head_dim"],
        "vocab_size": c["vocab"], "max_position_embeddings": c["max_pos"], "bos_token_id": 1, "eos_token_id": 2}))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt_ids": [int(t) for t in rng.integers(3, c["vocab"], n)]})
                                 for n in (7, 3)) + "\n")

    def generate(label):
        proc = run_onyx("generate", folder, "--prompts-file", prompts, "--max-new-tokens", 20, "--greedy", "--json",
                        "--device", DEVICE, "--fuse-attention", "on", "--fuse-rotary-cache", label)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["stats"]["kv_cache"] == "static", out["stats"]
        return [s["generated_ids"] for s in out["sequences"]]

    # Random weights can make a decoder whose first token is EOS: draw again until the unfused
    # decoder says something in both rows (the comparison is only worth making then).
    for _ in range(8):
        m = gen_models.make_llama_layer(c, "llama_rc", seed=int(rng.integers(1 << 30)))
        onnx.save(m, str(folder / "model.onnx"))
        want = generate("off")
        if all(len(set(t)) > 1 for t in want):
            break
    assert all(len(set(t)) > 1 for t in want), want  # a decoder that says something
    got = generate("on")
    print(f"{DEVICE}: tokens {got} (seed {seed})")
    assert got == want, f"fused {got} vs unfused {want} (seed {seed})"
