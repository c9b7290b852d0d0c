"""float16, int64, bool and string tensors; bfloat16 inputs described.

Usage: ONYX_MIGRATION_MODELS=DIR python dtypes.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
rng = np.random.default_rng(606)
results = {}


def open_session(name):
    return ort.InferenceSession(os.path.join(models, name + ".onnx"), providers=["CPUExecutionProvider"])


half = open_session("half")
results["half_io"] = [(a.name, a.shape, a.type) for a in half.get_inputs() + half.get_outputs()]
h = rng.standard_normal((5, 6)).astype(np.float16)
# F is Y widened: its values carry float16's rounding, so it is recorded as float16 (and compared
# with float16's tolerance); engines may round Y*S+B's products differently by one ulp.
y, f = half.run(None, {"H": h})
results["half_run"] = [y, f.astype(np.float16)]
results["half_run_dtypes"] = [str(y.dtype), str(f.dtype)]

strings = open_session("strings")
results["strings_io"] = [(a.name, a.shape, a.type) for a in strings.get_inputs() + strings.get_outputs()]
words = ["alpha", "", "gr\u00fc\u00dfe", "\u6f22\u5b57", "a longer string with spaces"]
results["strings_unicode_array"] = strings.run(None, {"S": np.array(words)})
results["strings_object_array"] = strings.run(None, {"S": np.array(words, dtype=object)})
results["strings_values"] = strings.run(None, {"S": np.array(words, dtype=object)})[0].tolist()

bf16 = open_session("bf16")
results["bf16_io"] = [(a.name, a.shape, a.type) for a in bf16.get_inputs() + bf16.get_outputs()]

mixed = open_session("mixed")
a = rng.standard_normal((4, 4)).astype(np.float32)
i = rng.integers(-(2**40), 2**40, size=(4, 4), dtype=np.int64)
total, twice, mask = mixed.run(None, {"reading": a, "tally": i})
results["mixed_dtypes"] = [str(total.dtype), str(twice.dtype), str(mask.dtype)]
results["int64_large"] = twice
results["bool_mask"] = mask

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
