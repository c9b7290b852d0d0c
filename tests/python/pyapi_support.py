"""What the Python tests share besides fixtures: the module under test and random feeds.

(Kept out of conftest.py so that test modules can import it by a name no
other test directory uses.)
"""

from __future__ import annotations

import os

import numpy as np

import pyapi_models

MODULE_NAME = os.environ.get("ONYX_PYTEST_MODULE", "onyx")
UNDER_TEST_IS_ORT = MODULE_NAME.split(".")[0] == "onnxruntime"


def _nonzero_ints(rng: np.random.Generator, shape) -> np.ndarray:
    values = rng.integers(1, 50, size=shape, dtype=np.int64)
    return values * rng.choice(np.array([-1, 1], dtype=np.int64), size=shape)


def make_feed(model: str, rng: np.random.Generator, batch: int = 3) -> dict[str, np.ndarray]:
    """Random (never zero) feeds for the models of pyapi_models."""
    if model == "mlp":
        return {"X": rng.standard_normal((batch, pyapi_models.MLP_IN)).astype(np.float32)}
    if model == "mixed":
        width = pyapi_models.MIXED_WIDTH
        return {
            "reading": rng.standard_normal((batch, width)).astype(np.float32),
            "tally": _nonzero_ints(rng, (batch, width)),
        }
    if model == "half":
        return {"H": rng.standard_normal((batch, pyapi_models.HALF_WIDTH)).astype(np.float16)}
    if model == "big":
        return {"X": rng.standard_normal((batch, pyapi_models.BIG_WIDTH)).astype(np.float32)}
    raise KeyError(model)
