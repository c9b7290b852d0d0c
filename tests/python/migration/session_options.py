"""SessionOptions: optimization levels, thread counts, execution mode, config entries.

Usage: ONYX_MIGRATION_MODELS=DIR python session_options.py RESULT.pkl
"""
import os
import pickle
import sys

import numpy as np
import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
path = os.path.join(models, "mlp.onnx")
rng = np.random.default_rng(202)
x = rng.standard_normal((5, 16)).astype(np.float32)
results = {}

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = 2
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.log_severity_level = 3
so.enable_mem_pattern = True
so.enable_cpu_mem_arena = True
so.add_session_config_entry("session.intra_op.allow_spinning", "0")
results["options"] = {
    "graph_optimization_level": so.graph_optimization_level.name,
    "intra_op_num_threads": so.intra_op_num_threads,
    "inter_op_num_threads": so.inter_op_num_threads,
    "execution_mode": so.execution_mode.name,
    "log_severity_level": so.log_severity_level,
    "enable_mem_pattern": so.enable_mem_pattern,
    "enable_cpu_mem_arena": so.enable_cpu_mem_arena,
    "enable_profiling": so.enable_profiling,
}

sess = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
results["optimized_all"] = sess.run(None, {"X": x})
used = sess.get_session_options()
results["session_options_back"] = {
    "graph_optimization_level": used.graph_optimization_level.name,
    "intra_op_num_threads": used.intra_op_num_threads,
}

levels = {}
for level in (
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    # sess_options passed positionally, as much code does.
    levels[level.name] = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(
        None, {"X": x}
    )
results["by_level"] = levels

defaults = ort.SessionOptions()
results["default_level"] = defaults.graph_optimization_level.name
results["default_mode"] = defaults.execution_mode.name

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
