#!/usr/bin/env python3
"""CPU text generation, onyx against onnxruntime-genai (og): same folder, same prompt, one thread.

For one random prompt (seeded, printed; BOS first, then ids drawn from the vocabulary less the
special tokens) both engines generate greedily, batch 1, --new-tokens tokens, alternately
(og, onyx, onyx, og, ... : --reps of each, the order flipped every rep so drift does not favour
one), after one untimed warm-up of each:

  og    onnxruntime_genai in this process, CPU provider, the decoder's session_options with
        intra_op_num_threads = --threads (default 1), inter_op_num_threads = 1 (in a copy of
        genai_config.json, in a folder whose other files are symlinks to FOLDER's). Timed with perf_counter:
          prefill = append_tokens(prompt) + the first generate_next_token (which only picks the
                    token from the prompt's logits): time to the first token;
          decode  = the remaining new_tokens - 1 generate_next_token calls (one decoder run each).
        The model is loaded once (its load time is reported apart).
  onyx  `onyx generate FOLDER --prompt-ids ... --max-new-tokens N --json --device cpu`, a fresh
        process each rep. Its JSON stats: prefill_ms (starting the sequence: the prompt's run and
        the first token), decode_ms over decode_steps (= new tokens - 1) steps; and the process'
        wall time (load, prefill, decode, exit) and CPU time from wait4.
        onyx's own CPU kernels are single-threaded (it has no thread pool), but its fp32 MatMul and
        Gemm call OpenBLAS, whose pthread build starts one thread per core: onyx runs with
        OPENBLAS_NUM_THREADS = --threads, so that both engines use the same number of threads
        (check the CPU time / wall ratios in the report). --onyx-env adds environment, e.g.
        OPENBLAS_CORETYPE=SkylakeX where OpenBLAS does not know the CPU and falls back to its
        SSE3 (Prescott) kernels (OPENBLAS_VERBOSE=2 prints the core it picked).

Both are greedy over the same logits' argmax: in fp32 they should produce the same tokens; the
check reports the first difference if not. For an int4 folder made with the builder's CPU default
(accuracy_level 4, og quantizes MatMulNBits' activations to int8) onyx computes at full accuracy,
so agreement is reported, not required. The exit status is 0 unless a run fails.

Prints a markdown report: median (and min-max) over reps of prefill tokens/s, decode ms/token and
tokens/s for og and onyx and the ratio onyx/og, the method, machine, versions and date.

  .venv/bin/python bench/genai_cpu.py FOLDER [--prompt-tokens 128] [--new-tokens 128] [--reps 5]
                                             [--onyx /work/main/build-cpu/onyx] [--threads 1]
                                             [--onyx-env KEY=VALUE] [--seed 0] [--json FILE]

The report names the onyx binary by sha256 and mtime, and the commit of its git checkout, at the
start and (if either changed) at the end of the run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner_report import machine_info, md_table  # noqa: E402

DEFAULT_ONYX = "/work/main/build-cpu/onyx"
ONYX_TIMEOUT_S = 900


# ---------------------------------------------------------------------------------------------
# og

def og_folder(folder: Path, tmp: Path, threads: int) -> Path:
    """FOLDER's files as symlinks, but genai_config.json copied with intra_op_num_threads = threads
    and inter_op_num_threads = 1 in the decoder's session_options."""
    cfg = json.loads((folder / "genai_config.json").read_text())
    so = cfg["model"]["decoder"].setdefault("session_options", {})
    so["intra_op_num_threads"] = threads
    so["inter_op_num_threads"] = 1
    out = tmp / "og"
    out.mkdir()
    for f in folder.iterdir():
        if f.name != "genai_config.json":
            (out / f.name).symlink_to(f.resolve())
    (out / "genai_config.json").write_text(json.dumps(cfg, indent=4))
    return out


