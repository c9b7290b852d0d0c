"""Shared fixtures for the Python tests of onyx.

The module under test is `onyx` unless ONYX_PYTEST_MODULE names another one;
`ONYX_PYTEST_MODULE=onnxruntime` runs the whole suite against onnxruntime
itself, which is how the suite's own expectations are checked. Assertions on
behaviour that only onyx promises (close(), Error.chain, refusing
non-contiguous arrays, ...) are guarded by `is_onyx`.

onnxruntime is the reference everywhere and must be importable too.
"""

from __future__ import annotations

import importlib
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyapi_models  # noqa: E402
from pyapi_support import MODULE_NAME, UNDER_TEST_IS_ORT, make_feed  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "timing: measures wall-clock behaviour (threads, GIL); retried internally, lenient thresholds",
    )


def pytest_report_header(config):
    return f"module under test: {MODULE_NAME} (ONYX_PYTEST_MODULE)"


def _import_or_fail(name: str, why: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or an error raised while loading the extension
        pytest.fail(
            f"cannot import {name!r} ({why}): {type(exc).__name__}: {exc}\n"
            f"python: {sys.executable}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def onyx_module():
    """The module under test. A failed import fails the tests: the package must exist."""
    return _import_or_fail(MODULE_NAME, "the module under test; set ONYX_PYTEST_MODULE to change it")


@pytest.fixture(scope="session")
def ort_module():
    """onnxruntime, the reference implementation."""
    return _import_or_fail("onnxruntime", "the reference the tests compare against")


@pytest.fixture(scope="session")
def is_onyx() -> bool:
    """False when the suite runs against onnxruntime itself."""
    return not UNDER_TEST_IS_ORT


@pytest.fixture(scope="session")
def error_type(onyx_module):
    """What a bad call must raise: onyx.Error, or any Exception under onnxruntime."""
    if UNDER_TEST_IS_ORT:
        return Exception
    err = getattr(onyx_module, "Error", None)
    assert isinstance(err, type) and issubclass(err, RuntimeError), (
        f"{MODULE_NAME}.Error must be a subclass of RuntimeError, got {err!r}"
    )
    return err


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("models")
    pyapi_models.build_all(str(directory))
    return directory


@pytest.fixture(scope="session")
def models(model_dir) -> dict[str, str]:
    """{name: path} of every model in pyapi_models.BUILDERS."""
    return {name: str(model_dir / f"{name}.onnx") for name in pyapi_models.BUILDERS}


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A Generator seeded from the test's id: fresh per test, the same on every run."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def feed_for(rng):
    """feed_for(model, batch=3) -> a fresh random feed for that model."""
    return lambda model, batch=3: make_feed(model, rng, batch)
