"""Edge cases found in review, each against onnxruntime or as a clean error:
subgraph outputs that alias this graph's values, outputs that are weights or
inputs, and malformed tensors that must be errors, not crashes."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from test_parity import compare, fresh_rng


def run_both(model, feeds, run_onyx, tmp_path, extra=()):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    args = ["run", path, "--save-outputs", tmp_path / "out", "--repeat", "2", *extra]
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    proc = run_onyx(*args)
    assert proc.returncode == 0, proc.stderr
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, ref in zip(names, sess.run(names, feeds)):
        ok, line = compare(name, np.load(tmp_path / "out" / f"{name}.npy"), ref)
        assert ok, line


def alias_models():
    # If whose branches return an outer value living in the arena; later ops reuse those bytes.
    branch = lambda n: h.make_graph([h.make_node("Identity", ["a"], [n])], n, [],
                                    [h.make_tensor_value_info(n, T.FLOAT, None)])
    nodes = [h.make_node("Relu", ["x"], ["a"]),
             h.make_node("If", ["c"], ["r"], then_branch=branch("then_out"), else_branch=branch("else_out")),
             h.make_node("Neg", ["x"], ["b"]), h.make_node("Exp", ["b"], ["e"]),
             h.make_node("Add", ["r", "e"], ["y"])]
    g = h.make_graph(nodes, "if_alias", [h.make_tensor_value_info("x", T.FLOAT, [4, 4]),
                                         h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 4]), h.make_tensor_value_info("r", T.FLOAT, None)])
    yield "if_alias", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), True
    # A one-trip Loop whose body passes its state through.
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("Identity", ["v"], ["vout"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cin", T.BOOL, []),
                         h.make_tensor_value_info("v", T.FLOAT, None)],
                        [h.make_tensor_value_info("cout", T.BOOL, []), h.make_tensor_value_info("vout", T.FLOAT, None)])
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Loop", ["M", "cond", "a"], ["r"], body=body),
             h.make_node("Neg", ["x"], ["b"]), h.make_node("Exp", ["b"], ["e"]), h.make_node("Add", ["r", "e"], ["y"])]
    g = h.make_graph(nodes, "loop_alias", [h.make_tensor_value_info("x", T.FLOAT, [4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 4])],
                     initializer=[h.make_tensor("M", T.INT64, [], [1]), h.make_tensor("cond", T.BOOL, [], [1])])
    yield "loop_alias", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), False
    # Outputs that are a weight, the input, and views of them.
    nodes = [h.make_node("Identity", ["W"], ["w_out"]), h.make_node("Identity", ["x"], ["x_out"]),
             h.make_node("Relu", ["x"], ["y"])]
    g = h.make_graph(nodes, "passthrough", [h.make_tensor_value_info("x", T.FLOAT, [4, 4])],
                     [h.make_tensor_value_info(n, T.FLOAT, [4, 4]) for n in ("w_out", "x_out", "y")],
                     initializer=[h.make_tensor("W", T.FLOAT, [4, 4], np.arange(16, dtype=np.float32))])
    yield "passthrough", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), False


@pytest.mark.parametrize("memory", ["planned", "release"])
@pytest.mark.parametrize("name, model, with_c", list(alias_models()))
def test_aliasing_outputs(name, model, with_c, memory, run_onyx, tmp_path):
    rng, _ = fresh_rng()
    feeds = {"x": rng.standard_normal((4, 4)).astype(np.float32)}
    if with_c:
        feeds["c"] = np.array(True)
    run_both(model, feeds, run_onyx, tmp_path, extra=("--memory", memory))


def malformed_models(tmp_path):
    huge = onnx.TensorProto(name="W", data_type=T.FLOAT, dims=[2 ** 61, 2], raw_data=b"")
    g = h.make_graph([h.make_node("Relu", ["W"], ["y"])], "g", [], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[huge])
    yield "overflowing shape", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), "address space"
    s = onnx.TensorProto(name="S", data_type=T.STRING, dims=[2])
    s.data_location = T.EXTERNAL
    for k, v in (("location", "s.bin"), ("offset", "0"), ("length", "16")):
        e = s.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "s.bin").write_bytes(b"x" * 64)
    g = h.make_graph([h.make_node("Identity", ["S"], ["y"])], "g", [], [h.make_tensor_value_info("y", T.STRING, None)],
                     initializer=[s])
    yield "external strings", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), "string"
    w = onnx.TensorProto(name="W", data_type=T.FLOAT, dims=[2])
    w.data_location = T.EXTERNAL
    for k, v in (("location", "s.bin"), ("offset", "abc")):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = h.make_graph([h.make_node("Relu", ["W"], ["y"])], "g", [], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[w])
    yield "bad external offset", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), "offset 'abc'"


def test_malformed_tensors_are_errors(run_onyx, tmp_path):
    for label, model, expect in malformed_models(tmp_path):
        path = tmp_path / "bad.onnx"
        onnx.save(model, str(path))
        proc = run_onyx("run", path)
        assert proc.returncode == 1, f"{label}: rc {proc.returncode}\n{proc.stderr}"
        assert expect in proc.stderr, f"{label}: {proc.stderr}"


def invalid_models():
    """Models that onnxruntime refuses at load (and the ONNX checker rejects): (label, model, what
    onyx's error must say: the node and the rule)."""
    def vi(n, t=T.FLOAT, s=(2, 3)):
        return h.make_tensor_value_info(n, t, s)

    def model(nodes, ins, outs, opset=17):
        m = h.make_model(h.make_graph(nodes, "g", ins, outs), opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 8
        return m

    def branch(name, nodes, outs):
        return h.make_graph(nodes, name, [], outs)

    x, c = vi("x"), vi("c", T.BOOL, [])
    one = branch("one", [h.make_node("Identity", ["x"], ["t"], name="t_id")], [vi("t")])
    two = branch("two", [h.make_node("Identity", ["x"], ["a"]), h.make_node("Identity", ["x"], ["b"])],
                 [vi("a"), vi("b")])
    as_int = branch("as_int", [h.make_node("Cast", ["x"], ["e"], to=T.INT64)], [vi("e", T.INT64)])
    yield ("If branches with different output counts",
           model([h.make_node("If", ["c"], ["y"], name="cond", then_branch=one, else_branch=two)], [x, c], [vi("y")]),
           ["node 'cond' (If)", "then_branch has 1 output and else_branch 2"])
    yield ("If branches with different output types",
           model([h.make_node("If", ["c"], ["y"], name="cond", then_branch=one, else_branch=as_int)], [x, c], [vi("y")]),
           ["node 'cond' (If)", "then_branch's output 't' is declared tensor(float32) but else_branch's 'e' is "
            "tensor(int64)"])
    yield ("an unknown attribute", model([h.make_node("Relu", ["x"], ["y"], name="r", bogus=3)], [x], [vi("y")]),
           ["node 'r' (Relu)", "attribute 'bogus' is not an attribute of Relu-14"])
    yield ("an attribute of another spelling",
           model([h.make_node("Softmax", ["x"], ["y"], name="s", Axis=1)], [x], [vi("y")]),
           ["node 's' (Softmax)", "attribute 'Axis' is not an attribute of Softmax-13"])
    yield ("an attribute of the wrong kind",
           model([h.make_node("Softmax", ["x"], ["y"], name="s", axis=1.5)], [x], [vi("y")]),
           ["node 's' (Softmax)", "attribute 'axis' is of type float, but Softmax-13 declares it int"])
    twice = h.make_node("Softmax", ["x"], ["y"], name="s", axis=1)
    twice.attribute.extend([h.make_attribute("axis", 0)])
    yield ("an attribute given twice", model([twice], [x], [vi("y")]),
           ["node 's' (Softmax)", "attribute 'axis' is given twice"])
    yield ("a missing required attribute", model([h.make_node("Cast", ["x"], ["y"], name="k")], [x], [vi("y")]),
           ["node 'k' (Cast)", "required attribute 'to' of Cast-13 is missing"])
    yield ("an extra node input", model([h.make_node("Relu", ["x", "x"], ["y"], name="r")], [x], [vi("y")]),
           ["node 'r' (Relu)", "the node has 2 inputs, but Relu-14 takes 1 input"])
    yield ("an extra node output", model([h.make_node("Relu", ["x"], ["y", "z"], name="r")], [x], [vi("y")]),
           ["node 'r' (Relu)", "the node has 2 outputs, but Relu-14 takes 1 output"])
    yield ("a missing node input", model([h.make_node("Add", ["x"], ["y"], name="a")], [x], [vi("y")]),
           ["node 'a' (Add)", "the node has 1 input, but Add-14 takes 2 inputs"])
    yield ("an omitted required input", model([h.make_node("Add", ["x", ""], ["y"], name="a")], [x], [vi("y")]),
           ["node 'a' (Add)", "input 1 is omitted (an empty name), but Add-14's input 1 is not optional"])
    yield ("opset 100", model([h.make_node("Relu", ["x"], ["y"])], [x], [vi("y")], opset=100),
           ["imports opset 100 of domain 'ai.onnx', but ONNX defines its opsets 1 to"])
    yield ("a declared output type that contradicts the node",
           model([h.make_node("Relu", ["x"], ["y"], name="r")], [x], [vi("y", T.INT64)]),
           ["node 'r' (Relu)", "output 'y' is float32, but the model declares it int64"])
    body_in = [vi("i", T.INT64, []), vi("cin", T.BOOL, []), vi("v")]
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("Identity", ["v"], ["vout"])], "body",
                        body_in, [vi("cout", T.BOOL, []), vi("vout")])
    loop_ins = [vi("M", T.INT64, []), vi("cond", T.BOOL, []), x]
    yield ("a Loop body taking fewer values than the node carries",
           model([h.make_node("Loop", ["M", "cond", "x", "x"], ["y", "y2"], name="l", body=body)], loop_ins, [vi("y")]),
           ["node 'l' (Loop)", "the body has 3 inputs, but the node carries 2 values, so it takes 4"])
    cast_body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("Cast", ["v"], ["vout"], to=T.INT64)],
                             "body", body_in, [vi("cout", T.BOOL, []), vi("vout", T.INT64)])
    yield ("a Loop body changing a loop-carried value's type",
           model([h.make_node("Loop", ["M", "cond", "x"], ["y"], name="l", body=cast_body)], loop_ins, [vi("y")]),
           ["node 'l' (Loop)", "loop-carried value 0", "the body's input 'v' is declared tensor(float32) but its output "
            "'vout' is tensor(int64)"])
    # An op of another domain has no ONNX schema: the node naming more outputs than it has is
    # refused when it runs, not at an internal assertion.
    gamma = h.make_tensor("gamma", T.FLOAT, [3], [1.0, 0.5, 2.0])
    g = h.make_graph([h.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "gamma"], ["y", "m", "v", "s", "extra"],
                                  name="ssln", domain="com.microsoft")], "g", [x], [vi("y")], initializer=[gamma])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    yield ("a contrib op with more outputs than it has", m,
           ["node 'ssln' (com.microsoft::SkipSimplifiedLayerNormalization)", "the node names output 4, but its kernel "
            "produced no value for it"])


@pytest.mark.parametrize("label, model, expect", list(invalid_models()), ids=lambda v: v if isinstance(v, str) else "")
def test_invalid_models_are_refused_as_onnxruntime_refuses_them(label, model, expect, run_onyx, tmp_path):
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(Exception):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    proc = run_onyx("run", path)
    assert proc.returncode == 1, f"{label}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "internal error" not in proc.stderr, proc.stderr
    for text in expect:
        assert text in proc.stderr, f"{label}: {text!r} not in\n{proc.stderr}"
