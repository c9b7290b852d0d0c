#!/usr/bin/env python3
"""Static memory-plan quality of onyx on the planner benchmark set.

Generates the six planner models (tools/gen_models.py --planner-set) into a
temporary directory (or uses/fills --models DIR), runs `onyx plan --json` for
each at the fixed input shapes in CASES, prints a markdown table and writes it
into docs/memory-planner.md (its own section; --no-write to skip).

Exits non-zero if any plan has R = arena / lower bound > 1.05, if an encoder24
arena exceeds a tenth of its no-reuse size, or if a plan fails.

Usage (from the repo root):
    .venv/bin/python bench/planner_report.py [--onyx build/onyx] [--models DIR] [--no-write]

The helpers here (find_onyx, machine_info, write_doc_section, ...) are shared
with bench/peak_memory_vs_ort.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC_PATH = REPO_ROOT / "docs" / "memory-planner.md"
DOC_TITLE = "# Memory planner benchmarks"

MAX_RATIO = 1.05            # arena may exceed the live-bytes lower bound by at most 5%
ENCODER_MIN_REUSE = 10.0    # encoder24 arena must be <= no_reuse / 10
PLAN_TIMEOUT_S = 300

DECODE = dict(batch=1, sequence=1, past_sequence=127, total_sequence=128)
PREFILL = dict(batch=1, sequence=128, past_sequence=0, total_sequence=128)

# (model, case label, symbolic dims). Fixed so runs are comparable over time:
# MLPs at batch 64, encoders at batch 1 x 128 tokens, decoders at one decode
# step after 127 cached tokens and at a 128-token prefill with an empty cache.
CASES = [
    ("mlp_small", "batch=64", dict(batch=64)),
    ("mlp_large", "batch=64", dict(batch=64)),
    ("encoder24_small", "batch=1, seq=128", dict(batch=1, sequence=128)),
    ("encoder24_large", "batch=1, seq=128", dict(batch=1, sequence=128)),
    ("decoder_small", "decode: batch=1, seq=1, past=127", DECODE),
    ("decoder_small", "prefill: batch=1, seq=128, past=0", PREFILL),
    ("decoder_large", "decode: batch=1, seq=1, past=127", DECODE),
    ("decoder_large", "prefill: batch=1, seq=128, past=0", PREFILL),
]


# ---------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------
class BenchError(Exception):
    """A problem that should end the script with a clear one-line message."""


def find_onyx(path: str | None) -> Path:
    """The onyx CLI: --onyx, else $ONYX_BIN, else build/onyx under the repo root."""
    p = Path(path or os.environ.get("ONYX_BIN", "build/onyx"))
    if not p.is_absolute():
        p = REPO_ROOT / p
    if not p.is_file() or not os.access(p, os.X_OK):
        raise BenchError(f"onyx CLI not found (or not executable) at {p}; build it first "
                         "(ninja -C build onyx_cli) or pass --onyx / set ONYX_BIN")
    return p


def gen_models():
    """tools/gen_models.py as a module (it is not a package)."""
    tools = str(REPO_ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import gen_models as gm
    return gm


def planner_models(models_dir: Path, names) -> dict:
    """{name: path}; missing models are generated into models_dir."""
    gm = gen_models()
    models_dir.mkdir(parents=True, exist_ok=True)
    missing = [n for n in names if not (models_dir / f"{n}.onnx").is_file()]
    if missing:
        print(f"generating {', '.join(missing)} into {models_dir}", file=sys.stderr)
        gm.generate_planner_set(str(models_dir), missing, quiet=True)
    return {n: models_dir / f"{n}.onnx" for n in names}


def git_commit() -> str:
    """Short HEAD, marked when tracked files differ from it (the docs file aside)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".",
                            f":!{DOC_PATH.relative_to(REPO_ROOT)}"], cwd=REPO_ROOT).returncode
    return head + (" + uncommitted changes" if dirty else "")


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    # nproc semantics: the CPUs this process may run on, not the host's count.
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{cpu}, nproc {ncpu}{mem}, {platform.system()} {platform.release()}"


def provenance() -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"- date: {date}\n- commit: `{git_commit()}`\n- machine: {machine_info()}\n"
            f"- python: {platform.python_version()}")


def write_doc_section(key: str, body: str, path: Path = DOC_PATH) -> None:
    """Replace this script's section of the doc (between markers), or append it.

    Each bench script owns one marked section, so either can be rerun alone
    without clobbering the other's results.
    """
    begin, end = f"<!-- BEGIN {key} (generated) -->", f"<!-- END {key} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.is_file() else (
        f"{DOC_TITLE}\n\nGenerated by `bench/planner_report.py` and "
        "`bench/peak_memory_vs_ort.py`; each script rewrites only its own section.\n")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def md_table(header, rows, align=None) -> str:
    """align: one 'l' or 'r' per column (default: first two left, the rest right)."""
    align = align or "ll" + "r" * (len(header) - 2)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


