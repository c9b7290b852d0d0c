"""bench/ort_decode.py, the decode benchmark's onnxruntime column, on the CPU provider: the step at
fixed dimensions over bound buffers must give what onnxruntime's plain run of the unfixed model
gives, outputs written into the caller's buffers, and a buffer of the wrong kind is refused."""
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO_ROOT, gen_models

sys.path.insert(0, str(REPO_ROOT / "bench"))
import ort_decode  # noqa: E402

CONFIG = dict(vocab=96, hidden=32, heads=4, kv_heads=2, head_dim=8, ffn=64, layers=2, max_pos=64,
              rope_theta=10000.0, rms_eps=1e-6, tie=True)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("ort_decode") / "decoder.onnx"
    onnx.save(gen_models.make_llama_layer(CONFIG, "ort_decode", seed=7), str(path))
    return str(path)


def feeds_for(batch, past, rng):
    c = CONFIG
    feeds = {
        "input_ids": rng.integers(0, c["vocab"], (batch, 1)).astype(np.int64),
        "attention_mask": np.ones((batch, past + 1), np.int64),
        "position_ids": np.full((batch, 1), past, np.int64),
    }
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (batch, c["kv_heads"], past, c["head_dim"])).astype(np.float32)
    return feeds


@pytest.mark.parametrize("batch,past", [(1, 5), (3, 11)])
def test_bound_static_step_matches_plain_run(decoder, batch, past):
    rng = np.random.default_rng()
    feeds = feeds_for(batch, past, rng)
    plain = ort.InferenceSession(decoder, providers=["CPUExecutionProvider"])
    names = [o.name for o in plain.get_outputs()]
    want = dict(zip(names, plain.run(None, feeds)))

    step = ort_decode.OrtStep(decoder, ort_decode.decoder_dims(batch, past), provider="CPUExecutionProvider",
                              cuda_graph=False)
    outs = {n: np.full(want[n].shape, np.nan, np.float32) for n in names}
    step.bind(feeds, outs)
    step.run()
    for n in names:
        np.testing.assert_allclose(outs[n], want[n], rtol=1e-5, atol=1e-5, err_msg=n)
    # New values in the same buffers: the next run reads them (the binding holds addresses).
    feeds["input_ids"][:] = (feeds["input_ids"] + 1) % CONFIG["vocab"]
    want = dict(zip(names, plain.run(None, feeds)))
    step.run()
    np.testing.assert_allclose(outs["logits"], want["logits"], rtol=1e-5, atol=1e-5)


def test_refuses_what_it_cannot_bind(decoder):
    step = ort_decode.OrtStep(decoder, ort_decode.decoder_dims(1, 4), provider="CPUExecutionProvider",
                              cuda_graph=False)
    feeds = feeds_for(1, 4, np.random.default_rng())
    with pytest.raises(KeyError, match="present.1.value"):
        step.bind(feeds, {"logits": np.zeros((1, 1, CONFIG["vocab"]), np.float32)})
    feeds["attention_mask"] = np.ones((5, 2), np.int64).T  # a transposed view: not contiguous
    outs = {o.name: np.zeros(1, np.float32) for o in step.session.get_outputs()}
    with pytest.raises(ValueError, match="C-contiguous"):
        step.bind(feeds, outs)
    with pytest.raises(ValueError, match="CUDA execution provider"):
        ort_decode.OrtStep(decoder, {}, provider="CPUExecutionProvider", cuda_graph=True)


def test_bfloat16_reciprocals_become_divisions_of_one(tmp_path):
    """onnxruntime has no bfloat16 Reciprocal kernel; onnxruntime_form writes a copy beside the model
    where each bfloat16 Reciprocal(x) is Div(1, x), reading the original's external weights, and
    leaves a float Reciprocal and the original file alone."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng()
    w = (rng.random(64, dtype=np.float32) + 0.5).astype(np.float32)
    nodes = [
        h.make_node("Add", ["x", "w"], ["s"]),
        h.make_node("Reciprocal", ["s"], ["r32"], name="float_reciprocal"),
        h.make_node("Cast", ["s"], ["sb"], to=T.BFLOAT16),
        h.make_node("Reciprocal", ["sb"], ["rb"], name="bf16_reciprocal"),
        h.make_node("Reciprocal", ["rb"], ["rrb"]),  # unnamed: its copy is named by its output
        h.make_node("Cast", ["rrb"], ["y16"], to=T.FLOAT),
    ]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [64])],
                         [h.make_tensor_value_info("r32", T.FLOAT, [64]), h.make_tensor_value_info("y16", T.FLOAT, [64])],
                         [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    before = path.read_bytes()

    out, rewritten = ort_decode.onnxruntime_form(str(path))
    assert rewritten == 2 and out != str(path) and path.read_bytes() == before
    copy = onnx.load(out)  # with the original's external weights
    np.testing.assert_array_equal(numpy_helper.to_array(next(t for t in copy.graph.initializer if t.name == "w")), w)
    ops = {n.output[0]: n for n in copy.graph.node}
    assert ops["r32"].op_type == "Reciprocal"
    for name, x in (("rb", "sb"), ("rrb", "rb")):
        assert ops[name].op_type == "Div" and ops[name].input[1] == x
        one = next(t for t in copy.graph.initializer if t.name == ops[name].input[0])
        assert one.data_type == T.BFLOAT16 and float(numpy_helper.to_array(one)) == 1.0

    x = rng.standard_normal(64).astype(np.float32)
    want = ReferenceEvaluator(onnx.load(str(path))).run(None, {"x": x})
    got = ReferenceEvaluator(copy).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert not np.allclose(got[1], 1 / (1 / (x + w)), rtol=0, atol=0)  # bfloat16 rounding did happen

    float_only = tmp_path / "f.onnx"
    onnx.save(h.make_model(h.make_graph(nodes[:2], "g", graph.input, graph.output[:1], [numpy_helper.from_array(w, "w")]),
                           opset_imports=[h.make_opsetid("", 17)]), str(float_only))
    assert ort_decode.onnxruntime_form(str(float_only)) == (str(float_only), 0)