class OgRunner:
    def __init__(self, folder: Path):
        import onnxruntime_genai as og
        self.og = og
        t0 = time.perf_counter()
        cfg = og.Config(str(folder))
        cfg.clear_providers()  # the CPU
        self.model = og.Model(cfg)
        self.load_s = time.perf_counter() - t0

    def generate(self, prompt, new_tokens):
        import numpy as np
        og = self.og
        params = og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + new_tokens)
        gen = og.Generator(self.model, params)
        ids = np.asarray(prompt, dtype=np.int32)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        gen.append_tokens(ids)
        gen.generate_next_token()
        t1 = time.perf_counter()
        tokens = [int(gen.get_next_tokens()[0])]
        steps = []
        while not gen.is_done():
            s = time.perf_counter()
            gen.generate_next_token()
            steps.append(time.perf_counter() - s)
            tokens.append(int(gen.get_next_tokens()[0]))
        t2 = time.perf_counter()
        cpu = time.process_time() - cpu0
        return {"prefill_s": t1 - t0, "decode_s": sum(steps), "decode_steps": len(steps),
                "step_s": steps, "wall_s": t2 - t0, "cpu_s": cpu, "tokens": tokens}


# ---------------------------------------------------------------------------------------------
# onyx

def onyx_generate(onyx: Path, folder: Path, prompt, new_tokens, threads: int, extra_env=None):
    cmd = [str(onyx), "generate", str(folder), "--prompt-ids", " ".join(map(str, prompt)),
           "--max-new-tokens", str(new_tokens), "--json", "--device", "cpu"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err,
                             env=dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), **(extra_env or {})))
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        raise RuntimeError(f"onyx exited {p.returncode}: {' '.join(cmd[:3])} ...\n{stderr[-4000:]}")
    d = json.loads(stdout)
    st = d["stats"]
    return {"prefill_s": st["prefill_ms"] / 1e3, "decode_s": st["decode_ms"] / 1e3,
            "decode_steps": st["decode_steps"], "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "max_rss_kb": ru.ru_maxrss, "tokens": [int(t) for t in d["generated_ids"]],
            "stop_reason": d.get("stop_reason"), "stats": st}


# ---------------------------------------------------------------------------------------------

def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def make_prompt(cfg: dict, n: int, seed: int):
    m = cfg["model"]
    special = {m.get("bos_token_id"), m.get("pad_token_id")}
    eos = m.get("eos_token_id")
    special |= set(eos) if isinstance(eos, list) else {eos}
    pool = [i for i in range(m["vocab_size"]) if i not in special]
    rng = random.Random(seed)
    bos = m.get("bos_token_id")
    head = [bos] if bos is not None else []
    return head + [rng.choice(pool) for _ in range(n - len(head))]


def med(xs):
    return statistics.median(xs)


