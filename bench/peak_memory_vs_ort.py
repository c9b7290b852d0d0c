#!/usr/bin/env python3
"""Whole-process peak memory (max RSS) of onyx vs onnxruntime on the same inputs.

For encoder24_large (batch 1 x 128 tokens) and decoder_large (128-token prefill,
empty KV cache) the inputs are written once as .npy files; then, in this one
run of the script, each of these is started as its own process and its peak
RSS is taken (median of --repeat runs, default 3):

  onyx run MODEL --input ...          planned (default), --memory release, --memory keep
  onyx info MODEL                     load + inspect only, nothing run
  python: onnxruntime, CPUExecutionProvider, default SessionOptions, one run
  python: the same with the CPU arena and memory patterns off
  python: onnxruntime session created, nothing run
  baselines: onyx and python+onnxruntime running a one-op model, to show
  each runtime's model-independent overhead (interpreter, libraries)

A table (also ratios onyx / onnxruntime) is printed and written into
docs/memory-planner.md (its own section; --no-write to skip).

Usage (from the repo root):
    .venv/bin/python bench/peak_memory_vs_ort.py [--onyx build/onyx] [--models DIR]
                                                 [--repeat 3] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from planner_report import (DOC_PATH, REPO_ROOT, BenchError, find_onyx, gen_models,
                            md_table, planner_models, provenance, write_doc_section)

CHILD_TIMEOUT_S = 600

# (model, label, symbolic dims for its inputs)
CASES = [
    ("encoder24_large", "batch=1, seq=128",
     dict(batch=1, sequence=128)),
    ("decoder_large", "prefill: batch=1, seq=128, past=0",
     dict(batch=1, sequence=128, past_sequence=0, total_sequence=128)),
]

# Runs inside a fresh interpreter so that its RSS is onnxruntime's alone.
# argv: MODEL run|load default|noarena [NAME=FILE.npy ...]
ORT_CHILD = r"""
import sys
import numpy as np
import onnxruntime as ort
model, what, opts = sys.argv[1:4]
so = ort.SessionOptions()
if opts == "noarena":
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
if what == "run":
    feeds = {}
    for spec in sys.argv[4:]:
        name, path = spec.split("=", 1)
        feeds[name] = np.load(path)
    sess.run(None, feeds)
"""

# Same idea without GNU time: a small launcher does the wait4, because a child's
# ru_maxrss includes the RSS of the process it was spawned from (Linux counts
# the pre-exec address space), and this script's own interpreter is large.
WAIT4_CHILD = r"""
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\nmaxrss_kb={usage.ru_maxrss}\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


class Meter:
    """Peak RSS of one child process, in KiB.

    Prefers GNU /usr/bin/time (its fork is tiny, so the reading is the target's
    own); otherwise a python -S launcher with os.wait4, whose floor is a few MiB.
    """

    def __init__(self):
        time_bin = shutil.which("time", path="/usr/bin:/bin") or ""
        self.gnu_time = bool(time_bin) and subprocess.run(
            [time_bin, "-f", "%M", "true"], capture_output=True).returncode == 0
        self.time_bin = time_bin
        self.method = ("GNU `/usr/bin/time -f %M` (ru_maxrss of the child)" if self.gnu_time
                       else "os.wait4 in a `python -S` launcher (ru_maxrss of the child)")

    def run(self, cmd) -> tuple[int, str]:
        """(maxrss KiB, child stdout+stderr); raises BenchError if the child fails."""
        cmd = [str(c) for c in cmd]
        cmd[0] = shutil.which(cmd[0]) or cmd[0]
        with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
            if self.gnu_time:
                wrapped = [self.time_bin, "-f", "%M", "-o", rss.name, *cmd]
            else:
                wrapped = [sys.executable, "-S", "-c", WAIT4_CHILD, *cmd]
            r = subprocess.run(wrapped, capture_output=True, text=True, errors="replace",
                               timeout=CHILD_TIMEOUT_S, cwd=REPO_ROOT)
            out = r.stdout + r.stderr
            if r.returncode != 0:
                raise BenchError(f"`{' '.join(cmd)}` failed (exit {r.returncode}):\n{out[-2000:]}")
            if self.gnu_time:
                text = rss.read().strip().splitlines()
                kb = int(text[-1]) if text else -1
            else:
                m = re.findall(r"maxrss_kb=(\d+)", out)
                kb = int(m[-1]) if m else -1
        if kb < 0:
            raise BenchError(f"no peak RSS reading for `{' '.join(cmd)}`")
        return kb, out


