"""Model-local functions, against onnxruntime: calls with attribute references and defaults,
functions calling functions, a body with a subgraph reading the function's values, unused
outputs; and the refusals (a recursive function, a body importing another opset version).

The Gradient op (ai.onnx.preview.training), which onnxruntime's inference build lacks, against
central finite differences in float64 of the same expression computed by numpy, on fresh random
inputs that broadcast; and its refusal of an op it cannot differentiate. Seeds are printed
(pytest -s) and in every failure message (ONYX_PARITY_SEED=<seed>).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_contrib_ops import check, fresh_rng, run_ort  # noqa: E402

onyx = pytest.importorskip("onyx")

F = TensorProto.FLOAT
D = TensorProto.DOUBLE


def run_onyx_model(model, feeds):
    sess = onyx.InferenceSession(model.SerializeToString())
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def ref_attr(name, ref, kind):
    a = helper.make_attribute(name, 0.0 if kind == "f" else 0)
    a.ClearField("f")
    a.ClearField("i")
    a.ref_attr_name = ref
    a.type = helper.onnx.AttributeProto.FLOAT if kind == "f" else helper.onnx.AttributeProto.INT
    return a


def scaled_leaky():
    """local.ScaledLeaky(x) -> (y, unused): LeakyRelu(x * scale, alpha); alpha defaults to 0.3."""
    const = helper.make_node("Constant", [], ["s"])
    const.attribute.append(ref_attr("value_float", "scale", "f"))
    leaky = helper.make_node("LeakyRelu", ["xs"], ["y"])
    leaky.attribute.append(ref_attr("alpha", "alpha", "f"))
    return helper.make_function(
        "local", "ScaledLeaky", ["x"], ["y", "unused"],
        [const, helper.make_node("Mul", ["x", "s"], ["xs"]), leaky, helper.make_node("Neg", ["y"], ["unused"])],
        [helper.make_opsetid("", 21)], attributes=["scale"],
        attribute_protos=[helper.make_attribute("alpha", 0.3)])


def twice():
    """local.Twice(x, c) -> y: ScaledLeaky twice (scale 2, then scale -1.5 with alpha 0.1), then
    an If on c whose branches read the function's values."""
    then_g = helper.make_graph([helper.make_node("Add", ["b", "x"], ["r"])], "then", [],
                               [helper.make_tensor_value_info("r", F, None)])
    else_g = helper.make_graph([helper.make_node("Sub", ["b", "x"], ["r2"])], "else", [],
                               [helper.make_tensor_value_info("r2", F, None)])
    nodes = [
        helper.make_node("ScaledLeaky", ["x"], ["a", ""], domain="local", scale=2.0),
        helper.make_node("ScaledLeaky", ["a"], ["b", ""], domain="local", scale=-1.5, alpha=0.1),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    return helper.make_function("local", "Twice", ["x", "c"], ["y"], nodes,
                                [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)])


def function_model(functions, body_opset=21):
    nodes = [helper.make_node("Twice", ["x", "c"], ["y1"], domain="local", name="call1"),
             helper.make_node("Twice", ["y1", "c"], ["y2"], domain="local", name="call2"),
             helper.make_node("ScaledLeaky", ["x"], ["y3", "n3"], domain="local", scale=0.5)]
    graph = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", F, [3, 5]),
                                            helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info(n, F, None) for n in ("y2", "y3", "n3")])
    return helper.make_model(graph, ir_version=10, functions=functions,
                             opset_imports=[helper.make_opsetid("", body_opset), helper.make_opsetid("local", 1)])


@pytest.mark.parametrize("cond", [True, False])
def test_functions_match_onnxruntime(cond):
    rng, seed = fresh_rng()
    model = function_model([scaled_leaky(), twice()])
    feeds = {"x": rng.standard_normal((3, 5)).astype(np.float32), "c": np.array(cond)}
    ref, got = run_ort(model, feeds), run_onyx_model(model, feeds)
    for name in ref:
        check(name, np.asarray(got[name]), ref[name], 1e-6, seed)


def test_recursive_function_is_refused():
    loop = helper.make_function("local", "Loop1", ["x"], ["y"], [helper.make_node("Loop1", ["x"], ["y"], domain="local")],
                                [helper.make_opsetid("local", 1)])
    graph = helper.make_graph([helper.make_node("Loop1", ["x"], ["y"], domain="local")], "rec",
                              [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, ir_version=10, functions=[loop],
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)])
    with pytest.raises(Exception, match=r"function 'Loop1' calls itself"):
        onyx.InferenceSession(model.SerializeToString())


def test_function_opset_mismatch_is_refused():
    model = function_model([scaled_leaky(), twice()], body_opset=20)
    with pytest.raises(Exception, match=r"function 'Twice'.*imports opset 21 of domain 'ai.onnx', the model 20"):
        onyx.InferenceSession(model.SerializeToString())