def spread(xs, fmt):
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def loadavg():
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def onyx_commit(onyx: Path) -> str:
    repo = onyx.resolve().parent
    try:
        top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        head = subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        return f"{head} (git -C {top} rev-parse --short HEAD)"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def binary_id(path: Path) -> str:
    import hashlib
    h = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    return f"sha256 {h}, mtime {mtime:%Y-%m-%d %H:%M:%S UTC}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the prompt ids")
    ap.add_argument("--onyx", type=Path, default=Path(os.environ.get("ONYX_BIN", DEFAULT_ONYX)))
    ap.add_argument("--threads", type=int, default=1,
                    help="og: intra_op_num_threads (inter_op stays 1); onyx: OPENBLAS_NUM_THREADS")
    ap.add_argument("--onyx-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for onyx (repeatable), e.g. OPENBLAS_CORETYPE=SkylakeX")
    ap.add_argument("--json", type=Path, help="also write every rep's figures here")
    args = ap.parse_args(argv)
    folder = args.folder.resolve()
    if not (folder / "genai_config.json").is_file():
        sys.exit(f"genai_cpu: {folder} has no genai_config.json")
    if not os.access(args.onyx, os.X_OK):
        sys.exit(f"genai_cpu: no onyx binary at {args.onyx}")
    onyx_env = {}
    for kv in args.onyx_env:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"--onyx-env {kv}: expected KEY=VALUE")
        onyx_env[k] = v
    import onnxruntime
    import onnxruntime_genai

    cfg = json.loads((folder / "genai_config.json").read_text())
    prompt = make_prompt(cfg, args.prompt_tokens, args.seed)
    N = args.new_tokens
    started = datetime.datetime.now(datetime.timezone.utc)
    onyx_before, commit_before = binary_id(args.onyx), onyx_commit(args.onyx)
    load_before = loadavg()
    print(f"genai_cpu: {folder}", flush=True)
    print(f"genai_cpu: prompt ({len(prompt)} ids, seed {args.seed}): {' '.join(map(str, prompt))}", flush=True)

    runs = {"og": [], "onyx": []}
    with tempfile.TemporaryDirectory(prefix="genai-cpu-") as tmp:
        og_runner = OgRunner(og_folder(folder, Path(tmp), args.threads))
        print(f"genai_cpu: og model loaded in {og_runner.load_s:.2f} s", flush=True)
        engines = {"og": lambda n: og_runner.generate(prompt, n),
                   "onyx": lambda n: onyx_generate(args.onyx, folder, prompt, n, args.threads, onyx_env)}
        warm_n = min(N, 4)
        for name in ("og", "onyx"):
            engines[name](warm_n)
        print(f"genai_cpu: warm-up done ({warm_n} new tokens each)", flush=True)
        for rep in range(args.reps):
            order = ("og", "onyx") if rep % 2 == 0 else ("onyx", "og")
            for name in order:
                r = engines[name](N)
                runs[name].append(r)
                print(f"genai_cpu: rep {rep + 1}/{args.reps} {name:4s}: prefill {r['prefill_s'] * 1e3:8.1f} ms, "
                      f"decode {1e3 * r['decode_s'] / max(r['decode_steps'], 1):7.2f} ms/token "
                      f"({r['decode_steps']} steps), wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s, "
                      f"{len(r['tokens'])} tokens", flush=True)
    load_after = loadavg()
    onyx_after, commit_after = binary_id(args.onyx), onyx_commit(args.onyx)

    # Agreement: every rep of an engine must give the same tokens; then og against onyx.
    notes = []
    for name, rs in runs.items():
        for i, r in enumerate(rs[1:], 2):
            if r["tokens"] != rs[0]["tokens"]:
                notes.append(f"{name}: rep {i} generated other tokens than rep 1 "
                             f"(first difference at {first_difference(r['tokens'], rs[0]['tokens'])})")
    a, b = runs["og"][0]["tokens"], runs["onyx"][0]["tokens"]
    diff = first_difference(a, b)
    if diff is None:
        agreement = f"same tokens: og and onyx generated the same {len(a)} tokens"
    else:
        agreement = (f"tokens DIFFER: first difference at generated token {diff} "
                     f"(og {a[diff] if diff < len(a) else 'ended'}, onyx {b[diff] if diff < len(b) else 'ended'}); "
                     f"equal prefix {diff} of {len(a)} (og) / {len(b)} (onyx) tokens")

    def fig(name):
        rs = runs[name]
        P = len(prompt)
        return {
            "prefill_tps": [P / r["prefill_s"] for r in rs],
            "prefill_ms": [1e3 * r["prefill_s"] for r in rs],
            "decode_ms": [1e3 * r["decode_s"] / r["decode_steps"] for r in rs if r["decode_steps"]],
            "decode_tps": [r["decode_steps"] / r["decode_s"] for r in rs if r["decode_steps"]],
            "wall_s": [r["wall_s"] for r in rs],
            "cpu_over_wall": [r["cpu_s"] / r["wall_s"] for r in rs],
        }
    f_og, f_ox = fig("og"), fig("onyx")
    rows = []
    for label, key, fmt, better in [
            ("prefill, tokens/s", "prefill_tps", "{:.1f}", "higher"),
            ("prefill, ms (time to first token)", "prefill_ms", "{:.1f}", "lower"),
            ("decode, ms/token", "decode_ms", "{:.2f}", "lower"),
            ("decode, tokens/s", "decode_tps", "{:.2f}", "higher")]:
        if not f_og[key] or not f_ox[key]:
            continue
        rows.append([label, spread(f_og[key], fmt), spread(f_ox[key], fmt),
                     f"{med(f_ox[key]) / med(f_og[key]):.2f}", better])
    P = len(prompt)
    og_total = [r["wall_s"] for r in runs["og"]]
    wfmt = "{:.2f}" if med(f_ox["wall_s"]) >= 1 else "{:.3f}"
    rows.append(["whole run, s", f"{wfmt.format(med(og_total))} + load {wfmt.format(og_runner.load_s)}",
                 spread(f_ox["wall_s"], wfmt),
                 f"{med(f_ox['wall_s']) / (med(og_total) + og_runner.load_s):.2f}", "lower"])
    table = md_table(["", "og", "onyx", "onyx / og", "better"], rows, align="lrrrl")

    ox0 = runs["onyx"][0]
    eos = cfg["model"].get("eos_token_id")
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    og_stop = "eos" if a and a[-1] in eos_ids else ("max_length" if len(a) == N else f"{len(a)} tokens")
    onyx_overhead = [r["wall_s"] - r["prefill_s"] - r["decode_s"] for r in runs["onyx"]]
    lines = [
        f"### {folder.name}: {P}-token prompt, {N} new tokens, {args.reps} reps, {args.threads} thread"
        + ("s" if args.threads != 1 else "") + "".join(f", onyx with {k}={v}" for k, v in onyx_env.items()),
        "",
        table,
        "",
        "Median (min–max) over reps. onyx / og: the ratio of medians (for tokens/s above 1 means onyx is "
        "faster; for ms above 1 means onyx is slower). Whole run: og = the median generation (prefill + "
        "decode, in this process) plus its one model load; onyx = the median wall time of the whole "
        f"`onyx generate` process (load, prefill, decode, exit; {spread(onyx_overhead, '{:.3f}')} s of it "
        "outside prefill and decode).",
        "",
        f"- agreement: {agreement}; og stop: {og_stop}, onyx stop: {ox0['stop_reason']}",
        *[f"- note: {n}" for n in notes],
        f"- og: CPU time / wall time during generation {spread(f_og['cpu_over_wall'], '{:.2f}')}; "
        f"onyx: process CPU time / wall {spread(f_ox['cpu_over_wall'], '{:.2f}')}; "
        f"onyx max RSS {med([r['max_rss_kb'] for r in runs['onyx']]) / 1024:.0f} MiB; "
        f"onyx kv_cache {ox0['stats'].get('kv_cache')}, {ox0['stats'].get('kv_cache_bytes')} bytes",
        f"- prompt (seed {args.seed}): `{' '.join(map(str, prompt))}`",
        f"- og generated: `{' '.join(map(str, a))}`",
        *([f"- onyx generated: `{' '.join(map(str, b))}`"] if diff is not None else []),
        f"- folder: `{folder}` ({sum(f.stat().st_size for f in folder.iterdir()) / 1e6:.0f} MB)",
        f"- method: greedy, batch 1, interleaved (og, onyx, then onyx, og, ...), one untimed warm-up each; "
        f"og: onnxruntime-genai in-process, CPU provider, intra_op_num_threads={args.threads}, inter_op_num_threads=1, "
        "prefill = append_tokens + first generate_next_token, decode = each further generate_next_token; "
        "onyx: a fresh `onyx generate --json --device cpu` process per rep, its prefill_ms / decode_ms / "
        f"decode_steps, run with OPENBLAS_NUM_THREADS={args.threads}"
        + "".join(f" {k}={v}" for k, v in onyx_env.items()) + " (onyx's own CPU kernels are single-threaded; "
        "its fp32 MatMul/Gemm call OpenBLAS, which otherwise starts a thread per core)",
        f"- machine: {machine_info()}; load average {load_before} before, {load_after} after",
        f"- onyx: `{args.onyx}`, {onyx_before}; commit {commit_before} at the start"
        + ("" if (onyx_after, commit_after) == (onyx_before, commit_before) else
           f"; CHANGED during the run, at the end: {onyx_after}, commit {commit_after}"),
        f"- og: onnxruntime-genai {onnxruntime_genai.__version__}, onnxruntime {onnxruntime.__version__}; "
        f"python {sys.version.split()[0]}",
        f"- date: {started:%Y-%m-%d %H:%M UTC}",
    ]
    print()
    print("\n".join(lines), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        for rs in runs.values():
            for r in rs:
                r.pop("step_s", None)
        args.json.write_text(json.dumps({"folder": str(folder), "prompt": prompt, "new_tokens": N,
                                         "og_load_s": og_runner.load_s, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
