"""The CPU session's load-time rewrites (src/passes/fuse_cpu.h) and fast kernels, each on a small
graph shaped like an exporter's: the rewrite fires (`onyx info` shows the fused op and not the
chain), and the fused run matches the unfused one (--no-fuse) and onnxruntime on fresh random
inputs. Odd sizes throughout, so every vector tail and register tile edge is crossed."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from test_parity import compare, fresh_rng

F = T.FLOAT


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def model(nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def run_and_compare(run_onyx, tmp_path, m, feeds, want_ops, gone_ops):
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    outs = {}
    for label, extra in (("fused", ["--json"]), ("unfused", ["--no-fuse"])):
        args = ["run", path, "--save-outputs", tmp_path / label, *extra]
        for name, arr in feeds.items():
            np.save(tmp_path / f"{name}.npy", arr)
            args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
        proc = run_onyx(*args)
        assert proc.returncode == 0, proc.stderr
        outs[label] = tmp_path / label
        if label == "fused":  # the op histogram after load-time folding and fusion
            ops = json.loads(proc.stdout)["ops"]
    for op in want_ops:
        assert ops.get(op, 0) >= 1, f"{op} not in the prepared graph: {ops}"
    for op in gone_ops:
        assert op not in ops, f"{op} still in the prepared graph: {ops}"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, ref in zip(names, sess.run(names, feeds)):
        fused = np.load(outs["fused"] / f"{name}.npy")
        unfused = np.load(outs["unfused"] / f"{name}.npy")
        for got in (fused, unfused):
            ok, line = compare(name, got, ref)
            assert ok, line
        ok, line = compare(name, fused, unfused)
        assert ok, "fused vs unfused: " + line


def erf_gelu(x, out, p):
    """torch's nn.GELU at opset 17: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)."""
    return [h.make_node("Div", [x, p + "sqrt2"], [p + "d"]), h.make_node("Erf", [p + "d"], [p + "e"]),
            h.make_node("Add", [p + "e", p + "one"], [p + "a"]), h.make_node("Mul", [x, p + "a"], [p + "m"]),
            h.make_node("Mul", [p + "m", p + "half"], [out])], \
           [const(p + "sqrt2", 1.4142135381698608), const(p + "one", 1.0), const(p + "half", 0.5)]


def tanh_gelu(x, out, p):
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return [h.make_node("Mul", [p + "half", x], [p + "hx"]), h.make_node("Pow", [x, p + "three"], [p + "x3"]),
            h.make_node("Mul", [p + "c", p + "x3"], [p + "cx3"]), h.make_node("Add", [x, p + "cx3"], [p + "in"]),
            h.make_node("Mul", [p + "k", p + "in"], [p + "kin"]), h.make_node("Tanh", [p + "kin"], [p + "t"]),
            h.make_node("Add", [p + "one", p + "t"], [p + "a"]), h.make_node("Mul", [p + "hx", p + "a"], [out])], \
           [const(p + "half", 0.5), const(p + "three", 3.0), const(p + "c", 0.044715),
            const(p + "k", 0.7978845608028654), const(p + "one", 1.0)]