# ---- Gradient ----

def gradient_model(elem, with_unused=True):
    """y = Sigmoid(a * b) + Tanh(a / c) - Sqrt(Exp(c) + Relu(b)) * Neg(Log(c)), then the gradients
    of y (summed) by a [3,4], b [4] and c [3,1] (which broadcast), and by u, which y does not read."""
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Sigmoid", ["ab"], ["s"]),
        helper.make_node("Div", ["a", "c"], ["ac"]), helper.make_node("Tanh", ["ac"], ["t"]),
        helper.make_node("Exp", ["c"], ["ec"]), helper.make_node("Relu", ["b"], ["rb"]),
        helper.make_node("Add", ["ec", "rb"], ["sum"]), helper.make_node("Sqrt", ["sum"], ["sq"]),
        helper.make_node("Log", ["c"], ["lc"]), helper.make_node("Neg", ["lc"], ["nl"]),
        helper.make_node("Identity", ["nl"], ["nl2"]), helper.make_node("Mul", ["sq", "nl2"], ["p"]),
        helper.make_node("Add", ["s", "t"], ["st"]), helper.make_node("Sub", ["st", "p"], ["y"]),
    ]
    xs = ["a", "b", "c"] + (["u"] if with_unused else [])
    nodes.append(helper.make_node("Gradient", xs, ["d_" + x for x in xs], domain="ai.onnx.preview.training",
                                  xs=xs, y="y"))
    shapes = {"a": [3, 4], "b": [4], "c": [3, 1], "u": [2]}
    graph = helper.make_graph(nodes, "grad", [helper.make_tensor_value_info(x, elem, shapes[x]) for x in xs],
                              [helper.make_tensor_value_info(n, elem, None) for n in ["y"] + ["d_" + x for x in xs]])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("ai.onnx.preview.training", 1)])


def forward(a, b, c):
    sig = 1 / (1 + np.exp(-(a * b)))
    return sig + np.tanh(a / c) - np.sqrt(np.exp(c) + np.maximum(b, 0)) * -np.log(c)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_gradient_matches_finite_differences(dtype):
    rng, seed = fresh_rng()
    feeds = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(4),
             "c": rng.uniform(0.5, 2.0, (3, 1)), "u": rng.standard_normal(2)}
    feeds = {k: v.astype(dtype) for k, v in feeds.items()}
    got = run_onyx_model(gradient_model(D if dtype == np.float64 else F), feeds)
    base = {k: v.astype(np.float64) for k, v in feeds.items() if k != "u"}
    h = 1e-6
    for name in ("a", "b", "c"):
        fd = np.zeros_like(base[name])
        for i in np.ndindex(fd.shape):
            plus, minus = {k: v.copy() for k, v in base.items()}, {k: v.copy() for k, v in base.items()}
            plus[name][i] += h
            minus[name][i] -= h
            fd[i] = (forward(**plus).sum() - forward(**minus).sum()) / (2 * h)
        check(f"d_{name}", np.asarray(got[f"d_{name}"]), fd.astype(dtype), 1e-6 if dtype == np.float64 else 1e-4, seed)
    assert np.array_equal(np.asarray(got["d_u"]), np.zeros(2, dtype)), f"d_u is not zero (seed {seed})"
    check("y", np.asarray(got["y"]), forward(**base).astype(dtype), 1e-6, seed)


def test_gradient_refuses_what_it_cannot_differentiate():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"]),
             helper.make_node("Gradient", ["a", "b"], ["da", "db"], domain="ai.onnx.preview.training",
                              xs=["a", "b"], y="y")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", F, [2, 2]),
                                           helper.make_tensor_value_info("b", F, [2, 2])],
                              [helper.make_tensor_value_info("da", F, None)])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("ai.onnx.preview.training", 1)])
    with pytest.raises(Exception, match=r"differentiating node \(MatMul\).*Gradient differentiates Add"):
        onyx.InferenceSession(model.SerializeToString())


def test_function_call_explosion_is_refused():
    """Each level calls the one below twice: 2^30 nodes, refused before any is made."""
    fns = [helper.make_function("local", "L0", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                                [helper.make_opsetid("", 21)])]
    for k in range(1, 31):
        fns.append(helper.make_function(
            "local", f"L{k}", ["x"], ["y"],
            [helper.make_node(f"L{k - 1}", ["x"], ["t"], domain="local"),
             helper.make_node(f"L{k - 1}", ["t"], ["y"], domain="local")],
            [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]))
    graph = helper.make_graph([helper.make_node("L30", ["x"], ["y"], domain="local")], "big",
                              [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, ir_version=10, functions=fns,
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)])
    with pytest.raises(Exception, match=r"would make more than 1048576 nodes"):
        onyx.InferenceSession(model.SerializeToString())
