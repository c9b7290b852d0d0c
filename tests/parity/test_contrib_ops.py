"""Parity of the com.microsoft contrib ops that LLM exporters emit, onyx against onnxruntime (CPU).

Each case is a one-node model built here with onnx.helper, run by onnxruntime and by
`onyx run ... --save-outputs`, on fresh random inputs (never zeros); the seed is printed
(pytest -s) and in every failure message. Reproduce a run with ONYX_PARITY_SEED=<seed>.

Tolerances are relative to the reference output's largest magnitude, per op and dtype, and
cover what onnxruntime itself shows against a float64 reference (onyx computes in double):
  GroupQueryAttention, MultiHeadAttention: float32 2e-5, float16 5e-3
  MatMulNBits: float32 2e-5, float16 5e-3; accuracy_level 4 2e-2 (onnxruntime quantizes A to
    int8 there: against float64 it is off by up to 5e-3 in float32 and 7e-3 in float16; at
    levels 0-3 by 4e-7 in float32 and 4e-4 in float16, which is float16's rounding)
  GatherBlockQuantized: float32 1e-6, float16 2e-3
  (Skip)SimplifiedLayerNormalization: float32 1e-5, float16 2e-3
onyx rounds to float16 where onnxruntime does (rotated queries and keys, the output), so most
float16 cases agree exactly.
"""

import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
TOL = {
    "attention": {np.float32: 2e-5, np.float16: 5e-3},
    "nbits": {np.float32: 2e-5, np.float16: 5e-3},
    "nbits_int8_a": {np.float32: 2e-2, np.float16: 2e-2},
    "gather": {np.float32: 1e-6, np.float16: 2e-3},
    "norm": {np.float32: 1e-5, np.float16: 2e-3},
}


def fresh_rng():
    seed = int(os.environ.get("ONYX_PARITY_SEED", np.random.SeedSequence().entropy))
    print(f"\ncontrib parity seed: {seed}  (rerun with ONYX_PARITY_SEED={seed})")
    return np.random.default_rng(seed), seed


def elem_type(arr):
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def one_node(op, inputs, outputs, attrs, weights=()):
    """A model of one com.microsoft node. `inputs`: (name, array or None) in the node's input
    order (None: omitted); names in `weights` become initializers, the others graph inputs.
    `outputs`: (name, elem_type) pairs, name "" for an omitted output."""
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs], [n for n, _ in outputs],
                            domain="com.microsoft", **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, elem_type(a), a.shape)
                    for n, a in inputs if a is not None and n not in weights]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if a is not None and n in weights]
    graph_outputs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs if n]
    graph = helper.make_graph([node], op.lower(), graph_inputs, graph_outputs, inits)
    return helper.make_model(graph, opset_imports=OPSET, ir_version=10)


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def onyx_outputs(run, model, feeds, tmp_path):
    """Runs `model` with the onyx CLI (`run`: the run_onyx fixture); its outputs by name."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out_dir = tmp_path / "outputs"
    args = ["run", path]
    for name, arr in feeds.items():
        f = tmp_path / f"in_{safe_name(name)}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    args += ["--save-outputs", out_dir]
    proc = run(*args)
    assert proc.returncode == 0, f"onyx failed (rc={proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return {o.name: np.load(out_dir / f"{safe_name(o.name)}.npy") for o in model.graph.output}


def ort_session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run_ort(model, feeds):
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def check(name, got, ref, tol, seed, valid=None):
    """Asserts got ~ ref within tol relative to max|ref|; `valid` (bool array) selects the
    elements that are defined (the rest are unspecified by the op)."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (
        f"{name}: onyx {got.dtype}{list(got.shape)} vs onnxruntime {ref.dtype}{list(ref.shape)} (seed {seed})")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if valid is not None:
        g, r = g[valid], r[valid]
    assert np.all(np.isfinite(g)), f"{name}: onyx output has non-finite values (seed {seed})"
    err = float(np.max(np.abs(g - r))) if r.size else 0.0
    rel = err / max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-6)
    print(f"{name}: max_abs_err={err:.3e} rel_err={rel:.3e} (tol {tol:g})")
    assert rel <= tol, f"{name}: rel_err {rel:.3e} > {tol:g} (max abs err {err:.3e}, seed {seed})"