def write_inputs(gm, model_path: Path, dims: dict, out_dir: Path) -> list[str]:
    """NAME=FILE.npy specs for the model's inputs (fixed seed, masks all ones)."""
    import numpy as np
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    feeds = gm.sample_inputs(model, np.random.default_rng(0), dims)
    specs = []
    for name, arr in feeds.items():
        path = out_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy")
        np.save(path, arr)
        specs.append(f"{name}={path}")
    return specs


def write_trivial_model(tmp: Path) -> tuple[Path, str]:
    """One Relu on a 1-element tensor: what each runtime costs with no model to speak of.

    Returns (model path, NAME=FILE.npy spec of its input).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "trivial",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    path, x = tmp / "trivial.onnx", tmp / "trivial_x.npy"
    onnx.save_model(m, str(path))
    np.save(x, np.ones([1], np.float32))
    return path, f"x={x}"


def onyx_peak_intermediates(out: str) -> str:
    m = re.search(r"peak intermediate memory: ([^(]+)\(", out)
    return m.group(1).strip() if m else ""


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onyx", help="onyx CLI (default: $ONYX_BIN or build/onyx)")
    ap.add_argument("--models", help="directory with the planner models (missing ones are "
                                     "generated there; default: a temporary directory)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median taken)")
    ap.add_argument("--no-write", action="store_true", help=f"do not update {DOC_PATH.name}")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    py = sys.executable
    meter = Meter()
    results = {}   # key -> (median KiB, [KiB...], onyx-reported intermediates)

    def measure(key, cmd):
        kbs, note = [], ""
        for _ in range(args.repeat):
            kb, out = meter.run(cmd)
            kbs.append(kb)
            note = onyx_peak_intermediates(out) or note
        results[key] = (statistics.median(kbs), kbs, note)
        print(f"  {key[0]:<16} {key[1]:<34} {mib(results[key][0]):>8} MiB  "
              f"(runs: {', '.join(mib(k) for k in kbs)})", file=sys.stderr)

    try:
        onyx = find_onyx(args.onyx)
        gm = gen_models()
        import onnxruntime  # noqa: F401  (fail here, not in a child, if it is missing)
        with tempfile.TemporaryDirectory(prefix="onyx-peakmem-") as tmp:
            tmp = Path(tmp)
            models = planner_models(Path(args.models) if args.models else tmp / "models",
                                    [m for m, _, _ in CASES])
            models_bytes = {m: p.stat().st_size for m, p in models.items()}
            trivial, trivial_in = write_trivial_model(tmp)

            print(f"measuring with {meter.method}, median of {args.repeat}", file=sys.stderr)
            measure(("baseline", "measurement floor (/bin/true)"), ["true"])
            measure(("baseline", "onyx run, one-op model"),
                    [onyx, "run", trivial, "--input", trivial_in])
            measure(("baseline", "python + onnxruntime, one-op model"),
                    [py, "-c", ORT_CHILD, trivial, "run", "default", trivial_in])

            for model, _, dims in CASES:
                in_dir = tmp / f"inputs_{model}"
                in_dir.mkdir()
                specs = write_inputs(gm, models[model], dims, in_dir)
                onyx_in = [a for s in specs for a in ("--input", s)]
                path = models[model]
                for mode in ("planned", "release", "keep"):
                    measure((model, f"onyx run --memory {mode}"),
                            [onyx, "run", path, *onyx_in, "--memory", mode])
                measure((model, "onyx info (load only)"), [onyx, "info", path])
                measure((model, "ort run, default options"),
                        [py, "-c", ORT_CHILD, path, "run", "default", *specs])
                measure((model, "ort run, arena + mem pattern off"),
                        [py, "-c", ORT_CHILD, path, "run", "noarena", *specs])
                measure((model, "ort load only (default options)"),
                        [py, "-c", ORT_CHILD, path, "load", "default"])
    except (BenchError, subprocess.TimeoutExpired, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    base_onyx = results[("baseline", "onyx run, one-op model")][0]
    base_ort = results[("baseline", "python + onnxruntime, one-op model")][0]

    def baseline_of(what):
        return base_onyx if what.startswith("onyx") else base_ort

    rows = []
    for (model, what), (med, kbs, note) in results.items():
        label = next((f"{m} ({lab})" for m, lab, _ in CASES if m == model), "-")
        runs = ", ".join(mib(k) for k in kbs)
        if model == "baseline":
            rows.append([what, "", mib(med), runs, "", "", "", ""])
            continue
        ort_ref = results[(model, "ort run, default options")][0]
        above = med - baseline_of(what)
        ort_above = ort_ref - base_ort
        rows.append([label, what, mib(med), runs, mib(above),
                     f"{med / ort_ref:.2f}",
                     f"{above / ort_above:.2f}" if ort_above > 0 else "-",
                     note])

    header = ["model (inputs)", "runtime, mode", "peak RSS MiB (median)", "runs MiB",
              "above own baseline MiB", "/ ort default", "/ ort default, above baselines",
              "onyx-reported peak intermediates"]
    table = md_table(header, rows, "llrrrrrl")
    print(table)

    # Where each onyx peak comes from: if the load-only peak matches the run's,
    # loading (not the plan) sets the process peak.
    notes = []
    for model, _, _ in CASES:
        run_kb = results[(model, "onyx run --memory planned")][0]
        load_kb = results[(model, "onyx info (load only)")][0]
        ort_run = results[(model, "ort run, default options")][0]
        ort_load = results[(model, "ort load only (default options)")][0]
        weights = models_bytes[model] / 2**20
        notes.append(f"- {model}: model file {weights:.1f} MiB. onyx: load-only peak {mib(load_kb)} MiB, "
                     f"planned run {mib(run_kb)} MiB (run adds {mib(run_kb - load_kb)}); "
                     f"ort: session {mib(ort_load)} MiB, run {mib(ort_run)} MiB "
                     f"(run adds {mib(ort_run - ort_load)}).")
    notes = "\n".join(notes)
    print("\n" + notes)

    if not args.no_write:
        ort_version = subprocess.run([py, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                                     capture_output=True, text=True).stdout.strip()
        body = f"""## Whole-process peak memory: onyx vs onnxruntime (`bench/peak_memory_vs_ort.py`)