@pytest.mark.parametrize("gelu", ["erf", "tanh"])
def test_dense_bias_gelu(run_onyx, tmp_path, gelu):
    rng, _ = fresh_rng()
    k, n = 37, 75
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.3
    b = rng.standard_normal(n).astype(np.float32)
    chain, consts = (erf_gelu if gelu == "erf" else tanh_gelu)("s", "y", "g_")
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "B"], ["s"]), *chain]
    m = model(nodes, [h.make_tensor_value_info("x", F, [2, 13, k])], [h.make_tensor_value_info("y", F, [2, 13, n])],
              [const("W", w), const("B", b), *consts])
    feeds = {"x": rng.standard_normal((2, 13, k)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["onyx::DenseMatMul"], ["MatMul", "Erf", "Tanh", "Add"])


@pytest.mark.parametrize("rows,alpha,beta", [(1, 1.0, 1.0), (3, 0.9, 1.1), (29, 1.0, 0.0), (4, -2.0, 0.5)])
def test_gemm_transposed_weight_relu(run_onyx, tmp_path, rows, alpha, beta):
    rng, _ = fresh_rng()
    k, n = 50, 33
    w = rng.standard_normal((n, k)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    nodes = [h.make_node("Gemm", ["x", "W", "C"], ["g"], transB=1, alpha=alpha, beta=beta),
             h.make_node("Relu", ["g"], ["y"])]
    m = model(nodes, [h.make_tensor_value_info("x", F, [rows, k])], [h.make_tensor_value_info("y", F, [rows, n])],
              [const("W", w), const("C", c)])
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["onyx::DenseMatMul"], ["Gemm", "Relu"])


def test_shared_weight_packed_once_and_graph_output_kept(run_onyx, tmp_path):
    rng, _ = fresh_rng()
    w = rng.standard_normal((16, 19)).astype(np.float32)
    # mm1 is a graph output: its Add stays apart; mm2 takes its bias and Sigmoid.
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm1"]), h.make_node("Add", ["mm1", "B"], ["y1"]),
             h.make_node("MatMul", ["x", "W"], ["mm2"]), h.make_node("Add", ["mm2", "B"], ["s2"]),
             h.make_node("Sigmoid", ["s2"], ["y2"])]
    m = model(nodes, [h.make_tensor_value_info("x", F, [5, 16])],
              [h.make_tensor_value_info(n, F, [5, 19]) for n in ("mm1", "y1", "y2")],
              [const("W", w), const("B", rng.standard_normal(19))])
    feeds = {"x": rng.standard_normal((5, 16)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["onyx::DenseMatMul", "Add"], ["MatMul", "Sigmoid"])


@pytest.mark.parametrize("case", ["depthwise_s1_hardswish", "depthwise_s2_relu", "dense_clip", "pointwise_hsig"])
def test_conv_activation(run_onyx, tmp_path, case):
    rng, _ = fresh_rng()
    c, hw = 6, 13
    if case.startswith("depthwise"):
        stride = 2 if "s2" in case else 1
        wshape, attrs = (c, 1, 3, 3), dict(group=c, pads=[1, 1, 1, 1], strides=[stride, stride])
    elif case == "dense_clip":
        wshape, attrs = (7, c, 3, 3), dict(pads=[0, 1, 2, 1], strides=[1, 2])
    else:
        wshape, attrs = (9, c, 1, 1), {}
    act = {"depthwise_s1_hardswish": ("HardSwish", {}), "depthwise_s2_relu": ("Relu", {}),
           "dense_clip": ("Clip", {}), "pointwise_hsig": ("HardSigmoid", dict(alpha=0.3, beta=0.4))}[case]
    inputs = ["conv"] + (["lo", "hi"] if act[0] == "Clip" else [])
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["conv"], **attrs), h.make_node(act[0], inputs, ["y"], **act[1])]
    inits = [const("W", rng.standard_normal(wshape) * 0.5), const("B", rng.standard_normal(wshape[0]))]
    if act[0] == "Clip":
        inits += [const("lo", -0.5), const("hi", 1.5)]
    m = model(nodes, [h.make_tensor_value_info("x", F, [2, c, hw, hw + 4])], [h.make_tensor_value_info("y", F, None)],
              inits)
    feeds = {"x": rng.standard_normal((2, c, hw, hw + 4)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["onyx::FusedConv"], ["Conv", act[0]])


@pytest.mark.parametrize("kind", ["MaxPool", "AveragePool"])
def test_pool_2d(run_onyx, tmp_path, kind):
    rng, _ = fresh_rng()
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    if kind == "AveragePool":
        attrs["count_include_pad"] = 1
    m = model([h.make_node(kind, ["x"], ["y"], **attrs)], [h.make_tensor_value_info("x", F, [1, 5, 15, 12])],
              [h.make_tensor_value_info("y", F, None)], [])
    feeds = {"x": rng.standard_normal((1, 5, 15, 12)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, [kind], [])


def test_rms_norm_with_float_cast(run_onyx, tmp_path):
    """Llama's RMSNorm as transformers 5 exports it: Cast(float) before the weight."""
    rng, _ = fresh_rng()
    d = 24
    nodes = [h.make_node("Cast", ["x"], ["xf"], to=F), h.make_node("Pow", ["xf", "two"], ["sq"]),
             h.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1), h.make_node("Add", ["ms", "eps"], ["v"]),
             h.make_node("Sqrt", ["v"], ["s"]), h.make_node("Div", ["one", "s"], ["inv"]),
             h.make_node("Mul", ["xf", "inv"], ["n"]), h.make_node("Cast", ["n"], ["nf"], to=F),
             h.make_node("Mul", ["W", "nf"], ["y"])]
    m = model(nodes, [h.make_tensor_value_info("x", F, [3, 7, d])], [h.make_tensor_value_info("y", F, [3, 7, d])],
              [const("two", 2.0), const("eps", 1e-6), const("one", 1.0), const("W", rng.standard_normal(d))])
    feeds = {"x": rng.standard_normal((3, 7, d)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["SimplifiedLayerNormalization"], ["Pow", "Sqrt"])


@pytest.mark.parametrize("residual_shape", [(2, 9, 21), (1, 9, 21), (3, 2, 9, 21)])
def test_dense_bias_residual_then_layer_norm(run_onyx, tmp_path, residual_shape):
    """BERT's output projection: LayerNorm(MatMul(x, W) + b + r). A residual of the product's
    shape goes in the epilogue; one that broadcasts (even raising the rank) is added after."""
    rng, _ = fresh_rng()
    k, n = 30, 21
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "B"], ["s"]),
             h.make_node("Add", ["s", "r"], ["sum"]),
             h.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    m = model(nodes, [h.make_tensor_value_info("x", F, [2, 9, k]), h.make_tensor_value_info("r", F, residual_shape)],
              [h.make_tensor_value_info("y", F, None)],
              [const("W", rng.standard_normal((k, n)) * 0.3), const("B", rng.standard_normal(n)),
               const("gamma", rng.standard_normal(n)), const("beta", rng.standard_normal(n))])
    feeds = {"x": rng.standard_normal((2, 9, k)).astype(np.float32),
             "r": rng.standard_normal(residual_shape).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["onyx::DenseMatMul", "LayerNormalization"], ["MatMul", "Add"])