def randn(rng, shape, dt):
    return rng.standard_normal(shape).astype(dt)


# ---- GroupQueryAttention ----

GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale",
              "q_norm_weight", "k_norm_weight", "query_seqlens"]


def gqa_case(rng, *, B, S, N, kvN, H, seqlens, past=0, dt=np.float32, packed=False, rotary=0, interleaved=0,
             pids=False, bias=False, sink=False, qlens=None, attrs=None):
    """Inputs and attributes of one GroupQueryAttention call; `past` is past_key's length."""
    seqlens = np.array(seqlens, np.int32)
    if qlens is not None:
        total = max(past, int(seqlens.max()) + 1)  # with query_seqlens only an upper bound of every row
    elif past == 0 or (S > 1 and B > 1):
        total = S  # a first prompt (total_sequence_length == sequence_length)
    else:
        total = int(seqlens.max()) + 1  # a decode step, or a prompt after a past (batch 1)
    f = {n: None for n in GQA_INPUTS}
    if packed:
        f["query"] = randn(rng, (B, S, (N + 2 * kvN) * H), dt)
    else:
        f["query"] = randn(rng, (B, S, N * H), dt)
        f["key"] = randn(rng, (B, S, kvN * H), dt)
        f["value"] = randn(rng, (B, S, kvN * H), dt)
    if past:
        f["past_key"] = randn(rng, (B, kvN, past, H), dt)
        f["past_value"] = randn(rng, (B, kvN, past, H), dt)
    f["seqlens_k"] = seqlens
    f["total_sequence_length"] = np.array(total, np.int32)
    a = {"num_heads": N, "kv_num_heads": kvN, **(attrs or {})}
    if rotary:
        angles = rng.uniform(0, 2 * np.pi, (64, rotary))
        f["cos_cache"], f["sin_cache"] = np.cos(angles).astype(dt), np.sin(angles).astype(dt)
        a.update(do_rotary=1, rotary_interleaved=interleaved)
    if pids:
        f["position_ids"] = rng.integers(0, 64 - S, (B, 1)) + np.arange(S)[None, :]
    if bias:
        f["attention_bias"] = randn(rng, (B, 1, S, max(total, 1)), dt)
    if sink:
        f["head_sink"] = randn(rng, (N,), dt)
    if qlens is not None:
        f["query_seqlens"] = np.array(qlens, np.int32)
    return f, a


def gqa_model(f, a, dt):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    last = max(i for i, n in enumerate(GQA_INPUTS) if f[n] is not None)
    ins = [(n, f[n]) for n in GQA_INPUTS[:last + 1]]
    return one_node("GroupQueryAttention", ins, [("output", t), ("present_key", t), ("present_value", t)], a)


def ort_gqa_shared(model, feeds):
    """onnxruntime with present_key/present_value bound to past's own buffers (share-buffer mode)."""
    sess = ort_session(model)
    io = sess.io_binding()
    # The OrtValues borrow these arrays' memory: keep them alive until the outputs are read.
    past_k, past_v = feeds["past_key"].copy(), feeds["past_value"].copy()
    pk = ort.OrtValue.ortvalue_from_numpy(past_k)
    pv = ort.OrtValue.ortvalue_from_numpy(past_v)
    for n, a in feeds.items():
        if n not in ("past_key", "past_value"):
            io.bind_cpu_input(n, a)
    io.bind_ortvalue_input("past_key", pk)
    io.bind_ortvalue_input("past_value", pv)
    io.bind_ortvalue_output("present_key", pk)
    io.bind_ortvalue_output("present_value", pv)
    io.bind_output("output")
    sess.run_with_iobinding(io)
    out = {"output": io.get_outputs()[2].numpy(), "present_key": past_k.copy(), "present_value": past_v.copy()}
    assert np.array_equal(out["present_key"], pk.numpy()), "onnxruntime did not write present_key into past's buffer"
    return out


