"""run() with output_names None, a subset, a reordered subset; feeds in any order.

Usage: ONYX_MIGRATION_MODELS=DIR python output_selection.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
rng = np.random.default_rng(303)
sess = ort.InferenceSession(os.path.join(models, "mixed.onnx"), providers=["CPUExecutionProvider"])
a = rng.standard_normal((6, 4)).astype(np.float32)
i = rng.integers(-100, 100, size=(6, 4), dtype=np.int64)
feed = {"reading": a, "tally": i}
results = {}

results["all"] = sess.run(None, feed)
results["output_names"] = [o.name for o in sess.get_outputs()]
results["only_mask"] = sess.run(["positive"], feed)
results["only_twice"] = sess.run(["doubled"], feed)
results["mask_then_sum"] = sess.run(["positive", "total"], feed)
results["reversed"] = sess.run(["positive", "doubled", "total"], feed)
results["feed_reordered"] = sess.run(None, {"tally": i, "reading": a})
results["dtypes"] = [str(o.dtype) for o in sess.run(None, feed)]

by_name = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
results["by_name_keys"] = sorted(by_name)
results["mask_count"] = int(by_name["positive"].sum())

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