@pytest.mark.parametrize("act", [None, "Relu"])
def test_conv_residual_add(run_onyx, tmp_path, act):
    """ResNet's block end: Relu(Conv(x) + shortcut)."""
    rng, _ = fresh_rng()
    c, m_out, hw = 5, 7, 11
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["conv"], pads=[1, 1, 1, 1]),
             h.make_node("Add", ["z", "conv"], ["sum" if act else "y"])]
    if act:
        nodes.append(h.make_node(act, ["sum"], ["y"]))
    mdl = model(nodes, [h.make_tensor_value_info("x", F, [2, c, hw, hw]), h.make_tensor_value_info("z", F, [2, m_out, hw, hw])],
                [h.make_tensor_value_info("y", F, None)],
                [const("W", rng.standard_normal((m_out, c, 3, 3)) * 0.4), const("B", rng.standard_normal(m_out))])
    feeds = {"x": rng.standard_normal((2, c, hw, hw)).astype(np.float32),
             "z": rng.standard_normal((2, m_out, hw, hw)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, mdl, feeds, ["onyx::FusedConv"], ["Conv", "Add"] + ([act] if act else []))


def test_downsampling_block_fuses_both_convolutions(run_onyx, tmp_path):
    """ResNet's downsampling block end: Relu(Conv(x) + Conv_shortcut(x)), both 1 x 1 of stride 2
    with weights large enough to be kept packed. One convolution takes the Add and the Relu; the
    other, whose Add is taken, still becomes a FusedConv for its packed weights (no plain Conv
    left), and the block computes what onnxruntime computes."""
    rng, _ = fresh_rng()
    c, m_out, hw = 1024, 1024, 9
    nodes = [h.make_node("Conv", ["x", "Wa", "Ba"], ["a"], strides=[2, 2]),
             h.make_node("Conv", ["x", "Wb", "Bb"], ["b"], strides=[2, 2]),
             h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Relu", ["s"], ["y"])]
    mdl = model(nodes, [h.make_tensor_value_info("x", F, [1, c, hw, hw])], [h.make_tensor_value_info("y", F, None)],
                [const("Wa", rng.standard_normal((m_out, c, 1, 1)) * 0.03), const("Ba", rng.standard_normal(m_out)),
                 const("Wb", rng.standard_normal((m_out, c, 1, 1)) * 0.03), const("Bb", rng.standard_normal(m_out))])
    feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, mdl, feeds, ["onyx::FusedConv"], ["Conv", "Add", "Relu"])


def test_conv_residual_that_broadcasts(run_onyx, tmp_path):
    """Conv(x) + z with z a per-channel row and with z raising the rank: both as the Add did."""
    rng, _ = fresh_rng()
    nodes = [h.make_node("Conv", ["x", "W"], ["conv"]), h.make_node("Add", ["conv", "z"], ["s"]),
             h.make_node("Relu", ["s"], ["y"]), h.make_node("Conv", ["x", "W"], ["conv2"]),
             h.make_node("Add", ["conv2", "z2"], ["y2"])]
    mdl = model(nodes, [h.make_tensor_value_info("x", F, [1, 3, 6, 7]), h.make_tensor_value_info("z", F, [4, 1, 1]),
                        h.make_tensor_value_info("z2", F, [2, 1, 4, 4, 5])],
                [h.make_tensor_value_info("y", F, None), h.make_tensor_value_info("y2", F, None)],
                [const("W", rng.standard_normal((4, 3, 3, 3)))])
    feeds = {"x": rng.standard_normal((1, 3, 6, 7)).astype(np.float32),
             "z": rng.standard_normal((4, 1, 1)).astype(np.float32),
             "z2": rng.standard_normal((2, 1, 4, 4, 5)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, mdl, feeds, ["onyx::FusedConv"], ["Conv", "Add"])


@pytest.mark.parametrize("s,mask,causal", [(1, "float", 0), (5, "float", 0), (5, None, 1), (4, "bool", 0), (1, None, 0)])
def test_attention_grouped_heads(run_onyx, tmp_path, s, mask, causal):
    """ONNX Attention with grouped-query heads on the CPU's vectorized kernel (what the eager
    attention fusion produces), against onnxruntime and against onyx's reference kernel (which
    runs when the QK output is asked for)."""
    rng, _ = fresh_rng()
    b, hq, hkv, t, d = 2, 6, 2, 7, 8
    ins = [h.make_tensor_value_info("q", F, [b, hq, s, d]), h.make_tensor_value_info("k", F, [b, hkv, t, d]),
           h.make_tensor_value_info("v", F, [b, hkv, t, d + 3])]
    feeds = {"q": rng.standard_normal((b, hq, s, d)).astype(np.float32),
             "k": rng.standard_normal((b, hkv, t, d)).astype(np.float32),
             "v": rng.standard_normal((b, hkv, t, d + 3)).astype(np.float32)}
    names = ["q", "k", "v"]
    if mask == "float":
        ins.append(h.make_tensor_value_info("m", F, [1, 1, s, t]))
        feeds["m"] = np.where(rng.random((1, 1, s, t)) < 0.3, -1e9, rng.standard_normal((1, 1, s, t))).astype(np.float32)
        feeds["m"][..., 0] = 0  # never a fully masked row
        names.append("m")
    elif mask == "bool":
        ins.append(h.make_tensor_value_info("m", T.BOOL, [b, 1, s, t]))
        feeds["m"] = rng.random((b, 1, s, t)) < 0.7
        feeds["m"][..., 0] = True
        names.append("m")
    attrs = dict(is_causal=causal, scale=0.3)
    fast = model([h.make_node("Attention", names, ["y"], **attrs)], ins, [h.make_tensor_value_info("y", F, None)], [],
                 opset=23)
    run_and_compare(run_onyx, tmp_path, fast, feeds, ["Attention"], [])
    ref = model([h.make_node("Attention", names, ["y", "", "", "qk"], **attrs)], ins,
                [h.make_tensor_value_info("y", F, None), h.make_tensor_value_info("qk", F, None)], [], opset=23)
    onnx.save(ref, str(tmp_path / "ref.onnx"))
    args = ["run", tmp_path / "ref.onnx", "--save-outputs", tmp_path / "ref"]
    for name in feeds:
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    proc = run_onyx(*args)
    assert proc.returncode == 0, proc.stderr
    y_fast = np.load(tmp_path / "fused" / "y.npy")
    y_ref = np.load(tmp_path / "ref" / "y.npy")
    ok, line = compare("y", y_fast, y_ref)
    assert ok, "vectorized vs reference kernel: " + line


@pytest.mark.parametrize("case", [
    # (q rows, key positions, head size, batch dims, scale or None)
    (1, 1501, 64, (1, 6), 0.125),     # a decode step's cross-attention scores (Whisper)
    (1, 37, 64, (2, 3), 0.35355),     # a self-attention step over a short past
    (13, 29, 24, (3,), None),         # several rows, no scale, rank 3
    (5, 7, 3, (), 2.0),               # rank 2
])
def test_transposed_product(run_onyx, tmp_path, case):
    """MatMul(Q, Mul(Transpose(K), s)) and MatMul(Q, Transpose(K)) -> FusedMatMul(transB, alpha)."""
    s_rows, t, d, batch, scale = case
    rank = len(batch) + 2
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=perm)]
    inits = []
    if scale is not None:
        nodes.append(h.make_node("Mul", ["kt", "s"], ["kts"]))
        inits.append(const("s", scale))
    nodes.append(h.make_node("MatMul", ["q", "kts" if scale is not None else "kt"], ["y"]))
    m = model(nodes, [h.make_tensor_value_info("q", F, [*batch, s_rows, d]),
                      h.make_tensor_value_info("k", F, [*batch, t, d])],
              [h.make_tensor_value_info("y", F, None)], inits)
    rng, _ = fresh_rng()
    feeds = {"q": rng.standard_normal((*batch, s_rows, d)).astype(np.float32),
             "k": rng.standard_normal((*batch, t, d)).astype(np.float32)}
    run_and_compare(run_onyx, tmp_path, m, feeds, ["com.microsoft::FusedMatMul"], ["Transpose", "MatMul"])


