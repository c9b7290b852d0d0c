"""The onyx CLI must reject bad models and bad inputs with a clear message on
stderr and exit status 1 (not 0, and not a crash/signal)."""

import numpy as np
import onnx
from onnx import TensorProto, helper


def assert_clean_error(proc, *must_contain, any_of=()):
    """rc == 1, and stderr holds every must_contain and (if given) one of any_of."""
    err = proc.stderr
    context = f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{err}"
    assert proc.returncode == 1, f"expected exit status 1; {context}"
    assert err.strip(), f"expected an error message on stderr; {context}"
    low = err.lower()
    for s in must_contain:
        assert s.lower() in low, f"stderr should mention {s!r}; {context}"
    if any_of:
        assert any(s.lower() in low for s in any_of), \
            f"stderr should mention one of {list(any_of)}; {context}"


# Loose wording checks for "this file is not a readable ONNX model".
PARSE_WORDS = ("parse", "invalid", "corrupt", "truncat", "malformed", "decode",
               "protobuf", "load", "read")


def save_npy(path, arr):
    np.save(path, arr)
    return path


def tiny_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


# -- bad model files ---------------------------------------------------------

def test_missing_model_file(run_onyx, tmp_path):
    missing = tmp_path / "no_such_model.onnx"
    proc = run_onyx("run", missing)
    assert_clean_error(proc, "no_such_model.onnx")


def test_random_bytes_model(run_onyx, tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(7).bytes(4096))
    assert_clean_error(run_onyx("run", path), any_of=PARSE_WORDS)


def test_truncated_model(run_onyx, models_dir, tmp_path):
    data = (models_dir / "mlp.onnx").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert_clean_error(run_onyx("run", path), any_of=PARSE_WORDS)


def test_unknown_op(run_onyx, tmp_path):
    node = helper.make_node("FrobnicateXYZ", ["x"], ["y"], name="frob_node_17")
    model = tiny_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "unknown_op.onnx"
    onnx.save_model(model, path)  # no checker: the op is deliberately unknown
    assert_clean_error(run_onyx("run", path), "FrobnicateXYZ", "frob_node_17")


def test_missing_external_data(run_onyx, tmp_path):
    # Initializer W stored "externally" in a file that does not exist.
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4],
                    data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "missing_weights.bin"), ("offset", "0"),
                       ("length", str(4 * 4 * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    model = tiny_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w])
    path = tmp_path / "external.onnx"
    path.write_bytes(model.SerializeToString())
    x = save_npy(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    assert_clean_error(run_onyx("run", path, "--input", f"x={x}"), "missing_weights.bin")


# -- bad inputs for a valid model ---------------------------------------------

def test_unknown_input_name(run_onyx, models_dir, tmp_path):
    x = save_npy(tmp_path / "x.npy", np.ones((2, 64), np.float32))
    bogus = save_npy(tmp_path / "bogus.npy", np.ones((2, 64), np.float32))
    proc = run_onyx("run", models_dir / "mlp.onnx",
                    "--input", f"x={x}", "--input", f"not_an_input_xyz={bogus}")
    assert_clean_error(proc, "not_an_input_xyz")


def test_missing_required_input(run_onyx, models_dir, tmp_path):
    # mlp has a single input, so use bert_layer: give input_ids only.
    ids = save_npy(tmp_path / "ids.npy", np.ones((2, 7), np.int64))
    proc = run_onyx("run", models_dir / "bert_layer.onnx", "--input", f"input_ids={ids}")
    assert_clean_error(proc, "attention_mask")


def test_wrong_dtype(run_onyx, models_dir, tmp_path):
    x = save_npy(tmp_path / "x.npy", np.ones((2, 64), np.int32))
    proc = run_onyx("run", models_dir / "mlp.onnx", "--input", f"x={x}")
    assert_clean_error(proc, any_of=("dtype", "int32"))


def test_wrong_shape(run_onyx, models_dir, tmp_path):
    x = save_npy(tmp_path / "x.npy", np.ones((2, 63), np.float32))
    proc = run_onyx("run", models_dir / "mlp.onnx", "--input", f"x={x}")
    assert_clean_error(proc, "shape")
