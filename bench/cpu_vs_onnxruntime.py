#!/usr/bin/env python3
"""onyx against onnxruntime on the CPU, side by side, writing docs/cpu-speed.md.

    .venv/bin/python bench/cpu_vs_onnxruntime.py [--suite DIR] [--threads 1 2] [--reps 5] [--out FILE]

The suite: the models bench/cpu_suite_models.py exports into DIR (real architectures with random
weights; that script needs torch, in a separate environment) plus the generated models of
tools/gen_models.py (the bundled tiny ones and two of the planner set), made here into DIR/gen.
Models missing from DIR are left out of the table, and the table says so.

Method: each engine runs in its own worker process (one per model, engine and thread count), so
neither sees the other's threads or memory; both are fed the same inputs (DIR/NAME.inputs.npz,
or seeded random ones for the generated models). After two warm-up runs each, the workers take
turns: a batch of runs of one, then a batch of the other, the order flipped every repetition.
A batch is a fixed number of runs (about 0.4 s of the slower engine); each batch gives its
median run time, and each repetition the ratio of the two medians. The table gives the median of
those ratios with their range, the median run times, the ratio of CPU times (user + system per
run, the figure least moved by other work on a shared machine), each worker's peak resident
memory (ru_maxrss: the Python process with its engine, model and arena), and the largest
difference between the engines' outputs relative to onnxruntime's largest output magnitude.

onnxruntime: CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads = T, sequential.
onyx: onyx.InferenceSession with intra_op_num_threads = T (SessionOptions.intra_op_threads).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, file stem in DIR, kind) in table order; kind "decode" marks one token over a past.
SUITE = [
    ("bert-base (seq 128)", "bert-base", "encoder"),
    ("vit-base (224)", "vit-base", "encoder"),
    ("gpt2-small prefill (128)", "gpt2-prefill", "prefill"),
    ("gpt2-small decode (past 128)", "gpt2-decode", "decode"),
    ("llama-124m prefill (128)", "llama-124m-prefill", "prefill"),
    ("llama-124m decode (past 128)", "llama-124m-decode", "decode"),
    ("resnet50 (224)", "resnet50", "vision"),
    ("mobilenet_v3-large (224)", "mobilenet_v3-large", "vision"),
    ("generated mlp", "gen/mlp", "generated"),
    ("generated bert_layer", "gen/bert_layer", "generated"),
    ("generated llama_layer", "gen/llama_layer", "generated"),
    ("generated mlp_large", "gen/mlp_large", "generated"),
    ("generated encoder24_large", "gen/encoder24_large", "generated"),
]


# ---- worker ------------------------------------------------------------------------------------

def _inputs(model_path, session):
    npz = model_path[: -len(".onnx")] + ".inputs.npz"
    import numpy as np
    if os.path.exists(npz):
        with np.load(npz) as f:
            return {k: f[k] for k in f.files}
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import gen_models
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    return gen_models.sample_inputs(m, np.random.default_rng(0), sym={"batch": 4, "sequence": 16, "past_sequence": 32, "total_sequence": 48})


def session(engine, model_path, threads, profile_prefix=None):
    """The engine's CPU session as the suite runs it; `profile_prefix` (onnxruntime only) turns
    on its profiler, writing there."""
    if engine == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if profile_prefix:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    import onyx
    so = onyx.SessionOptions()
    so.intra_op_num_threads = threads
    return onyx.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])


def worker(engine, model_path, threads):
    sess = session(engine, model_path, threads)
    feeds = _inputs(model_path, sess)
    names = [o.name for o in sess.get_outputs()]
    for _ in range(2):
        outs = sess.run(names, feeds)
    out = sys.stdout
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "run":
            times = []
            for _ in range(cmd["n"]):
                c0, t0 = time.process_time(), time.perf_counter()
                sess.run(names, feeds)
                t1, c1 = time.perf_counter(), time.process_time()
                times.append(((t1 - t0) * 1e3, (c1 - c0) * 1e3))
            print(json.dumps({"times": times}), file=out, flush=True)
        elif cmd["op"] == "save":
            import numpy as np
            np.savez(cmd["path"], **{f"o{i}": o for i, o in enumerate(outs)})
            print(json.dumps({"saved": True}), file=out, flush=True)
        elif cmd["op"] == "rss":
            print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), file=out, flush=True)
        elif cmd["op"] == "quit":
            return 0
    return 0


class Worker:
    def __init__(self, engine, model, threads):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", engine, model, str(threads)], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask(None)

    def ask(self, cmd):
        if cmd is not None:
            self.p.stdin.write(json.dumps(cmd) + "\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the worker died")
        return json.loads(line)

    def close(self):
        try:
            self.ask({"op": "rss"})
            self.p.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.p.stdin.close()
        finally:
            self.p.wait(timeout=60)


# ---- driver ------------------------------------------------------------------------------------

def compare(model, threads, reps, tmp):
    import numpy as np
    ws = {e: Worker(e, model, threads) for e in ("ort", "onyx")}
    try:
        probe = {e: statistics.median(t[0] for t in w.ask({"op": "run", "n": 3})["times"]) for e, w in ws.items()}
        n = max(3, min(200, int(400 / max(probe.values()))))
        batches = {e: [] for e in ws}
        ratios, cpu_ratios = [], []
        for r in range(reps):
            order = ("ort", "onyx") if r % 2 == 0 else ("onyx", "ort")
            med = {}
            for e in order:
                time.sleep(0.05)  # let the other engine's spinning threads go idle
                t = ws[e].ask({"op": "run", "n": n})["times"]
                batches[e].append(t)
                med[e] = (statistics.median(x[0] for x in t), statistics.median(x[1] for x in t))
            ratios.append(med["onyx"][0] / med["ort"][0])
            cpu_ratios.append(med["onyx"][1] / med["ort"][1])
        outs = {}
        for e, w in ws.items():
            path = os.path.join(tmp, f"{e}.npz")
            w.ask({"op": "save", "path": path})
            with np.load(path) as f:
                outs[e] = [f[k] for k in sorted(f.files, key=lambda s: int(s[1:]))]
        rss = {e: w.ask({"op": "rss"})["rss_kib"] / 1024 for e, w in ws.items()}
    finally:
        for w in ws.values():
            try:
                w.close()
            except Exception:
                w.p.kill()
    diff = 0.0
    for a, b in zip(outs["onyx"], outs["ort"]):
        if a.dtype.kind == "f" and a.size:
            scale = max(float(np.max(np.abs(b))), 1e-30)
            diff = max(diff, float(np.max(np.abs(a.astype(np.float64) - b))) / scale)
        elif a.size and not np.array_equal(a, b):
            diff = math.inf
    all_ms = {e: statistics.median(x[0] for b in batches[e] for x in b) for e in ws}
    return {"runs_per_batch": n, "ort_ms": all_ms["ort"], "onyx_ms": all_ms["onyx"],
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "cpu_ratio": statistics.median(cpu_ratios), "ort_rss_mib": rss["ort"], "onyx_rss_mib": rss["onyx"],
            "max_rel_diff": diff}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def onyx_build():
    """Which onyx the workers import (the installed package, or PYTHONPATH's) and when its
    extension was built: the figures are that build's, whatever HEAD is."""
    import glob
    import onyx
    here = os.path.dirname(onyx.__file__)
    ext = sorted(glob.glob(os.path.join(here, "_onyx*.so")))
    built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(ext[0]))) if ext else "?"
    return f"the package at {here} (extension built {built})"


