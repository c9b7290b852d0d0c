"""Parity of the com.microsoft ops that onnxruntime's transformer optimizer (Optimum's --optimize
levels) and its quantizer emit, onyx against onnxruntime (CPU), one node at a time on fresh random
inputs (never zeros); seeds are printed (pytest -s) and in every failure message
(ONYX_PARITY_SEED=<seed> reproduces a run).

Tolerances, relative to the reference output's largest magnitude:
  float ops (QuickGelu and the Gelus, FusedMatMul, FusedConv, FusedGemm, Attention, EmbedLayerNormalization): 1e-5 in float32
    (onyx computes in double; onnxruntime's float kernels and its tanh/erf approximations differ
    from a float64 computation by less);
  integer-input ops whose output is float (QAttention, QGemm to float): 1e-5 as well, since both
    accumulate the integer products exactly and differ only in the float scaling;
  quantized outputs (QLinear*, QGemm to int8/uint8): one step of the output's quantization, the
    code may differ by one where a value falls within a float rounding of a half step (onnxruntime
    evaluates some through lookup tables or fixed-point requantization).
BiasAdd, BiasSplitGelu and QLinearReduceMean have no onnxruntime CPU kernel: they are checked
against numpy in float64.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_contrib_ops import check, fresh_rng, one_node, onyx_outputs, randn, run_ort  # noqa: E402

F32 = TensorProto.FLOAT
TOL = 1e-5


def erf_gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


# ---- the Gelu family and FusedMatMul ----

@pytest.mark.parametrize("op", ["Gelu", "BiasGelu", "FastGelu", "FastGelu_bias", "QuickGelu", "QuickGelu_alpha"])
def test_gelu_family(op, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x = randn(rng, (2, 5, 24), np.float32) * 2
    ins = [("X", x)]
    name, attrs = op.split("_")[0], {}
    if op in ("BiasGelu", "FastGelu_bias"):
        ins.append(("bias", randn(rng, (24,), np.float32)))
    if op == "QuickGelu_alpha":
        attrs["alpha"] = 1.3
    model = one_node(name, ins, [("Y", F32)], attrs, weights={"bias"})
    feeds = {"X": x}
    check(op, onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], TOL, seed)


def test_bias_add_and_bias_split_gelu_against_numpy(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x, skip, bias = randn(rng, (2, 6, 16), np.float32), randn(rng, (2, 6, 16), np.float32), randn(rng, (16,), np.float32)
    model = one_node("BiasAdd", [("X", x), ("bias", bias), ("skip", skip)], [("Y", F32)], {}, weights={"bias"})
    got = onyx_outputs(run_onyx, model, {"X": x, "skip": skip}, tmp_path)["Y"]
    check("BiasAdd", got, (x.astype(np.float64) + bias + skip).astype(np.float32), TOL, seed)
    model = one_node("BiasSplitGelu", [("X", x), ("bias", bias)], [("Y", F32)], {}, weights={"bias"})
    got = onyx_outputs(run_onyx, model, {"X": x}, tmp_path)["Y"]
    s = x.astype(np.float64) + bias
    check("BiasSplitGelu", got, (s[..., :8] * erf_gelu(s[..., 8:])).astype(np.float32), TOL, seed)


# A shape, B shape, attributes
FUSED_MATMUL_CASES = {
    "alpha": ((3, 8), (8, 5), {"alpha": 0.125}),
    "trans_b_batched": ((2, 3, 4, 8), (2, 3, 5, 8), {"transB": 1}),
    "trans_a_broadcast": ((2, 8, 4), (8, 6), {"transA": 1, "alpha": -2.0}),
    "both": ((4, 7, 3), (1, 5, 7), {"transA": 1, "transB": 1}),
    # transBatch reads [d0, d1, .., k] as [d1, .., d0, k]: A [4, 2, 3, 5] is [2, 3, 4, 5]
    "trans_batch_a": ((4, 2, 3, 5), (2, 3, 5, 6), {"transBatchA": 1}),
    "trans_batch_a_trans_a": ((5, 2, 3, 4), (2, 3, 5, 6), {"transBatchA": 1, "transA": 1, "alpha": 0.5}),
    "trans_batch_b": ((2, 3, 4, 5), (5, 2, 3, 6), {"transBatchB": 1}),
    "trans_batch_both_trans_b": ((4, 2, 5), (6, 2, 5), {"transBatchA": 1, "transBatchB": 1, "transB": 1}),
}


@pytest.mark.parametrize("name", list(FUSED_MATMUL_CASES))
def test_fused_matmul(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    sa, sb, attrs = FUSED_MATMUL_CASES[name]
    a, b = randn(rng, sa, np.float32), randn(rng, sb, np.float32)
    model = one_node("FusedMatMul", [("A", a), ("B", b)], [("Y", F32)], attrs)
    feeds = {"A": a, "B": b}
    check(name, onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], TOL, seed)


# ---- FusedConv and FusedGemm (onnxruntime's optimizer: Conv/Gemm + activation) ----

FUSED_ACTIVATIONS = {
    "relu": ("Relu", []), "tanh": ("Tanh", []), "sigmoid": ("Sigmoid", []), "leaky_relu": ("LeakyRelu", [0.2]),
    "clip": ("Clip", [-0.5, 0.7]), "hard_sigmoid": ("HardSigmoid", [0.3, 0.45]),
}


@pytest.mark.parametrize("with_z", [False, True], ids=["no_z", "z"])
@pytest.mark.parametrize("act", list(FUSED_ACTIVATIONS))
def test_fused_conv(act, with_z, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    name, params = FUSED_ACTIVATIONS[act]
    x, w, b = randn(rng, (2, 3, 9, 9), np.float32), randn(rng, (4, 3, 3, 3), np.float32) * 0.4, randn(rng, (4,), np.float32)
    z = randn(rng, (2, 4, 5, 5), np.float32) if with_z else None
    attrs = {"activation": name, "strides": [2, 2], "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    if params:
        attrs["activation_params"] = params
    model = one_node("FusedConv", [("X", x), ("W", w), ("B", b), ("Z", z)], [("Y", F32)], attrs, weights={"W", "B"})
    feeds = {"X": x} | ({"Z": z} if with_z else {})
    check(f"FusedConv {act}", onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], TOL, seed)


GEMM_ACTIVATIONS = {
    "relu": ("Relu", {}), "leaky_relu": ("LeakyRelu", {"activation_alpha": 0.3}), "tanh": ("Tanh", {}),
    "sigmoid": ("Sigmoid", {}), "hard_sigmoid": ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
    "elu": ("Elu", {"activation_alpha": 0.7}), "selu": ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.2}),
    "softsign": ("Softsign", {}), "thresholded_relu": ("ThresholdedRelu", {"activation_alpha": 0.4}),
    "scaled_tanh": ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.5}), "softplus": ("Softplus", {}),
}


@pytest.mark.parametrize("act", list(GEMM_ACTIVATIONS))
def test_fused_gemm(act, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    name, params = GEMM_ACTIVATIONS[act]
    a, b, c = randn(rng, (5, 8), np.float32), randn(rng, (6, 8), np.float32), randn(rng, (6,), np.float32)
    attrs = {"activation": name, "transB": 1, "alpha": 0.8, "beta": 1.3} | params
    model = one_node("FusedGemm", [("A", a), ("B", b), ("C", c)], [("Y", F32)], attrs, weights={"B", "C"})
    feeds = {"A": a}
    check(f"FusedGemm {act}", onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], TOL, seed)


def test_model_saved_by_optimized_onnxruntime_session(run_onyx, tmp_path):
    """A small convolutional net saved from an onnxruntime session at the extended level, whose
    Conv+Relu and Gemm+Relu pairs it fused into FusedConv and FusedGemm."""
    import onnxruntime as ort
    from onnx import numpy_helper
    rng, seed = fresh_rng()
    w1, b1 = randn(rng, (6, 3, 3, 3), np.float32) * 0.3, randn(rng, (6,), np.float32) * 0.1
    w2, b2 = randn(rng, (6, 6, 3, 3), np.float32) * 0.2, randn(rng, (6,), np.float32) * 0.1
    wg, bg = randn(rng, (6 * 4 * 4, 10), np.float32) * 0.1, randn(rng, (10,), np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c2"], ["r2"], alpha=0.1),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["g"]),
             helper.make_node("Relu", ["g"], ["y"])]
    inits = [numpy_helper.from_array(v, n) for n, v in
             [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2), ("wg", wg), ("bg", bg)]]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", F32, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F32, None)], inits)
    src, optimized = tmp_path / "convnet.onnx", tmp_path / "convnet_optimized.onnx"
    import onnx
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(optimized)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    model = onnx.load(str(optimized))
    ops = {n.op_type for n in model.graph.node}
    assert {"FusedConv", "FusedGemm"} <= ops, f"onnxruntime fused into {sorted(ops)}"
    feeds = {"x": randn(rng, (2, 3, 8, 8), np.float32)}
    check("optimized convnet", onyx_outputs(run_onyx, model, feeds, tmp_path)["y"], run_ort(model, feeds)["y"], TOL, seed)


# ---- Attention, QAttention, EmbedLayerNormalization ----

# batch, tokens, heads, head size, mask form, past tokens, unidirectional, attention_bias
ATTENTION_CASES = {
    "plain": (2, 5, 2, 8, None, 0, 0, False),
    "mask_end_positions": (3, 6, 2, 4, "end", 0, 0, False),
    "mask_raw_2d": (2, 6, 4, 4, "raw", 0, 0, False),
    "causal": (2, 5, 2, 8, None, 0, 1, False),
    "past_and_causal": (2, 3, 2, 4, None, 4, 1, False),
    "attention_bias": (2, 4, 2, 4, "raw", 0, 0, True),
}


def attention_mask(rng, form, B, T):
    if form == "end":
        return rng.integers(1, T + 1, B).astype(np.int32)
    if form == "raw":
        m = (rng.random((B, T)) < 0.7).astype(np.int32)
        m[:, 0] = 1
        return m
    return None


@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_attention(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    B, S, N, H, form, P, uni, with_bias = ATTENTION_CASES[name]
    D = N * H
    x, w, bias = randn(rng, (B, S, D), np.float32), randn(rng, (D, 3 * D), np.float32) * 0.3, randn(rng, (3 * D,), np.float32)
    past = randn(rng, (2, B, N, P, H), np.float32) if P else None
    ab = randn(rng, (B, N, S, P + S), np.float32) if with_bias else None
    ins = [("input", x), ("weights", w), ("bias", bias), ("mask_index", attention_mask(rng, form, B, P + S)),
           ("past", past), ("attention_bias", ab)]
    while ins[-1][1] is None:
        ins.pop()
    outs = [("output", F32)] + ([("present", F32)] if P else [])
    model = one_node("Attention", ins, outs, {"num_heads": N, "unidirectional": uni}, weights={"weights", "bias"})
    feeds = {n: a for n, a in ins if a is not None and n not in ("weights", "bias")}
    ref, got = run_ort(model, feeds), onyx_outputs(run_onyx, model, feeds, tmp_path)
    for n, _ in outs:
        check(f"{name} {n}", got[n], ref[n], TOL, seed)


@pytest.mark.parametrize("w_type", [np.int8, np.uint8], ids=["s8", "u8"])
@pytest.mark.parametrize("variant", ["plain", "mask_causal"])
def test_qattention(variant, w_type, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    B, S, N, H = 2, 5, 2, 8
    D = N * H
    x = rng.integers(0, 256, (B, S, D)).astype(np.uint8)
    lo, hi = (-128, 127) if w_type == np.int8 else (0, 255)
    w = rng.integers(lo, hi + 1, (D, 3 * D)).astype(w_type)
    ins = [("input", x), ("weight", w), ("bias", randn(rng, (3 * D,), np.float32)),
           ("input_scale", np.array(0.02, np.float32)), ("weight_scale", np.array(0.004, np.float32)),
           ("mask_index", attention_mask(rng, "raw", B, S) if variant == "mask_causal" else None),
           ("input_zero_point", np.array(128, np.uint8)),
           ("weight_zero_point", np.array(0 if w_type == np.int8 else 127, w_type))]
    attrs = {"num_heads": N, "unidirectional": 1 if variant == "mask_causal" else 0}
    model = one_node("QAttention", ins, [("output", F32)], attrs,
                     weights={"weight", "bias", "input_scale", "weight_scale", "input_zero_point", "weight_zero_point"})
    feeds = {n: a for n, a in ins if n in ("input", "mask_index") and a is not None}
    check(f"QAttention {variant}", onyx_outputs(run_onyx, model, feeds, tmp_path)["output"],
          run_ort(model, feeds)["output"], TOL, seed)


@pytest.mark.parametrize("variant", ["segments_mask", "words_only", "position_ids"])
def test_embed_layer_norm(variant, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    B, S, V, P, H = 2, 6, 30, 16, 32
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    seg = rng.integers(0, 2, (B, S)).astype(np.int32) if variant == "segments_mask" else None
    mask = (rng.random((B, S)) < 0.8).astype(np.int32) if variant == "segments_mask" else None
    pos_ids = rng.integers(0, P, (B, S)).astype(np.int32) if variant == "position_ids" else None
    ins = [("input_ids", ids), ("segment_ids", seg), ("word_embedding", randn(rng, (V, H), np.float32)),
           ("position_embedding", randn(rng, (P, H), np.float32)),
           ("segment_embedding", randn(rng, (2, H), np.float32) if seg is not None else None),
           ("gamma", randn(rng, (H,), np.float32)), ("beta", randn(rng, (H,), np.float32)), ("mask", mask),
           ("position_ids", pos_ids)]
    while ins[-1][1] is None:
        ins.pop()
    outs = [("output", F32), ("mask_index", TensorProto.INT32)]
    if variant != "words_only":
        outs.append(("embedding_sum", F32))
    model = one_node("EmbedLayerNormalization", ins, outs, {"epsilon": 1e-5},
                     weights={"word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"})
    feeds = {n: a for n, a in ins if a is not None and n in ("input_ids", "segment_ids", "mask", "position_ids")}
    ref, got = run_ort(model, feeds), onyx_outputs(run_onyx, model, feeds, tmp_path)
    for n, _ in outs:
        check(f"{variant} {n}", got[n], ref[n], TOL if n != "mask_index" else 0, seed)


# ---- QGemm and the QLinear ops ----

def quantized(rng, shape, dt):
    lo, hi = (-128, 127) if dt == np.int8 else (0, 255)
    return rng.integers(lo, hi + 1, shape).astype(dt)


def qparams(rng, dt, scale):
    zp = np.array(rng.integers(-20, 21) if dt == np.int8 else rng.integers(100, 156), dt)
    return np.array(scale, np.float32), zp


def check_codes(name, got, ref, seed):
    """Quantized outputs: the codes agree within one step (see the module docstring)."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (
        f"{name}: onyx {got.dtype}{list(got.shape)} vs onnxruntime {ref.dtype}{list(ref.shape)} (seed {seed})")
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    print(f"{name}: max code difference {int(diff.max()) if diff.size else 0}, "
          f"{int((diff > 0).sum())} of {diff.size} codes differ")
    assert diff.size == 0 or diff.max() <= 1, f"{name}: codes differ by {int(diff.max())} (seed {seed})"


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op, dt, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    a, b = quantized(rng, (2, 3, 8), dt), quantized(rng, (3, 1), dt)  # b broadcasts
    (sa, za), (sb, zb), (sc, zc) = qparams(rng, dt, 0.05), qparams(rng, dt, 0.03), qparams(rng, dt, 0.08)
    ins = [("A", a), ("A_scale", sa), ("A_zero_point", za), ("B", b), ("B_scale", sb), ("B_zero_point", zb),
           ("C_scale", sc), ("C_zero_point", zc)]
    model = one_node(op, ins, [("C", helper.np_dtype_to_tensor_dtype(np.dtype(dt)))], {},
                     weights={n for n, _ in ins if n not in ("A", "B")})
    feeds = {"A": a, "B": b}
    check_codes(op, onyx_outputs(run_onyx, model, feeds, tmp_path)["C"], run_ort(model, feeds)["C"], seed)


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu", "QLinearGlobalAveragePool"])
def test_qlinear_unary(op, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    dt = np.uint8
    x = quantized(rng, (2, 4, 3, 5), dt)
    (sx, zx), (sy, zy) = qparams(rng, dt, 0.04), qparams(rng, dt, 0.01)
    ins = [("X", x), ("X_scale", sx), ("X_zero_point", zx), ("Y_scale", sy), ("Y_zero_point", zy)]
    attrs = {"alpha": 0.1} if op == "QLinearLeakyRelu" else {"channels_last": 0} if op == "QLinearGlobalAveragePool" else {}
    model = one_node(op, ins, [("Y", TensorProto.UINT8)], attrs, weights={n for n, _ in ins if n != "X"})
    feeds = {"X": x}
    check_codes(op, onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], seed)


