"""IO binding: CPU inputs, outputs bound by name, rebinding, OrtValue inputs and outputs.

Usage: ONYX_MIGRATION_MODELS=DIR python io_binding.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
rng = np.random.default_rng(404)
results = {}

sess = ort.InferenceSession(os.path.join(models, "mlp.onnx"), providers=["CPUExecutionProvider"])
x = rng.standard_normal((3, 16)).astype(np.float32)
results["plain_run"] = sess.run(None, {"X": x})

binding = sess.io_binding()
binding.bind_cpu_input("X", x)
binding.bind_output("Y")
sess.run_with_iobinding(binding)
results["copy_outputs_to_cpu"] = binding.copy_outputs_to_cpu()
results["get_outputs"] = [
    (v.shape(), v.data_type(), v.device_name(), v.is_tensor(), v.numpy())
    for v in binding.get_outputs()
]

# Rebind with another batch size; the output is bound with an explicit device.
binding.clear_binding_inputs()
binding.clear_binding_outputs()
x7 = rng.standard_normal((7, 16)).astype(np.float32)
binding.bind_cpu_input("X", x7)
binding.bind_output("Y", "cpu")
sess.run_with_iobinding(binding)
results["rebound_batch7"] = binding.copy_outputs_to_cpu()

# OrtValue in, preallocated OrtValue out.
x_value = ort.OrtValue.ortvalue_from_numpy(x)
results["ortvalue_in"] = (x_value.shape(), x_value.data_type(), x_value.device_name(), x_value.is_tensor())
results["ortvalue_roundtrip"] = x_value.numpy()
y_value = ort.OrtValue.ortvalue_from_shape_and_type([3, 8], np.float32)
results["ortvalue_out_before"] = (y_value.shape(), y_value.data_type())
ov_binding = sess.io_binding()
ov_binding.bind_ortvalue_input("X", x_value)
ov_binding.bind_ortvalue_output("Y", y_value)
sess.run_with_iobinding(ov_binding)
results["ortvalue_output"] = y_value.numpy()

# An OrtValue straight in the feed dict.
results["run_with_ortvalue_feed"] = sess.run(None, {"X": x_value})

# Several outputs bound by name, not in model order.
mixed = ort.InferenceSession(os.path.join(models, "mixed.onnx"), providers=["CPUExecutionProvider"])
a = rng.standard_normal((2, 4)).astype(np.float32)
i = rng.integers(-9, 9, size=(2, 4), dtype=np.int64)
mb = mixed.io_binding()
mb.bind_cpu_input("reading", a)
mb.bind_ortvalue_input("tally", ort.OrtValue.ortvalue_from_numpy(i))
mb.bind_output("positive")
mb.bind_output("total")
mb.bind_output("doubled")
mb.synchronize_inputs()
mixed.run_with_iobinding(mb)
mb.synchronize_outputs()
results["mixed_bound"] = mb.copy_outputs_to_cpu()
results["mixed_bound_types"] = [v.data_type() for v in mb.get_outputs()]
results["mixed_plain"] = mixed.run(["positive", "total", "doubled"], {"reading": a, "tally": i})

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
