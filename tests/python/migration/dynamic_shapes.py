"""One session run again and again with different batch sizes.

Usage: ONYX_MIGRATION_MODELS=DIR python dynamic_shapes.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
rng = np.random.default_rng(505)
results = {}

sess = ort.InferenceSession(os.path.join(models, "mlp.onnx"), providers=["CPUExecutionProvider"])
runs = []
for batch in (1, 5, 2, 9, 5, 1):
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    (y,) = sess.run(None, {"X": x})
    runs.append((batch, y.shape, y))
results["mlp_runs"] = runs

# The same input twice gives the same output, whatever ran in between.
x = rng.standard_normal((4, 16)).astype(np.float32)
first = sess.run(None, {"X": x})[0]
sess.run(None, {"X": rng.standard_normal((11, 16)).astype(np.float32)})
second = sess.run(None, {"X": x})[0]
results["repeat_equal"] = bool(np.array_equal(first, second))
results["repeat_value"] = second

mixed = ort.InferenceSession(os.path.join(models, "mixed.onnx"), providers=["CPUExecutionProvider"])
mixed_runs = []
for batch in (3, 6, 1):
    feed = {
        "reading": rng.standard_normal((batch, 4)).astype(np.float32),
        "tally": rng.integers(-50, 50, size=(batch, 4), dtype=np.int64),
    }
    mixed_runs.append(mixed.run(None, feed))
results["mixed_runs"] = mixed_runs

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