def test_qlinear_concat(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    dt = np.int8
    xs = [quantized(rng, (2, k, 3), dt) for k in (2, 4, 1)]
    sy, zy = qparams(rng, dt, 0.06)
    ins = [("Y_scale", sy), ("Y_zero_point", zy)]
    for i, x in enumerate(xs):
        s, z = qparams(rng, dt, 0.02 * (i + 1))
        ins += [(f"X{i}", x), (f"X{i}_scale", s), (f"X{i}_zero_point", z)]
    model = one_node("QLinearConcat", ins, [("Y", TensorProto.INT8)], {"axis": 1},
                     weights={n for n, _ in ins if not (n.startswith("X") and n[1:].isdigit())})
    feeds = {f"X{i}": x for i, x in enumerate(xs)}
    check_codes("QLinearConcat", onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"], seed)


@pytest.mark.parametrize("output", ["float", "quantized"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_qgemm(per_column, output, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    M, K, N = 5, 16, 6
    a, b = quantized(rng, (M, K), np.uint8), quantized(rng, (N, K), np.int8)  # transB, as the quantizer stores it
    sa, za = qparams(rng, np.uint8, 0.03)
    sb = rng.uniform(0.005, 0.02, N if per_column else 1).astype(np.float32).reshape((N,) if per_column else ())
    zb = np.zeros(sb.shape, np.int8)
    c = rng.integers(-3000, 3000, (N,)).astype(np.int32)  # large enough that alpha's part of it shows
    ins = [("A", a), ("a_scale", sa), ("a_zero_point", za), ("B", b), ("b_scale", sb), ("b_zero_point", zb), ("C", c)]
    out_type = F32
    if output == "quantized":
        sy, zy = qparams(rng, np.uint8, 0.2)
        ins += [("y_scale", sy), ("y_zero_point", zy)]
        out_type = TensorProto.UINT8
    model = one_node("QGemm", ins, [("Y", out_type)], {"transB": 1, "alpha": 0.8}, weights={n for n, _ in ins if n != "A"})
    feeds = {"A": a}
    got, ref = onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], run_ort(model, feeds)["Y"]
    if output == "quantized":
        check_codes("QGemm", got, ref, seed)
    else:
        check("QGemm", got, ref, TOL, seed)


# op, input shape, attributes
QLINEAR_FLOAT_OP_CASES = {
    "softmax_last": ("QLinearSoftmax", (2, 3, 10), {"axis": -1, "opset": 13}),
    "softmax_opset12_axis1": ("QLinearSoftmax", (2, 3, 4), {"axis": 1, "opset": 12}),
    "average_pool": ("QLinearAveragePool", (1, 3, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                                            "count_include_pad": 0}),
    "reduce_mean": ("QLinearReduceMean", (2, 5, 6), {"axes": [1], "keepdims": 1}),
}


@pytest.mark.parametrize("name", list(QLINEAR_FLOAT_OP_CASES))
def test_qlinear_via_float_op(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    op, shape, attrs = QLINEAR_FLOAT_OP_CASES[name]
    dt = np.uint8
    x = quantized(rng, shape, dt)
    (sx, zx), (sy, zy) = qparams(rng, dt, 0.05), qparams(rng, dt, 1 / 256 if op == "QLinearSoftmax" else 0.04)
    if op == "QLinearSoftmax":
        zy = np.array(0, dt)  # onnxruntime's QLinearSoftmax takes y_zero_point 0 for uint8
    ins = [("X", x), ("X_scale", sx), ("X_zero_point", zx), ("Y_scale", sy), ("Y_zero_point", zy)]
    model = one_node(op, ins, [("Y", TensorProto.UINT8)], attrs, weights={n for n, _ in ins if n != "X"})
    feeds = {"X": x}
    if op == "QLinearReduceMean":  # no onnxruntime CPU kernel: numpy in float64
        mean = ((x.astype(np.float64) - zx) * sx).mean(axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
        ref = np.clip(np.rint(mean / sy) + zy, 0, 255).astype(np.uint8)
    else:
        ref = run_ort(model, feeds)["Y"]
    check_codes(name, onyx_outputs(run_onyx, model, feeds, tmp_path)["Y"], ref, seed)


def test_qlinear_where(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    dt = np.int8
    c = rng.random((2, 1, 5)) < 0.5
    x, y = quantized(rng, (2, 3, 5), dt), quantized(rng, (3, 1), dt)
    (sx, zx), (sy, zy), (sz, zz) = qparams(rng, dt, 0.03), qparams(rng, dt, 0.05), qparams(rng, dt, 0.04)
    ins = [("C", c), ("X", x), ("x_scale", sx), ("x_zero_point", zx), ("Y", y), ("y_scale", sy), ("y_zero_point", zy),
           ("z_scale", sz), ("z_zero_point", zz)]
    model = one_node("QLinearWhere", ins, [("Z", TensorProto.INT8)], {}, weights={n for n, _ in ins if n not in ("C", "X", "Y")})
    feeds = {"C": c, "X": x, "Y": y}
    check_codes("QLinearWhere", onyx_outputs(run_onyx, model, feeds, tmp_path)["Z"], run_ort(model, feeds)["Z"], seed)


@pytest.mark.parametrize("dt", [np.int16, np.uint16, np.int8], ids=["s16", "u16", "s8"])
def test_contrib_quantize_dequantize(dt, run_onyx, tmp_path):
    """com.microsoft QuantizeLinear/DequantizeLinear (what the quantizer emits for 16-bit types), per axis."""
    rng, seed = fresh_rng()
    x = randn(rng, (2, 4, 3), np.float32) * 50
    scale = rng.uniform(0.01, 0.1, 4).astype(np.float32)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    zp = rng.integers(lo // 4, hi // 4, 4).astype(dt)
    q = one_node("QuantizeLinear", [("x", x), ("scale", scale), ("zp", zp)], [("y", helper.np_dtype_to_tensor_dtype(np.dtype(dt)))],
                 {"axis": 1}, weights={"scale", "zp"})
    got, ref = onyx_outputs(run_onyx, q, {"x": x}, tmp_path)["y"], run_ort(q, {"x": x})["y"]
    assert np.array_equal(got, ref), f"QuantizeLinear codes differ (seed {seed})"
    d = one_node("DequantizeLinear", [("y", ref), ("scale", scale), ("zp", zp)], [("x", F32)], {"axis": 1},
                 weights={"scale", "zp"})
    check("DequantizeLinear", onyx_outputs(run_onyx, d, {"y": ref}, tmp_path)["x"], run_ort(d, {"y": ref})["x"], TOL, seed)