@pytest.mark.parametrize("kind", ["other_perm", "transpose_read_twice", "scale_not_scalar", "int_matmul"])
def test_transposed_product_not_fused(run_onyx, tmp_path, kind):
    """What must stay: a transposition of other axes, a transposed value read elsewhere too
    (kept as an output), a scale of more than one value, an integer product."""
    rng, _ = fresh_rng()
    q = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    feeds = {"q": q, "k": k}
    outs = [h.make_tensor_value_info("y", F, None)]
    inits = []
    dt = F
    if kind == "other_perm":  # [2, 3, 5, 8] -> [2, 5, 8, 3]... swaps more than the last two
        feeds["k"] = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
        nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1, 3]),
                 h.make_node("MatMul", ["q", "kt"], ["y"])]
        feeds["q"] = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
        feeds["k"] = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
        kshape = [2, 8, 3, 5]
    elif kind == "transpose_read_twice":
        nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 h.make_node("MatMul", ["q", "kt"], ["y"])]
        outs.append(h.make_tensor_value_info("kt", F, None))
        kshape = [2, 3, 5, 8]
    elif kind == "scale_not_scalar":
        nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 h.make_node("Mul", ["kt", "s"], ["kts"]),
                 h.make_node("MatMul", ["q", "kts"], ["y"])]
        inits.append(const("s", rng.standard_normal((1, 1, 1, 5)) + 2))
        kshape = [2, 3, 5, 8]
    else:  # an int32 product: FusedMatMul takes floating types only
        dt = T.INT32
        feeds = {"q": rng.integers(-9, 9, (2, 3, 4, 8)).astype(np.int32),
                 "k": rng.integers(-9, 9, (2, 3, 5, 8)).astype(np.int32)}
        nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 h.make_node("MatMul", ["q", "kt"], ["y"])]
        outs = [h.make_tensor_value_info("y", dt, None)]
        kshape = [2, 3, 5, 8]
    m = model(nodes, [h.make_tensor_value_info("q", dt, list(feeds["q"].shape)),
                      h.make_tensor_value_info("k", dt, kshape)], outs, inits)
    run_and_compare(run_onyx, tmp_path, m, feeds, ["Transpose", "MatMul"], ["com.microsoft::FusedMatMul"])


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mask", ["none", "input", "zero_constant", "broadcast_constant"])
def test_attention_sdpa_decomposition(run_onyx, tmp_path, layout, mask):
    """torch's decomposition of scaled_dot_product_attention, as Whisper's export has it: each
    operand scaled by the root of the scale, the keys transposed to [b, h, d, s] straight from
    the projection's [b, s, h, d] (or from [b, h, s, d]) -> ONNX Attention. A constant [1, 1, 1, 1]
    mask of zeros (BERT-style graphs' "no mask") is dropped; one of other values, broadcast along
    the scores' last axes, which Attention does not take, leaves the graph unfused."""
    rng, _ = fresh_rng()
    b, s, t, hh, d = 2, 5, 9, 3, 8
    root = float((1 / np.sqrt(d)) ** 0.5)
    inits = [numpy_helper.from_array(np.array([b, s, hh, d], np.int64), "qshape"),
             numpy_helper.from_array(np.array([b, t, hh, d], np.int64), "kshape"),
             numpy_helper.from_array(np.array([b, s, hh * d], np.int64), "oshape"),
             const("r1", root), const("r2", root)]
    nodes = [h.make_node("Reshape", ["qi", "qshape"], ["q4"]),
             h.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
             h.make_node("Mul", ["qh", "r1"], ["qs"]),
             h.make_node("Reshape", ["ki", "kshape"], ["k4"])]
    if layout == "bshd":
        nodes.append(h.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]))
    else:
        nodes += [h.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
                  h.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2])]
    nodes += [h.make_node("Mul", ["kt", "r2"], ["ks"]),
              h.make_node("MatMul", ["qs", "ks"], ["sc"])]
    ins = [h.make_tensor_value_info("qi", F, [b, s, hh * d]), h.make_tensor_value_info("ki", F, [b, t, hh * d]),
           h.make_tensor_value_info("vi", F, [b, t, hh * d])]
    feeds = {n: rng.standard_normal((b, s if n == "qi" else t, hh * d)).astype(np.float32) for n in ("qi", "ki", "vi")}
    scores = "sc"
    if mask == "input":
        ins.append(h.make_tensor_value_info("m", F, [b, 1, s, t]))
        feeds["m"] = np.where(rng.random((b, 1, s, t)) < 0.3, -1e9, 0).astype(np.float32)
        feeds["m"][..., 0] = 0
    elif mask != "none":
        inits.append(const("m", np.full((1, 1, 1, 1), 0.0 if mask == "zero_constant" else 0.75)))
    if mask != "none":
        nodes.append(h.make_node("Add", ["sc", "m"], ["scm"]))
        scores = "scm"
    nodes += [h.make_node("Softmax", [scores], ["p"], axis=-1),
              h.make_node("Reshape", ["vi", "kshape"], ["v4"]),
              h.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
              h.make_node("MatMul", ["p", "vh"], ["o"]),
              h.make_node("Transpose", ["o"], ["o2"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["o2", "oshape"], ["y"])]
    m = model(nodes, ins, [h.make_tensor_value_info("y", F, None)], inits)
    if mask == "broadcast_constant":
        run_and_compare(run_onyx, tmp_path, m, feeds, ["Softmax"], ["Attention"])
    else:
        run_and_compare(run_onyx, tmp_path, m, feeds, ["Attention"], ["Softmax"])


@pytest.mark.parametrize("form", ["isnan", "double_cast", "export_transpose"])
@pytest.mark.parametrize("masked_row", [False, True])
def test_attention_torch_export_forms(run_onyx, tmp_path, form, masked_row):
    """The attention of the exporters' Llama graphs (grouped-query heads repeated by
    Unsqueeze/Expand/Reshape, a boolean mask made additive by Where(m, 0, -inf)) in the forms
    transformers 5's exports take -> one Attention: "isnan", torch's scaled_dot_product_attention
    decomposition (operands scaled by the root of the scale, weights Where(IsNaN(w), 0, w));
    "double_cast", eager attention whose softmax output is cast twice (to the type it has);
    "export_transpose", torch.export's decomposition, which swaps K's last two axes through
    Reshape(Transpose(Reshape(k, [-1, s[-2], s[-1]]), [0, 2, 1]), [s[:-2], s[-1], s[-2]]),
    s = Shape(k). With `masked_row`, one query row sees no key: the IsNaN forms give it zeros
    (as onnxruntime does on the unfused graph), the fused node too."""
    rng, _ = fresh_rng()
    b, hq, hkv, s, t, d = 2, 4, 2, 3, 7, 8
    scale = 1 / np.sqrt(d)
    inits = [numpy_helper.from_array(np.array([b, hkv, hq // hkv, t, d], np.int64), "rep5"),
             numpy_helper.from_array(np.array([0, hq, -1, d], np.int64), "rep4"),
             numpy_helper.from_array(np.array([2], np.int64), "ax2"),
             const("zero", 0.0), const("ninf", -np.inf)]
    # The batch and the lengths symbolic, as in an export (so the shape arithmetic stays a graph's).
    ins = [h.make_tensor_value_info("q", F, ["b", hq, "s", d]), h.make_tensor_value_info("k", F, ["b", hkv, "t", d]),
           h.make_tensor_value_info("v", F, ["b", hkv, "t", d]), h.make_tensor_value_info("m", T.BOOL, ["b", 1, "s", "t"])]
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in
             (("q", (b, hq, s, d)), ("k", (b, hkv, t, d)), ("v", (b, hkv, t, d)))}
    feeds["m"] = rng.random((b, 1, s, t)) < 0.7
    feeds["m"][..., 0] = True
    if masked_row:
        feeds["m"][1, 0, 2, :] = False
    nodes = [h.make_node("Where", ["m", "zero", "ninf"], ["madd"])]
    for x in ("k", "v"):  # repeat_kv
        nodes += [h.make_node("Unsqueeze", [x, "ax2"], [x + "u"]), h.make_node("Expand", [x + "u", "rep5"], [x + "e"]),
                  h.make_node("Reshape", [x + "e", "rep4"], [x + "r"])]
    if form == "double_cast":
        inits.append(const("c", scale))
        nodes += [h.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
                  h.make_node("MatMul", ["q", "kt"], ["qk"]), h.make_node("Mul", ["qk", "c"], ["sc"])]
    else:
        inits += [const("r1", scale ** 0.5), const("r2", scale ** 0.5)]
        nodes.append(h.make_node("Mul", ["q", "r1"], ["qs"]))
        if form == "isnan":
            nodes.append(h.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]))
        else:
            big = np.iinfo(np.int64).max
            inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                      (("m1", [-1]), ("m2", [-2]), ("end", [big]), ("lo", [np.iinfo(np.int64).min]))]
            nodes += [h.make_node("Shape", ["kr"], ["ks"], start=0),
                      h.make_node("Slice", ["ks", "m1", "end"], ["last"]),
                      h.make_node("Slice", ["ks", "m2", "m1"], ["prev"]),
                      h.make_node("Slice", ["ks", "lo", "m2"], ["head"]),
                      h.make_node("Concat", ["m1", "prev", "last"], ["s3"], axis=0),
                      h.make_node("Reshape", ["kr", "s3"], ["k3"]),
                      h.make_node("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
                      h.make_node("Concat", ["head", "last", "prev"], ["s4"], axis=0),
                      h.make_node("Reshape", ["k3t", "s4"], ["kt"])]
        nodes += [h.make_node("Mul", ["kt", "r2"], ["ks2"]), h.make_node("MatMul", ["qs", "ks2"], ["sc"])]
    nodes += [h.make_node("Add", ["sc", "madd"], ["scm"]), h.make_node("Softmax", ["scm"], ["p"], axis=-1)]
    if form == "double_cast":
        nodes += [h.make_node("Cast", ["p"], ["p1"], to=F), h.make_node("Cast", ["p1"], ["pw"], to=F)]
    else:
        nodes += [h.make_node("IsNaN", ["p"], ["nan"]), h.make_node("Where", ["nan", "zero", "p"], ["pw"])]
    nodes.append(h.make_node("MatMul", ["pw", "vr"], ["y"]))
    m = model(nodes, ins, [h.make_tensor_value_info("y", F, None)], inits)
    if masked_row and form == "double_cast":  # eager attention's fully masked row is NaN in every engine
        return
    run_and_compare(run_onyx, tmp_path, m, feeds, ["Attention"], ["Softmax", "IsNaN", "Expand"])


def test_concat_of_one_input_is_dropped(run_onyx, tmp_path):
    """torch's trace of a cat onto an empty cache writes Concat(past) of one input: its readers
    read the input (a graph output made by one stays)."""
    rng, _ = fresh_rng()
    nodes = [h.make_node("Concat", ["x"], ["c"], axis=-2), h.make_node("Concat", ["c", "y"], ["z"], axis=-2),
             h.make_node("Concat", ["y"], ["w"], axis=0)]
    ins = [h.make_tensor_value_info("x", F, ["b", 2, "p", 4]), h.make_tensor_value_info("y", F, ["b", 2, 3, 4])]
    feeds = {"x": rng.standard_normal((2, 2, 5, 4)).astype(np.float32),
             "y": rng.standard_normal((2, 2, 3, 4)).astype(np.float32)}
    m = model(nodes, ins, [h.make_tensor_value_info("z", F, None), h.make_tensor_value_info("w", F, None)], [])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    run_and_compare(run_onyx, tmp_path, m, feeds, ["Concat"], [])
    proc = run_onyx("run", path, "--json", *[a for n in feeds for a in ("--input", f"{n}={tmp_path / (n + '.npy')}")])
    assert json.loads(proc.stdout)["ops"]["Concat"] == 2, "the single-input Concat before z goes, w's stays"
