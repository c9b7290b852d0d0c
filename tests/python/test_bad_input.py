"""Bad calls into InferenceSession: the right exception, a message that names
the culprit, and a session that still runs good feeds afterwards.

Under ONYX_PYTEST_MODULE=onnxruntime the onyx-only promises are not checked:
Error.chain, naming the input in dtype errors, TypeError for wrong Python
types, refusing non-contiguous arrays and Python lists, close().
"""

from __future__ import annotations

import numpy as np
import pytest

from pyapi_compare import diff
from pyapi_support import make_feed

MIXED_INPUTS = ("reading", "tally")


@pytest.fixture(scope="module")
def session(onyx_module, models):
    """One session shared by every case: errors must not damage it."""
    return onyx_module.InferenceSession(models["mixed"], providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def reference(ort_module, models):
    return ort_module.InferenceSession(models["mixed"], providers=["CPUExecutionProvider"])


@pytest.fixture
def good_feed(rng):
    return make_feed("mixed", rng, batch=2)


@pytest.fixture
def still_runs(session, reference, rng):
    """still_runs(): the shared session runs a fresh good feed and matches onnxruntime."""

    def check():
        for batch in (2, 5):
            feed = make_feed("mixed", rng, batch=batch)
            problems = diff(reference.run(None, feed), session.run(None, feed), "outputs")
            problems += diff(reference.run(["positive", "total"], feed), session.run(["positive", "total"], feed), "subset")
            assert not problems, "session broken after an error:\n  " + "\n  ".join(problems)

    return check


@pytest.fixture
def check_error(is_onyx, error_type):
    """check_error(excinfo, names=..., onyx_names=...): type, message and chain of a raised error."""

    def check(excinfo, names=(), onyx_names=()):
        exc = excinfo.value
        assert isinstance(exc, error_type), f"raised {type(exc).__name__}, expected {error_type.__name__}: {exc}"
        message = str(exc)
        wanted = list(names) + (list(onyx_names) if is_onyx else [])
        for name in wanted:
            assert name in message, f"the message does not name {name!r}: {message!r}"
        if is_onyx:
            chain = getattr(exc, "chain", None)
            assert isinstance(chain, list) and chain, f"Error.chain must be a non-empty list, got {chain!r}"
            assert all(isinstance(c, str) and c for c in chain), f"Error.chain holds non-strings: {chain!r}"
            for entry in chain:
                assert entry in message, f"chain entry {entry!r} missing from the message {message!r}"
        return exc

    return check


def _bad_feeds(feed):
    """{case: (bad feed, names every message holds, names onyx's message holds too)}"""
    reading, tally = feed["reading"], feed["tally"]
    return {
        "dtype_float64": ({**feed, "reading": reading.astype(np.float64)}, (), ("reading",)),
        "dtype_int32": ({**feed, "tally": tally.astype(np.int32)}, (), ("tally",)),
        "dtype_string": ({**feed, "reading": reading.astype(str)}, (), ("reading",)),
        "rank_low": ({**feed, "reading": reading[0]}, ("reading",), ()),
        "rank_high": ({**feed, "tally": tally[None]}, ("tally",), ()),
        "fixed_dim": ({**feed, "reading": np.concatenate([reading, reading[:, :1]], axis=1)}, ("reading",), ()),
        "missing_feed": ({"reading": reading}, ("tally",), ()),
        "missing_all": ({}, (), MIXED_INPUTS),
        "unknown_feed": ({**feed, "no_such_input": reading}, ("no_such_input",), ()),
    }


BAD_FEED_CASES = list(_bad_feeds(make_feed("mixed", np.random.default_rng(1))))


@pytest.mark.parametrize("case", BAD_FEED_CASES)
def test_bad_feed(case, session, good_feed, check_error, still_runs):
    feed, names, onyx_names = _bad_feeds(good_feed)[case]
    with pytest.raises(Exception) as excinfo:
        session.run(None, feed)
    check_error(excinfo, names, onyx_names)
    still_runs()


@pytest.mark.parametrize("output_names", [["no_such_output"], ["total", "no_such_output"]], ids=["alone", "with_good"])
def test_unknown_output_name(output_names, session, good_feed, check_error, still_runs):
    with pytest.raises(Exception) as excinfo:
        session.run(output_names, good_feed)
    check_error(excinfo, ("no_such_output",))
    still_runs()


NON_CONTIGUOUS = {
    "strided_columns": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
    "transposed": lambda a: np.ascontiguousarray(a.T).T,
    "negative_stride": lambda a: np.ascontiguousarray(a[::-1])[::-1],
}


@pytest.mark.parametrize("case", list(NON_CONTIGUOUS))
def test_non_contiguous(case, session, reference, good_feed, is_onyx, check_error, still_runs):
    reading = NON_CONTIGUOUS[case](good_feed["reading"])
    assert np.array_equal(reading, good_feed["reading"]) and not reading.flags.c_contiguous
    feed = {**good_feed, "reading": reading}
    if is_onyx:
        with pytest.raises(Exception) as excinfo:
            session.run(None, feed)
        check_error(excinfo, ("reading",))
    else:
        # onnxruntime copies such arrays; then the values must be right.
        problems = diff(reference.run(None, good_feed), session.run(None, feed))
        assert not problems, problems
    still_runs()


def test_feed_not_a_dict(session, good_feed, is_onyx, still_runs):
    with pytest.raises(Exception) as excinfo:
        session.run(None, list(good_feed.values()))
    if is_onyx:
        assert isinstance(excinfo.value, TypeError), f"expected TypeError, got {excinfo.value!r}"
    still_runs()


@pytest.mark.parametrize("case", ["python_list_value", "int_key", "output_names_not_str"])
def test_wrong_python_types(case, session, good_feed, is_onyx, still_runs):
    """Wrong Python types raise TypeError (onnxruntime converts lists, so onyx-only)."""
    if not is_onyx:
        pytest.skip("onyx-only: onnxruntime accepts or reports these differently")
    if case == "python_list_value":
        call = lambda: session.run(None, {**good_feed, "reading": good_feed["reading"].tolist()})
    elif case == "int_key":
        call = lambda: session.run(None, {0: good_feed["reading"], "tally": good_feed["tally"]})
    else:
        call = lambda: session.run([3], good_feed)
    with pytest.raises(TypeError):
        call()
    still_runs()


def test_closed_session(onyx_module, models, good_feed, is_onyx, error_type, check_error):
    if not is_onyx:
        pytest.skip("onyx-only: onnxruntime's InferenceSession has no close()")
    sess = onyx_module.InferenceSession(models["mixed"], providers=["CPUExecutionProvider"])
    sess.run(None, good_feed)
    sess.close()
    for call in (lambda: sess.run(None, good_feed), sess.get_inputs, sess.io_binding):
        with pytest.raises(error_type) as excinfo:
            call()
        check_error(excinfo)
        assert "closed" in str(excinfo.value), f"the message does not say closed: {excinfo.value}"


def test_context_manager_closes(onyx_module, models, reference, good_feed, is_onyx, error_type):
    if not is_onyx:
        pytest.skip("onyx-only: onnxruntime's InferenceSession is no context manager")
    with onyx_module.InferenceSession(models["mixed"], providers=["CPUExecutionProvider"]) as sess:
        problems = diff(reference.run(None, good_feed), sess.run(None, good_feed))
        assert not problems, problems
    with pytest.raises(error_type, match="closed"):
        sess.run(None, good_feed)


def test_missing_model_path(onyx_module, tmp_path, check_error):
    path = tmp_path / "no_such_dir" / "absent_model.onnx"
    with pytest.raises(Exception) as excinfo:
        onyx_module.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    check_error(excinfo, (str(path),))


@pytest.mark.parametrize(
    "blob",
    [b"this is not an ONNX model", b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage"],
    ids=["text", "truncated_protobuf"],
)
def test_bytes_not_a_model(onyx_module, blob, check_error):
    with pytest.raises(Exception) as excinfo:
        onyx_module.InferenceSession(blob, providers=["CPUExecutionProvider"])
    check_error(excinfo)


def test_error_is_runtime_error(onyx_module, is_onyx):
    if not is_onyx:
        pytest.skip("onyx-only: onyx.Error")
    assert issubclass(onyx_module.Error, RuntimeError)