Method: the models come from `tools/gen_models.py --planner-set` (float32 weights:
encoder24_large 52 MB file, decoder_large 14 MB); inputs are written once as .npy
files (random ids from a fixed seed, all-ones attention masks, decoder prefill with
an empty past: KV inputs of shape [1, 4, 0, 32]). Every measurement is a separate
process started by the same run of the script; its peak RSS (ru_maxrss) is taken
with {meter.method} and the median of {args.repeat} runs is reported.

- onyx rows: `onyx run MODEL --input NAME=FILE.npy ... --memory MODE` (one run, no
  repeats); `onyx info MODEL` loads and inspects the model without running it.
- ort rows: a `python -c` child that imports numpy and onnxruntime {ort_version}, creates an
  `InferenceSession` (CPUExecutionProvider, default SessionOptions, or with
  `enable_cpu_mem_arena` and `enable_mem_pattern` off), loads the same .npy files and
  calls `run` once; "load only" creates the session and exits.
- baselines: each runtime running a one-op model (Relu on one float), i.e. the
  executable / interpreter and libraries. "above own baseline" subtracts it, so the
  last ratio compares what each runtime spends on the model itself.
- "/ ort default": peak RSS over that of the ort default-options run of the same model.
- thread pools are left at their defaults in both runtimes.

{provenance()}
- command: `.venv/bin/python bench/peak_memory_vs_ort.py`

{table}

{notes}
"""
        write_doc_section("peak_memory_vs_ort", body)
        print(f"\nwrote {DOC_PATH.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
