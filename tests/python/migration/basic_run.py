"""Create sessions (from a path and from bytes), inspect inputs/outputs, run.

Usage: ONYX_MIGRATION_MODELS=DIR python basic_run.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
rng = np.random.default_rng(101)
results = {}


def describe(args):
    return [(a.name, a.shape, a.type) for a in args]


path = os.path.join(models, "mlp.onnx")
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
results["providers"] = sess.get_providers()
results["mlp_inputs"] = describe(sess.get_inputs())
results["mlp_outputs"] = describe(sess.get_outputs())

x = rng.standard_normal((4, 16)).astype(np.float32)
outputs = sess.run(None, {"X": x})
results["run_result_type"] = type(outputs).__name__
results["run_none"] = outputs

input_name = sess.get_inputs()[0].name
output_name = sess.get_outputs()[0].name
results["run_by_name"] = sess.run([output_name], {input_name: x})
results["run_keywords"] = sess.run(output_names=None, input_feed={input_name: x})

with open(path, "rb") as f:
    model_bytes = f.read()
from_bytes = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
results["from_bytes"] = from_bytes.run(None, {"X": x})

with_tuple = ort.InferenceSession(path, providers=[("CPUExecutionProvider", {})])
results["providers_from_tuple"] = with_tuple.get_providers()
results["from_tuple_provider"] = with_tuple.run(None, {"X": x})

mixed = ort.InferenceSession(os.path.join(models, "mixed.onnx"), providers=["CPUExecutionProvider"])
results["mixed_inputs"] = describe(mixed.get_inputs())
results["mixed_outputs"] = describe(mixed.get_outputs())
feed = {
    "reading": rng.standard_normal((3, 4)).astype(np.float32),
    "tally": rng.integers(-20, 20, size=(3, 4), dtype=np.int64),
}
results["mixed_run"] = mixed.run(None, feed)

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
