"""DLPack and OrtValue on the host: no copies in either direction (the GPU suite checks the
same with torch on cuda:0, tools/gpu_python_check.py)."""
import numpy as np
import pytest


@pytest.fixture
def onyx():
    import onyx
    return onyx


def test_ortvalue_shares_numpy_memory(onyx):
    a = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    v = onyx.OrtValue.ortvalue_from_numpy(a)
    assert v.data_ptr() == a.ctypes.data and v.shape() == [4, 5] and v.data_type() == "tensor(float)"
    back = np.from_dlpack(v)
    assert back.ctypes.data == a.ctypes.data and np.array_equal(back, a)
    w = onyx.OrtValue.from_dlpack(a)
    assert w.data_ptr() == a.ctypes.data
    assert v.numpy().ctypes.data != a.ctypes.data, "numpy() is a copy, as onnxruntime's"
    assert v.__dlpack_device__() == (1, 0)


def test_outputs_exchange_without_copies(onyx, models, feed_for):
    sess = onyx.InferenceSession(models["mlp"])
    feed = feed_for("mlp", batch=4)
    name = sess.get_inputs()[0].name
    x = onyx.OrtValue.from_dlpack(feed[name])
    (out,) = sess.run_with_ort_values(None, {name: x})
    arr = np.from_dlpack(out)
    assert arr.ctypes.data == out.data_ptr()
    assert np.array_equal(arr, sess.run(None, feed)[0])
    # an output bound to the caller's buffer is written there
    buf = np.empty_like(arr)
    b = sess.io_binding()
    b.bind_cpu_input(name, feed[name])
    b.bind_ortvalue_output(sess.get_outputs()[0].name, onyx.OrtValue.from_dlpack(buf))
    sess.run_with_iobinding(b)
    assert np.array_equal(buf, arr) and b.get_outputs()[0].data_ptr() == buf.ctypes.data