GQA_CASES = {
    # prompts (no past): row 1 right-padded (seqlens_k < S - 1)
    "prompt": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 2]),
    "prompt_mqa_rotary": dict(B=2, S=6, N=4, kvN=1, H=16, seqlens=[5, 3], rotary=8),
    "prompt_rotary_interleaved": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 4], rotary=8, interleaved=1),
    "prompt_rotary_partial": dict(B=1, S=4, N=2, kvN=2, H=32, seqlens=[3], rotary=8),
    "prompt_position_ids": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[3, 3], rotary=8, pids=True),
    "prompt_window": dict(B=2, S=7, N=4, kvN=2, H=16, seqlens=[6, 3], attrs={"local_window_size": 3}),
    "prompt_softcap": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 2], attrs={"softcap": 1.5}),
    "prompt_packed_rotary": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 3], packed=True, rotary=8),
    "prompt_bias_sink": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[3, 3], bias=True, sink=True),
    "prompt_smooth_scale": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[3, 1],
                                attrs={"smooth_softmax": 1, "scale": 0.3}),
    "prompt_not_causal": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[3, 2], attrs={"causal": 0}),
    "prompt_fp16_rotary": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 2], rotary=8, dt=np.float16),
    # a prompt into a buffer of the maximum length (shared-buffer layout), and after a past
    "prompt_into_buffer": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[3, 1], past=10, rotary=8),
    "prompt_after_past": dict(B=1, S=3, N=4, kvN=2, H=16, seqlens=[7], past=10, rotary=8),
    # decode steps: rows of different lengths in a buffer of the maximum length
    "decode": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[6, 2, 9], past=12),
    "decode_growing_buffer": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[6, 2, 9], past=9, rotary=8),
    "decode_rotary": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[6, 2, 9], past=12, rotary=8),
    "decode_rotary_interleaved_pids": dict(B=2, S=1, N=4, kvN=4, H=16, seqlens=[6, 9], past=12, rotary=8,
                                           interleaved=1, pids=True),
    "decode_window_rotary": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[6, 2, 9], past=12, rotary=8,
                                 attrs={"local_window_size": 4}),
    "decode_softcap_sink": dict(B=2, S=1, N=4, kvN=2, H=16, seqlens=[5, 10], past=12, sink=True,
                                attrs={"softcap": 2.0}),
    "decode_bias": dict(B=2, S=1, N=4, kvN=2, H=16, seqlens=[5, 10], past=12, bias=True),
    "decode_packed": dict(B=2, S=1, N=4, kvN=2, H=16, seqlens=[3, 8], past=12, packed=True, rotary=8),
    "decode_fp16": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[6, 2, 9], past=12, rotary=8, dt=np.float16,
                        attrs={"local_window_size": 5}),
    # right-padded chunks (query_seqlens): row b's first qlens[b] tokens are real; 0 is an idle row
    "chunk_query_seqlens": dict(B=3, S=4, N=4, kvN=2, H=16, seqlens=[6, 4, 2], qlens=[4, 2, 0], past=12),
    "chunk_query_seqlens_rotary_window": dict(B=2, S=4, N=4, kvN=2, H=16, seqlens=[9, 3], qlens=[3, 4], past=12,
                                              rotary=8, attrs={"local_window_size": 4}),
    # sliding_window_cache (Gemma 2's local layers): past/present of capacity C hold the last positions
    "window_cache_decode": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[5, 12, 20], past=8, rotary=8,
                                attrs={"local_window_size": 8, "sliding_window_cache": 1}),
    "window_cache_decode_slack": dict(B=3, S=1, N=4, kvN=2, H=16, seqlens=[9, 13, 30], past=10, rotary=8,
                                      attrs={"local_window_size": 6, "sliding_window_cache": 1, "softcap": 3.0}),
    "window_cache_decode_unshared": dict(B=2, S=1, N=4, kvN=2, H=16, seqlens=[4, 17], past=8, shared=False,
                                         attrs={"local_window_size": 8, "sliding_window_cache": 1}),
    "window_cache_prompt": dict(B=2, S=5, N=4, kvN=2, H=16, seqlens=[4, 4], past=8, rotary=8,
                                attrs={"local_window_size": 8, "sliding_window_cache": 1}),
    "window_cache_prompt_over_capacity": dict(B=2, S=12, N=4, kvN=2, H=16, seqlens=[11, 11], past=8, rotary=8,
                                              attrs={"local_window_size": 6, "sliding_window_cache": 1}),
    "window_cache_chunk_query_seqlens": dict(B=2, S=3, N=4, kvN=2, H=16, seqlens=[10, 5], qlens=[3, 1], past=8,
                                             rotary=8, attrs={"local_window_size": 6, "sliding_window_cache": 1}),
    "window_cache_prompt_after_past_fp16": dict(B=1, S=3, N=4, kvN=2, H=16, seqlens=[14], past=10, rotary=8,
                                                dt=np.float16,
                                                attrs={"local_window_size": 6, "sliding_window_cache": 1}),
}