# ---------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------
def run_plan(onyx: Path, model: Path, dims: dict, n_values=10) -> dict:
    cmd = [str(onyx), "plan", str(model), "--json", "--values", str(n_values)]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S)
    if r.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` failed (exit {r.returncode}): "
                         f"{r.stderr.strip() or r.stdout.strip()}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise BenchError(f"`{' '.join(cmd)}` printed no valid JSON ({e})") from e


def offenders(plan: dict) -> str:
    """What was live around the peak, for diagnosing a poor R."""
    lines = [f"    most live at step {plan.get('peak_step')}: {plan.get('peak_node', '')}"]
    for v in plan.get("largest_values", []):
        lines.append(f"    {v['name']}  {v['type']}  {fmt_bytes(v['bytes'])}  {v['kind']}"
                     f" @{v.get('offset', '-')}  steps {v['first']}..{v['last']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onyx", help="onyx CLI (default: $ONYX_BIN or build/onyx)")
    ap.add_argument("--models", help="directory with the planner models (missing ones are "
                                     "generated there; default: a temporary directory)")
    ap.add_argument("--no-write", action="store_true", help=f"do not update {DOC_PATH.name}")
    args = ap.parse_args(argv)

    try:
        onyx = find_onyx(args.onyx)
        names = list(dict.fromkeys(m for m, _, _ in CASES))
        with tempfile.TemporaryDirectory(prefix="onyx-planner-") as tmp:
            models = planner_models(Path(args.models or tmp), names)
            plans = [(m, label, dims, run_plan(onyx, models[m], dims)) for m, label, dims in CASES]
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    rows, failures = [], []
    for model, label, dims, p in plans:
        arena, lb, nr = p["arena_bytes"], p["lower_bound_bytes"], p["no_reuse_bytes"]
        ratio = p["ratio"]
        bounds = p.get("dynamic_boundaries", [])
        reuse = nr / arena if arena else float("inf")
        rows.append([model, label, p["steps"], f"{arena:,}", f"{lb:,}", f"{ratio:.4f}", f"{nr:,}",
                     f"{reuse:.1f}x" if arena else "-",
                     len(bounds) if not bounds else
                     f"{len(bounds)}: " + "; ".join(f"step {b['step']} {b['node']}" for b in bounds)])
        if ratio > MAX_RATIO:
            failures.append(f"{model} ({label}): R = {ratio:.4f} > {MAX_RATIO}\n{offenders(p)}")
        if model.startswith("encoder24") and arena > nr / ENCODER_MIN_REUSE:
            failures.append(f"{model} ({label}): arena {arena:,} B > no-reuse/{ENCODER_MIN_REUSE:g} "
                            f"= {nr / ENCODER_MIN_REUSE:,.0f} B\n{offenders(p)}")

    header = ["model", "input shapes", "steps", "arena bytes", "lower bound bytes", "R",
              "no-reuse bytes", "no-reuse / arena", "dynamic boundaries"]
    table = md_table(header, rows, "llrrrrrrl")
    print(table)

    if not args.no_write:
        body = f"""## Static memory plans (`bench/planner_report.py`)

Method: the six planner models are generated by `tools/gen_models.py --planner-set`
(MLP 4 layers x 256 and 8 layers x 512; 24-layer BERT-style encoder with hidden
64 / 4 heads and hidden 256 / 8 heads; Llama-style decoder with past/present KV,
2 layers hidden 64 and 4 layers hidden 256). For each, `onyx plan MODEL --json
--dim NAME=N ...` is run at the shapes below; nothing is executed.

- steps: ops in the execution schedule (including those computed while planning).
- arena bytes: size of the one arena every planned intermediate lives in.
- lower bound bytes: bytes of arena values live at the busiest step; no placement can use less.
- R = arena / lower bound (1.0 is optimal); the script fails if R > {MAX_RATIO}.
- no-reuse bytes: every arena buffer in its own allocation (aligned), i.e. no reuse at all;
  the script fails if an encoder24 arena exceeds no-reuse / {ENCODER_MIN_REUSE:g}.
- dynamic boundaries: ops whose output shapes are only known at run time (values after them
  are allocated dynamically, outside the arena).

Graph inputs, initializers and graph outputs are not in the arena, so e.g. decoder
logits and present KV tensors do not count here.

{provenance()}
- command: `.venv/bin/python bench/planner_report.py`

{table}
"""
        if failures:
            body += "\nFailed checks:\n\n```\n" + "\n".join(failures) + "\n```\n"
        write_doc_section("planner_report", body)
        print(f"\nwrote {DOC_PATH.relative_to(REPO_ROOT)}")

    if failures:
        print("\nFAILED checks:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
