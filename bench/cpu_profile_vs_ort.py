#!/usr/bin/env python3
"""Where each CPU suite model's time goes, onyx beside onnxruntime, by family of operators.

    .venv/bin/python bench/cpu_profile_vs_ort.py [--suite DIR] [--threads 1 2] [--runs 30]
                                                 [--only NAME ...] [--out FILE]

The suite and its inputs are bench/cpu_vs_onnxruntime.py's (that script's docstring says how
they are made). For each model and thread count, each engine runs in its own worker process:
two warm-up runs, then --runs timed runs with per-node timing on (onyx: RunOptions.profile and
InferenceSession.last_run_stats(); onnxruntime: SessionOptions.enable_profiling, its
"*_kernel_time" events). Each node's time is its median over the runs; the nodes' times are
summed by family (the families below, by operator type: each engine's fused operators go where
their main work is, e.g. onnxruntime's FusedConv and onyx's onyx::FusedConv to convolutions), and
the table gives, per family, ms a run for each engine and the difference. "nodes" is the sum
over all nodes; "run" is the median wall time of the same runs (per-node timing included: the
difference from "nodes" is the executor's own time between nodes).

Both engines are profiled one after the other, not interleaved: read the differences per family
next to docs/cpu-speed.md's interleaved table, which is the measure of the ratio itself. Timing
each node costs each engine something; onnxruntime's profiler also writes every node's event and
gives kernel times in whole microseconds, so on the generated models (runs of 10 us to 1 ms) its
"run" is well above its unprofiled time and its per-family figures are coarse. "products" holds
every matrix product, weights' and attention's alike, where an engine leaves attention's as
MatMul or FusedMatMul nodes; an engine's fused Attention node is under "attention".

With --out, the tables replace the text between the markers "<!-- profile:begin" and
"<!-- profile:end -->" in FILE (appended at the end when the markers are not there).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cpu_vs_onnxruntime as suite  # noqa: E402  (SUITE, the inputs, machine and commit lines)

# Families, first match wins; op types as each engine names them (domain dropped).
FAMILIES = [
    ("products", {"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "DenseMatMul", "Linear", "LinearNBits",
                  "MatMulNBits", "SiluGateLinear", "RmsNormLinear", "RmsNormLinearNBits", "MatMulInteger",
                  "QGemm", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "Einsum"}),
    ("convolutions", {"Conv", "FusedConv", "NhwcFusedConv", "ConvTranspose", "QLinearConv"}),
    ("attention", {"Attention", "MultiHeadAttention", "GroupQueryAttention", "Softmax", "RotaryCacheAttention",
                   "RotaryCache", "RotaryHalf", "RotaryEmbedding"}),
    ("normalizations", {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                        "SkipSimplifiedLayerNormalization", "RMSNormalization", "BatchNormalization",
                        "EmbedLayerNormalization"}),
    ("pooling", {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}),
    ("layout and copies", {"Transpose", "Reshape", "Concat", "Split", "Slice", "Gather", "Squeeze", "Unsqueeze",
                           "Expand", "Identity", "Shape", "Cast", "Flatten", "ReorderInput", "ReorderOutput",
                           "GatherElements", "ScatterND", "Pad", "Tile", "Range", "ConstantOfShape", "OnesLike"}),
]
OTHER = "elementwise and other"


def family(op):
    op = op.split("::")[-1]
    for name, ops in FAMILIES:
        if op in ops:
            return name
    return OTHER


# ---- worker ------------------------------------------------------------------------------------

def worker(engine, model_path, threads, runs):
    """Prints one JSON line: {"run_ms": median wall ms, "nodes": {node: [op, median ms]}}."""
    times = collections.defaultdict(list)
    ops = {}
    walls = []
    if engine == "ort":
        tmp = tempfile.mkdtemp(prefix="onyx-ortprof-")
        sess = suite.session("ort", model_path, threads, profile_prefix=os.path.join(tmp, "p"))
        feeds = suite._inputs(model_path, sess)
        feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
        for _ in range(2):
            sess.run(None, feeds)
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            walls.append((time.perf_counter() - t0) * 1e3)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        os.rmdir(tmp)
        # Warm-up runs are in the file too: keep each node's last `runs` kernel times.
        for e in events:
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                node = e["name"][: -len("_kernel_time")]
                times[node].append(e["dur"] / 1e3)
                ops[node] = e.get("args", {}).get("op_name", "?")
        times = {n: v[-runs:] for n, v in times.items()}
    else:
        import onyx
        sess = suite.session("onyx", model_path, threads)
        feeds = suite._inputs(model_path, sess)
        feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
        ro = onyx.RunOptions()
        ro.profile = True
        for _ in range(2):
            sess.run(None, feeds, ro)
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feeds, ro)
            walls.append((time.perf_counter() - t0) * 1e3)
            for n in sess.last_run_stats()["nodes"]:
                times[n["node"]].append(n["seconds"] * 1e3)
                ops[n["node"]] = n["op"]
    out = {"run_ms": statistics.median(walls),
           "nodes": {n: [ops[n], statistics.median(v)] for n, v in times.items()}}
    print(json.dumps(out), flush=True)


def profile(engine, model_path, threads, runs):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, model_path, str(threads), str(runs)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{engine} worker on {model_path} at {threads} thread(s) failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- report ------------------------------------------------------------------------------------

def by_family(result):
    fam = collections.defaultdict(float)
    for op, ms in result["nodes"].values():
        fam[family(op)] += ms
    return fam


def top_ops(result, k=3):
    per = collections.defaultdict(float)
    for op, ms in result["nodes"].values():
        per[op.split("::")[-1]] += ms
    return sorted(per.items(), key=lambda kv: -kv[1])[:k]


def table(label, threads, ort, onyx):
    fo, fx = by_family(ort), by_family(onyx)
    no, nx = sum(fo.values()), sum(fx.values())
    # Milliseconds, or microseconds for a model whose run is under one.
    unit, scale = ("ms", 1.0) if max(ort["run_ms"], onyx["run_ms"]) >= 1.0 else ("us", 1e3)
    lines = [f"#### {label}, {threads} thread{'s' if threads > 1 else ''}", "",
             f"run (profiled) ort {ort['run_ms'] * scale:.3f} {unit}, onyx {onyx['run_ms'] * scale:.3f} {unit}; "
             f"nodes ort {no * scale:.3f}, onyx {nx * scale:.3f} (onyx/ort {nx / no:.2f})", "",
             f"| family | ort {unit} | onyx {unit} | onyx - ort |", "|---|---:|---:|---:|"]
    names = [n for n, _ in FAMILIES] + [OTHER]
    for n in sorted(names, key=lambda n: -(fx.get(n, 0) - fo.get(n, 0))):
        a, b = fo.get(n, 0.0), fx.get(n, 0.0)
        if a * scale < 0.0005 and b * scale < 0.0005:
            continue
        lines.append(f"| {n} | {a * scale:.3f} | {b * scale:.3f} | {(b - a) * scale:+.3f} |")
    ox = ", ".join(f"{op} {ms * scale:.2f}" for op, ms in top_ops(onyx))
    oo = ", ".join(f"{op} {ms * scale:.2f}" for op, ms in top_ops(ort))
    lines += ["", f"largest op types ({unit}): onyx {ox}; ort {oo}", ""]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        worker(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=os.path.join(ROOT, "build-bench", "cpu-suite"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", nargs="*", default=None, help="file stems (bert-base, gen/mlp, ...) to profile")
    ap.add_argument("--out", default=None, help="markdown file whose profile section to replace")
    args = ap.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    parts = []
    missing = []
    for label, stem, _ in suite.SUITE:
        if args.only and stem not in args.only:
            continue
        path = os.path.join(args.suite, stem + ".onnx")
        if not os.path.exists(path):
            missing.append(stem)
            continue
        for t in args.threads:
            ort = profile("ort", path, t, args.runs)
            onyx = profile("onyx", path, t, args.runs)
            text = table(label, t, ort, onyx)
            print(text, flush=True)
            parts.append(text)
    head = [f"Written by `bench/cpu_profile_vs_ort.py` (its docstring has the method).", "",
            f"- date: {started:%Y-%m-%d %H:%M} UTC; commit {suite.git('rev-parse', '--short', 'HEAD')}",
            f"- machine: {suite.machine()}",
            f"- onyx: {suite.onyx_build()}",
            f"- command: `.venv/bin/python bench/cpu_profile_vs_ort.py {' '.join(argv)}`", ""]
    if missing:
        head += [f"- not in {args.suite}: {', '.join(missing)}", ""]
    if args.out:
        body = "\n".join(head + parts)
        begin, end = "<!-- profile:begin (bench/cpu_profile_vs_ort.py) -->", "<!-- profile:end -->"
        text = open(args.out).read() if os.path.exists(args.out) else ""
        if begin in text and end in text:
            text = text[: text.index(begin)] + begin + "\n" + body + "\n" + text[text.index(end):]
        else:
            text = text.rstrip("\n") + "\n\n" + begin + "\n" + body + "\n" + end + "\n"
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