def window_cache_held(T, capacity, window):
    """Positions a window cache holds after T tokens (onnxruntime's layout)."""
    if T <= capacity:
        return T
    gap = capacity - window + 1
    return T - gap * -(-(T - capacity) // gap)


@pytest.mark.parametrize("name", list(GQA_CASES))
def test_group_query_attention(name, run_onyx, tmp_path):
    """Prompts and decode steps; with a past of the maximum length, onnxruntime runs in share-buffer
    mode (present bound to past's buffer) and onyx without aliasing: the bytes must agree."""
    rng, seed = fresh_rng()
    case = dict(GQA_CASES[name])
    dt = case.pop("dt", np.float32)
    want_shared = case.pop("shared", True)
    f, a = gqa_case(rng, dt=dt, **case)
    model = gqa_model(f, a, dt)
    feeds = {n: v for n, v in f.items() if v is not None}
    total = int(f["total_sequence_length"])
    windowed = a.get("sliding_window_cache") == 1
    shared = want_shared and f["past_key"] is not None and (windowed or f["past_key"].shape[2] >= total)
    ref = ort_gqa_shared(model, feeds) if shared else run_ort(model, feeds)
    got = onyx_outputs(run_onyx, model, feeds, tmp_path)
    tol = TOL["attention"][dt]
    out_valid = None
    if f["query_seqlens"] is not None:  # the outputs of a chunk's padding tokens are unspecified
        out_valid = np.zeros(ref["output"].shape, bool)
        for b, q in enumerate(f["query_seqlens"]):
            out_valid[b, :q] = True
    check(f"{name} output", got["output"], ref["output"], tol, seed, out_valid)
    for n in ("present_key", "present_value"):
        valid = None
        if not shared:  # positions past each row's length are unspecified
            valid = np.zeros(ref[n].shape, bool)
            for b, k in enumerate(f["seqlens_k"]):
                held = window_cache_held(k + 1, f["past_key"].shape[2], a["local_window_size"]) if windowed else k + 1
                valid[b, :, :held] = True
        check(f"{name} {n}", got[n], ref[n], tol, seed, valid)


# ---- MatMulNBits, GatherBlockQuantized: block-quantized weights ----

def pack_bits(values, bits):
    """Packs unsigned `bits`-bit values along the last axis into bytes, the first in the low bits."""
    per = 8 // bits
    n = values.shape[-1]
    out = np.zeros(values.shape[:-1] + ((n + per - 1) // per,), np.uint8)
    for i in range(n):
        out[..., i // per] |= (values[..., i].astype(np.uint8) << (bits * (i % per))).astype(np.uint8)
    return out


def nbits_weights(rng, N, K, block, bits, zp, dt):
    """B [N, k_blocks, blob], scales, zero points (None, packed uint8 or of A's type)."""
    kb = -(-K // block)
    q = rng.integers(0, 2 ** bits, (N, kb, block)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (N, kb)).astype(dt)
    zero = None
    if zp == "packed":
        zero = pack_bits(rng.integers(0, 2 ** bits, (N, kb)), bits)
    elif zp == "float":
        zero = rng.uniform(0, 2 ** bits - 1, (N, kb)).astype(dt)
    return pack_bits(q, bits), scales, zero


# (M or A's shape, K, N, block_size, bits, zero points, bias, dtype, accuracy_level)
NBITS_CASES = {
    **{f"b{bits}_block{block}": ((3, ), 2 * block + (block // 2 if i % 2 else 0), 24, block, bits,
                                 ["none", "packed", "float"][i % (2 if bits == 8 else 3)], i % 2 == 0, np.float32, 0)
       for bits in (2, 4, 8) for i, block in enumerate((16, 32, 64, 128, 256))},
    "b4_zp_float_bias_padded": ((5, ), 100, 12, 32, 4, "float", True, np.float32, 0),
    "b8_zp_packed_bias_padded": ((5, ), 100, 12, 32, 8, "packed", True, np.float32, 0),
    "b2_zp_packed_padded": ((5, ), 70, 12, 16, 2, "packed", True, np.float32, 0),
    "b4_batched_a": ((2, 3), 64, 20, 32, 4, "packed", True, np.float32, 0),
    "b4_vector_a": ((), 80, 16, 16, 4, "packed", False, np.float32, 0),
    "b4_accuracy1": ((5, ), 256, 32, 32, 4, "packed", False, np.float32, 1),
    "b4_accuracy4_int8_a": ((5, ), 256, 32, 32, 4, "packed", True, np.float32, 4),
    "b4_fp16": ((5, ), 256, 32, 32, 4, "packed", True, np.float16, 0),
    "b4_fp16_zp_float_padded": ((5, ), 80, 8, 16, 4, "float", True, np.float16, 0),
    "b8_fp16": ((5, ), 96, 8, 64, 8, "none", True, np.float16, 0),
    "b4_fp16_accuracy4": ((5, ), 128, 16, 32, 4, "packed", False, np.float16, 4),
}


@pytest.mark.parametrize("name", list(NBITS_CASES))
def test_matmul_nbits(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    lead, K, N, block, bits, zp, bias, dt, level = NBITS_CASES[name]
    b, scales, zero = nbits_weights(rng, N, K, block, bits, zp, dt)
    a = randn(rng, (*lead, K), dt)
    ins = [("A", a), ("B", b), ("scales", scales), ("zero_points", zero), ("g_idx", None),
           ("bias", randn(rng, (N,), dt) if bias else None)]
    while ins[-1][1] is None:
        ins.pop()
    model = one_node("MatMulNBits", ins, [("Y", helper.np_dtype_to_tensor_dtype(np.dtype(dt)))],
                     {"K": K, "N": N, "block_size": block, "bits": bits, "accuracy_level": level},
                     weights={"B", "scales", "zero_points", "bias"})
    ref = run_ort(model, {"A": a})
    got = onyx_outputs(run_onyx, model, {"A": a}, tmp_path)
    check(f"{name} Y", got["Y"], ref["Y"], TOL["nbits_int8_a" if level == 4 else "nbits"][dt], seed)


# (data shape (unpacked), bits, block_size, zero points, indices, dtype)
GBQ_CASES = {
    "b4_block16": ((50, 64), 4, 16, False, [[1, 5, 49], [0, 2, -1]], np.float32),
    "b4_block32_zp": ((50, 64), 4, 32, True, [[1, 5, 49], [0, 2, 3]], np.float32),
    "b4_block128_zp_padded": ((40, 72), 4, 128, True, [3, 4, -40], np.float32),
    "b8_block16_zp": ((50, 64), 8, 16, True, [3, 4], np.float32),
    "b8_block64": ((30, 96), 8, 64, False, [[7], [29]], np.float32),
    "b2_block16_zp": ((50, 64), 2, 16, True, [3, 4], np.float32),
    "b4_fp16_zp": ((50, 64), 4, 16, True, [[3, 4, 5]], np.float16),
    "b4_rank3": ((6, 5, 64), 4, 32, True, [2, 0], np.float32),
    "b4_out_of_range_index": ((20, 32), 4, 16, True, [1, 20, -21, 7], np.float32),
}


@pytest.mark.parametrize("name", list(GBQ_CASES))
def test_gather_block_quantized(name, run_onyx, tmp_path):
    """uint8 data packed along the last axis (quantize_axis), gathered on axis 0."""
    rng, seed = fresh_rng()
    shape, bits, block, zp, indices, dt = GBQ_CASES[name]
    kb = -(-shape[-1] // block)
    q = rng.integers(0, 2 ** bits, shape)
    scales = rng.uniform(0.01, 0.1, (*shape[:-1], kb)).astype(dt)
    zero = pack_bits(rng.integers(0, 2 ** bits, (*shape[:-1], kb)), bits) if zp else None
    idx = np.array(indices, np.int64 if len(shape) == 2 else np.int32)
    ins = [("data", pack_bits(q, bits)), ("indices", idx), ("scales", scales), ("zero_points", zero)]
    if zero is None:
        ins.pop()
    model = one_node("GatherBlockQuantized", ins, [("Y", helper.np_dtype_to_tensor_dtype(np.dtype(dt)))],
                     {"bits": bits, "block_size": block, "gather_axis": 0, "quantize_axis": len(shape) - 1},
                     weights={"data", "scales", "zero_points"})
    ref = run_ort(model, {"indices": idx})
    got = onyx_outputs(run_onyx, model, {"indices": idx}, tmp_path)
    check(f"{name} Y", got["Y"], ref["Y"], TOL["gather"][dt], seed)


# ---- MultiHeadAttention ----

MHA_INPUTS = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value"]

# B, S (queries), L (new keys), N, H, Hv, P (past), and what else the call has.
MHA_CASES = {
    "self": dict(B=2, S=4, L=4, N=2, H=8),
    "cross_v_head": dict(B=2, S=3, L=5, N=2, H=8, Hv=4),
    "bias": dict(B=2, S=3, L=5, N=4, H=8, bias=True),
    "padding_mask_2d": dict(B=2, S=3, L=5, N=2, H=8, mask="2d"),
    "padding_mask_2d_filter": dict(B=2, S=3, L=5, N=2, H=8, mask="2d", attrs={"mask_filter_value": -3.0}),
    "padding_mask_lengths": dict(B=3, S=3, L=5, N=2, H=8, mask="1d"),
    "padding_mask_3d": dict(B=2, S=3, L=5, N=2, H=8, mask="3d"),
    "attention_bias": dict(B=2, S=3, L=5, N=2, H=8, attn_bias=(2, 2)),
    "attention_bias_broadcast": dict(B=2, S=3, L=5, N=4, H=8, attn_bias=(1, 4)),
    "unidirectional": dict(B=2, S=5, L=5, N=2, H=8, attrs={"unidirectional": 1}),
    "decode_past": dict(B=2, S=1, L=1, N=2, H=8, P=6, attrs={"unidirectional": 1}, bias=True),
    "prompt_past_mask_bias": dict(B=2, S=3, L=3, N=2, H=8, P=4, mask="2d", attn_bias=(1, 2),
                                  attrs={"unidirectional": 1}),
    "kv_bnsh": dict(B=2, S=3, L=5, N=2, H=8, bnsh=True, mask="2d"),
    "kv_bnsh_bias": dict(B=2, S=3, L=5, N=2, H=8, bnsh=True, bias=True),
    "scale": dict(B=2, S=3, L=5, N=2, H=8, attrs={"scale": 0.2}),
    "fp16": dict(B=2, S=3, L=5, N=2, H=8, mask="2d", dt=np.float16),
    "fp16_past_bias": dict(B=2, S=1, L=1, N=2, H=8, P=5, bias=True, dt=np.float16),
}


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multi_head_attention(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    c = dict(MHA_CASES[name])
    B, S, L, N, H = c["B"], c["S"], c["L"], c["N"], c["H"]
    Hv, P, dt = c.get("Hv", H), c.get("P", 0), c.get("dt", np.float32)
    T = P + L
    f = {n: None for n in MHA_INPUTS}
    f["query"] = randn(rng, (B, S, N * H), dt)
    if c.get("bnsh"):
        f["key"], f["value"] = randn(rng, (B, N, L, H), dt), randn(rng, (B, N, L, Hv), dt)
    else:
        f["key"], f["value"] = randn(rng, (B, L, N * H), dt), randn(rng, (B, L, N * Hv), dt)
    if c.get("bias"):
        f["bias"] = randn(rng, (2 * N * H + N * Hv,), dt)
    mask = c.get("mask")
    if mask == "2d":  # padding on the right of row 0, on the left of row 1; every row sees a key
        m = np.ones((B, T), np.int32)
        m[0, -2:] = 0
        m[-1, :1] = 0
        f["key_padding_mask"] = m
    elif mask == "1d":
        f["key_padding_mask"] = rng.integers(1, T + 1, (B,)).astype(np.int32)
    elif mask == "3d":
        m = rng.integers(0, 2, (B, S, T)).astype(np.int32)
        m[..., 0] = 1
        f["key_padding_mask"] = m
    if c.get("attn_bias"):
        f["attention_bias"] = randn(rng, (*c["attn_bias"], S, T), dt)
    if P:
        f["past_key"], f["past_value"] = randn(rng, (B, N, P, H), dt), randn(rng, (B, N, P, Hv), dt)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    last = max(i for i, n in enumerate(MHA_INPUTS) if f[n] is not None)
    model = one_node("MultiHeadAttention", [(n, f[n]) for n in MHA_INPUTS[:last + 1]],
                     [("output", t), ("present_key", t), ("present_value", t)],
                     {"num_heads": N, **c.get("attrs", {})})
    feeds = {n: v for n, v in f.items() if v is not None}
    ref = run_ort(model, feeds)
    got = onyx_outputs(run_onyx, model, feeds, tmp_path)
    for n in ("output", "present_key", "present_value"):
        check(f"{name} {n}", got[n], ref[n], TOL["attention"][dt], seed)



# ---- SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization (RMSNorm) ----

F32 = TensorProto.FLOAT

# x shape, scale shape, axis, x dtype, scale dtype, epsilon
SLN_CASES = {
    "last_axis": ((2, 3, 64), (64,), -1, np.float32, np.float32, 1e-6),
    "axis1": ((2, 3, 16), (3, 16), 1, np.float32, np.float32, 1e-5),
    "fp16": ((2, 5, 64), (64,), -1, np.float16, np.float16, 1e-6),
    "fp16_x_float_scale": ((2, 5, 32), (32,), -1, np.float16, np.float32, 1e-6),
    "float_x_fp16_scale": ((4, 32), (32,), -1, np.float32, np.float16, 1e-5),
}


@pytest.mark.parametrize("name", list(SLN_CASES))
def test_simplified_layer_norm(name, run_onyx, tmp_path):
    """ONNX-domain SimplifiedLayerNormalization (onnxruntime has no com.microsoft one): Y has the
    scale's type, inv_std_var float32 (stash_type 1)."""
    rng, seed = fresh_rng()
    xs, ss, axis, xt, st, eps = SLN_CASES[name]
    x, scale = randn(rng, xs, xt), randn(rng, ss, st)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv_std_var"], axis=axis,
                            epsilon=eps)
    graph = helper.make_graph(
        [node], "sln", [helper.make_tensor_value_info("x", elem_type(x), xs),
                        helper.make_tensor_value_info("scale", elem_type(scale), ss)],
        [helper.make_tensor_value_info("y", elem_type(scale), None),
         helper.make_tensor_value_info("inv_std_var", F32, None)])
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=10)
    feeds = {"x": x, "scale": scale}
    ref = run_ort(model, feeds)
    got = onyx_outputs(run_onyx, model, feeds, tmp_path)
    tol = TOL["norm"][np.float16 if np.float16 in (xt, st) else np.float32]
    for n in ("y", "inv_std_var"):
        check(f"{name} {n}", got[n], ref[n], tol, seed)


# x shape, skip shape, bias, beta (SkipLayerNormalization), outputs wanted, dtype
SKIP_CASES = {
    "simplified_bias_all_outputs": ("SkipSimplifiedLayerNormalization", (2, 3, 64), (2, 3, 64), True, False,
                                    ("output", "mean", "inv_std_var", "input_skip_bias_sum"), np.float32),
    "simplified_sum_only": ("SkipSimplifiedLayerNormalization", (2, 3, 64), (2, 3, 64), False, False,
                            ("output", "", "", "input_skip_bias_sum"), np.float32),
    "simplified_tokens_2d": ("SkipSimplifiedLayerNormalization", (6, 32), (6, 32), True, False,
                             ("output", "", "inv_std_var"), np.float32),
    "simplified_skip_broadcast": ("SkipSimplifiedLayerNormalization", (2, 3, 32), (3, 32), True, False,
                                  ("output", "", "", "input_skip_bias_sum"), np.float32),
    "simplified_fp16": ("SkipSimplifiedLayerNormalization", (2, 3, 64), (2, 3, 64), True, False,
                        ("output", "mean", "inv_std_var", "input_skip_bias_sum"), np.float16),
    "layer_norm_beta_bias": ("SkipLayerNormalization", (2, 3, 32), (2, 3, 32), True, True,
                             ("output", "mean", "inv_std_var", "input_skip_bias_sum"), np.float32),
    "layer_norm_fp16": ("SkipLayerNormalization", (2, 3, 32), (2, 3, 32), True, True,
                        ("output", "mean", "inv_std_var", "input_skip_bias_sum"), np.float16),
}


@pytest.mark.parametrize("name", list(SKIP_CASES))
def test_skip_layer_norm(name, run_onyx, tmp_path):
    """com.microsoft Skip(Simplified)LayerNormalization: output, mean and inv_std_var (float32),
    input_skip_bias_sum (the residual the next layer reads)."""
    rng, seed = fresh_rng()
    op, xs, ks, bias, beta, outs, dt = SKIP_CASES[name]
    h = xs[-1]
    ins = [("input", randn(rng, xs, dt)), ("skip", randn(rng, ks, dt)), ("gamma", randn(rng, (h,), dt))]
    if op == "SkipLayerNormalization":
        ins.append(("beta", randn(rng, (h,), dt) if beta else None))
    ins.append(("bias", randn(rng, (h,), dt) if bias else None))
    while ins[-1][1] is None:
        ins.pop()
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    types = {"output": t, "mean": F32, "inv_std_var": F32, "input_skip_bias_sum": t}
    model = one_node(op, ins, [(n, types.get(n)) for n in outs], {"epsilon": 1e-6}, weights={"gamma", "beta", "bias"})
    feeds = {n: a for n, a in ins if a is not None and n in ("input", "skip")}
    ref = run_ort(model, feeds)
    got = onyx_outputs(run_onyx, model, feeds, tmp_path)
    for n in outs:
        if n:
            check(f"{name} {n}", got[n], ref[n], TOL["norm"][dt], seed)
