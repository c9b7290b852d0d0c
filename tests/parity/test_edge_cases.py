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
