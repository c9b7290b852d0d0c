"""Per-call overhead of `run` from Python: onyx.InferenceSession against onnxruntime's, in one
process, on tiny models where the call itself is most of the time.

Method: both sessions load the same model; rounds alternate onyx and onnxruntime (each round
times `--calls` back-to-back calls with time.perf_counter_ns after a warm-up), and the report
gives the median per-call time of each over `--rounds` rounds and the ratio of the medians,
with the ratio's spread (min and max over rounds). One thread each (OPENBLAS_NUM_THREADS=1 and
onnxruntime's intra_op_num_threads=1). Writes a Markdown table to stdout.

usage: .venv/bin/python bench/python_overhead.py [--rounds 15] [--calls 2000]
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def add_model(path):
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return lambda rng: {"a": rng.standard_normal((1, 4)).astype(np.float32),
                        "b": rng.standard_normal((1, 4)).astype(np.float32)}


def mlp_model(path):
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"]), helper.make_node("Softmax", ["y"], ["p"], axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 8])], [w1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return lambda rng: {"x": rng.standard_normal((1, 16)).astype(np.float32)}


def time_calls(sess, feed, calls):
    run = sess.run
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter_ns() - t0) / calls / 1000.0  # microseconds per call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    import onnxruntime as ort
    import onyx

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# Python per-call overhead: onyx vs onnxruntime\n")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; commit {commit}; "
          f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"- onnxruntime {ort.__version__} (CPUExecutionProvider, intra_op_num_threads=1, all optimizations); "
          f"onyx {onyx.__version__} (CPU, OPENBLAS_NUM_THREADS=1)")
    print(f"- method: `{' '.join(['bench/python_overhead.py'] + sys.argv[1:])}`: {args.rounds} interleaved rounds "
          f"of {args.calls} calls each, `sess.run(None, feed)` with numpy feeds; median per-call time, ratio of "
          f"medians (min-max of the per-round ratios)\n")
    print("| model | onyx us/call | onnxruntime us/call | onyx / onnxruntime |")
    print("|---|---:|---:|---:|")
    tmp = tempfile.mkdtemp()
    for name, make in (("Add [1,4]", add_model), ("MLP 16-32-8 + Softmax", mlp_model)):
        path = os.path.join(tmp, name.split()[0] + ".onnx")
        feed = make(path)(np.random.default_rng(1))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        x = onyx.InferenceSession(path)
        assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(x.run(None, feed), o.run(None, feed)))
        for s in (x, o):
            time_calls(s, feed, args.calls // 4)
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(time_calls(x, feed, args.calls))
            theirs.append(time_calls(o, feed, args.calls))
        ratios = [a / b for a, b in zip(mine, theirs)]
        m, t = statistics.median(mine), statistics.median(theirs)
        print(f"| {name} | {m:.2f} | {t:.2f} | {m / t:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