def write_report(path, rows, args, started, load_before, load_after, missing):
    import onnxruntime
    lines = []
    lines.append("# CPU speed: onyx against onnxruntime\n")
    lines.append("Written by `bench/cpu_vs_onnxruntime.py` (its docstring has the method); models exported by "
                 "`bench/cpu_suite_models.py` (torch.onnx, random weights) and `tools/gen_models.py`.\n")
    lines.append(f"- date: {started} UTC; commit {git('rev-parse', '--short', 'HEAD')}"
                 f"{' (with uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}")
    lines.append(f"- machine: {machine()}; load average {load_before} before, {load_after} after "
                 "(other work shares this machine: read the CPU-time ratio beside the wall-time one)")
    lines.append(f"- onnxruntime {onnxruntime.__version__} (CPUExecutionProvider, ORT_ENABLE_ALL); "
                 f"{args.reps} repetitions of interleaved batches per row")
    lines.append(f"- command: `.venv/bin/python bench/cpu_vs_onnxruntime.py {' '.join(sys.argv[1:])}`")
    lines.append(f"- onyx: {onyx_build()}")
    if missing:
        lines.append(f"- not in {args.suite} (so not measured): {', '.join(missing)}")
    lines.append("")
    lines.append("onyx/ort below 1 means onyx is faster. Ratio: median over repetitions of the ratio of "
                 "batch medians, with its range; CPU: the same for CPU time; RSS: peak resident memory of "
                 "each worker process; diff: largest output difference / largest onnxruntime output.\n")
    for t in args.threads:
        sub = [r for r in rows if r["threads"] == t]
        if not sub:
            continue
        lines.append(f"## {t} thread{'s' if t > 1 else ''}\n")
        lines.append("| model | ort ms | onyx ms | onyx/ort (range) | CPU onyx/ort | RSS ort / onyx MiB | diff |")
        lines.append("|---|---:|---:|---|---:|---:|---:|")
        for r in sub:
            lines.append(f"| {r['name']} | {r['ort_ms']:.2f} | {r['onyx_ms']:.2f} | **{r['ratio']:.2f}** "
                         f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['cpu_ratio']:.2f} | "
                         f"{r['ort_rss_mib']:.0f} / {r['onyx_rss_mib']:.0f} | {r['max_rel_diff']:.1e} |")
        g = geomean([r["ratio"] for r in sub])
        dec = [r["ratio"] for r in sub if r["kind"] == "decode"]
        worst = max(sub, key=lambda r: r["ratio"])
        lines.append("")
        lines.append(f"- geometric mean onyx/ort: **{g:.2f}** (goal <= 0.8: {'met' if g <= 0.8 else 'not met'}); "
                     f"CPU time {geomean([r['cpu_ratio'] for r in sub]):.2f}")
        lines.append(f"- largest: {worst['name']} {worst['ratio']:.2f} (goal <= 1.2: "
                     f"{'met' if worst['ratio'] <= 1.2 else 'not met'})")
        if dec:
            lines.append(f"- decode models: {', '.join(f'{d:.2f}' for d in dec)} (goal <= 0.7: "
                         f"{'met' if max(dec) <= 0.7 else 'not met'})")
        lines.append("")
    table = "\n".join(lines[1:]).strip() + "\n"
    begin, end = "<!-- table:begin (bench/cpu_vs_onnxruntime.py) -->", "<!-- table:end -->"
    text = lines[0] + "\n" + begin + "\n" + table + end + "\n"
    if os.path.exists(path):  # keep what is written around the table
        old = open(path).read()
        if begin in old and end in old:
            text = old[:old.index(begin)] + begin + "\n" + table + end + old[old.index(end) + len(end):]
    with open(path, "w") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--suite", default=os.path.join(ROOT, "build-bench", "cpu-suite"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="file stems to run (default: all found)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "cpu-speed.md"))
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker[0], a.worker[1], int(a.worker[2]))
    gen = os.path.join(a.suite, "gen")
    if not all(os.path.exists(os.path.join(gen, f"{n}.onnx")) for n in ("mlp", "mlp_large")):
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import gen_models
        gen_models.generate(gen, quiet=True)
        gen_models.generate_planner_set(gen, names=["mlp_large", "encoder24_large"], quiet=True)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows, missing = [], []
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for name, stem, kind in SUITE:
            if a.only and stem not in a.only:
                continue
            path = os.path.join(a.suite, f"{stem}.onnx")
            if not os.path.exists(path):
                missing.append(stem)
                continue
            for t in a.threads:
                r = compare(path, t, a.reps, tmp)
                r.update(name=name, stem=stem, kind=kind, threads=t)
                rows.append(r)
                print(f"{name:32s} {t}T  ort {r['ort_ms']:8.2f} ms  onyx {r['onyx_ms']:8.2f} ms  "
                      f"ratio {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})  cpu {r['cpu_ratio']:.2f}  "
                      f"diff {r['max_rel_diff']:.1e}", flush=True)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    write_report(a.out, rows, a, started, load_before, load_after, missing)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
