"""Element types through InferenceSession.run against values numpy can compute itself."""

from __future__ import annotations

import numpy as np
import pytest

from pyapi_compare import diff


def _session(mod, path):
    return mod.InferenceSession(path, providers=["CPUExecutionProvider"])


def test_bfloat16_input(onyx_module, models, rng, is_onyx):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 feeds are ml_dtypes arrays")
    if not is_onyx:
        pytest.skip("onyx-only: onnxruntime takes no ml_dtypes.bfloat16 arrays")
    sess = _session(onyx_module, models["bf16"])
    assert [(a.name, a.shape, a.type) for a in sess.get_inputs()] == [("brain_in", [2, 3], "tensor(bfloat16)")]
    value = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    (out,) = sess.run(None, {"brain_in": value})
    assert out.dtype == np.float32
    # bfloat16 -> float32 is exact.
    assert np.array_equal(out, value.astype(np.float32))


def test_bfloat16_rejects_float32(onyx_module, models, rng, error_type, is_onyx):
    sess = _session(onyx_module, models["bf16"])
    with pytest.raises(error_type) as excinfo:
        sess.run(None, {"brain_in": rng.standard_normal((2, 3)).astype(np.float32)})
    if is_onyx:
        assert "brain_in" in str(excinfo.value)


def test_float16(onyx_module, ort_module, models, feed_for):
    feed = feed_for("half", batch=4)
    got = _session(onyx_module, models["half"]).run(None, feed)
    want = _session(ort_module, models["half"]).run(None, feed)
    assert [o.dtype for o in got] == [np.float16, np.float32]
    # F is Y widened, so it carries float16's rounding: compared with float16's tolerance.
    problems = diff([want[0], want[1].astype(np.float16)], [got[0], got[1].astype(np.float16)])
    assert not problems, problems
    # F is Cast<float>(Y): exactly Y widened.
    assert np.array_equal(got[1], got[0].astype(np.float32))
    if onyx_module.__name__ != "onyx":
        return
    # onyx rounds each op's float16 result once, as a float64 computation rounded per op does.
    import onnx
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(str(models["half"])).graph.initializer}
    h = feed["H"].astype(np.float64)
    ref = (np.float16(1) * (h * init["S"]).astype(np.float16)).astype(np.float64) + init["B"]
    assert np.array_equal(got[0], ref.astype(np.float16))


@pytest.mark.parametrize("kind", ["str_", "object"])
def test_strings(onyx_module, models, kind):
    words = ["", "plain", "with space", "caf\u00e9", "\u6f22\u5b57\u304b\u306a", "x" * 300]
    array = np.array(words, dtype=object if kind == "object" else None)
    (out,) = _session(onyx_module, models["strings"]).run(None, {"S": array})
    assert out.shape == (len(words),)
    assert out.tolist() == words
    assert all(type(v) is str for v in out.tolist())


def test_int64_and_bool(onyx_module, models, feed_for):
    feed = feed_for("mixed", batch=6)
    feed["tally"][0, 0] = 2**40 + 7  # beyond int32
    total, doubled, positive = _session(onyx_module, models["mixed"]).run(None, feed)
    assert doubled.dtype == np.int64 and positive.dtype == np.bool_
    assert np.array_equal(doubled, feed["tally"] * 2)
    assert np.array_equal(positive, feed["reading"] > 0)
    assert total.dtype == np.float32 and total.shape == feed["reading"].shape


def _sequence_model(path):
    """x (sequence of float tensors), y -> (SequenceInsert(x, y) as a sequence, its length,
    ConcatFromSequence along axis 0)."""
    import onnx
    from onnx import TensorProto, helper
    seq = helper.make_tensor_sequence_value_info
    nodes = [helper.make_node("SequenceInsert", ["x", "y"], ["s"]),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0)]
    graph = helper.make_graph(nodes, "seq", [seq("x", TensorProto.FLOAT, None),
                                             helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
                              [seq("s", TensorProto.FLOAT, None), helper.make_tensor_value_info("n", TensorProto.INT64, []),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_sequences_are_lists(onyx_module, ort_module, rng, tmp_path):
    path = str(_sequence_model(tmp_path / "seq.onnx"))
    x = [rng.standard_normal((k, 3)).astype(np.float32) for k in (2, 1, 4)]
    y = rng.standard_normal((3, 3)).astype(np.float32)
    got = _session(onyx_module, path).run(None, {"x": x, "y": y})
    want = _session(ort_module, path).run(None, {"x": x, "y": y})
    assert isinstance(got[0], list) and len(got[0]) == 4
    for g, w in zip(got[0], want[0]):
        assert np.array_equal(g, w)
    assert int(got[1]) == int(want[1]) == 4
    assert np.array_equal(got[2], want[2])


def test_sequence_types_read_as_onnxruntime_writes_them(onyx_module, ort_module, tmp_path):
    path = str(_sequence_model(tmp_path / "seq.onnx"))
    got = [(a.name, a.type) for a in _session(onyx_module, path).get_inputs() + _session(onyx_module, path).get_outputs()]
    want = [(a.name, a.type) for a in _session(ort_module, path).get_inputs() + _session(ort_module, path).get_outputs()]
    assert got == want
