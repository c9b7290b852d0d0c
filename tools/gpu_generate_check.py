#!/usr/bin/env python3
"""Generation on cuda:0 against the CPU, for the GPU suite (scripts/gpu_run.sh).

For every genai fixture folder under DIR (tests/fixtures/genai, staged), runs `onyx generate`
greedily on a few of the prompts its reference.json holds, and on its three-prompt batch, on
the CPU, on cuda:0 with captured decode steps (--capture require) and on cuda:0 eagerly
(--capture off); the token ids must be equal, and a captured run must replay every decode step
but those that capture (the first at each batch size). Prints one line per run and exits 1 on any difference.

  gpu_generate_check.py ONYX_BIN DIR [--new-tokens N]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def generate(onyx, folder, prompt_args, device, capture, new_tokens):
    cmd = [onyx, "generate", str(folder), *prompt_args, "--max-new-tokens", str(new_tokens), "--json",
           "--device", device]
    if device != "cpu":
        cmd += ["--capture", capture]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


def tokens(result):
    seqs = result["sequences"] if "sequences" in result else [result]
    return [s["generated_ids"] for s in seqs]


def stats(result):
    return result.get("stats", {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("onyx")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--new-tokens", type=int, default=40)
    args = ap.parse_args()
    failures = 0
    tmp = Path(tempfile.mkdtemp())
    for folder in sorted(d for d in args.dir.iterdir() if (d / "reference.json").is_file()):
        ref = json.loads((folder / "reference.json").read_text())
        cases = [c for c in ref["cases"] if c["prompt_ids"]][:3]
        runs = [(c["name"], ["--prompt-ids", " ".join(map(str, c["prompt_ids"]))]) for c in cases]
        batch = tmp / f"{folder.name}.jsonl"
        batch.write_text("".join(json.dumps({"prompt_ids": r["prompt_ids"]}) + "\n"
                                 for r in ref["batch"]["og"]["sequences"]))
        runs.append(("batch of 3", ["--prompts-file", str(batch)]))
        for name, prompt in runs:
            try:
                cpu = generate(args.onyx, folder, prompt, "cpu", "off", args.new_tokens)
                cap = generate(args.onyx, folder, prompt, "cuda:0", "require", args.new_tokens)
                eager = generate(args.onyx, folder, prompt, "cuda:0", "off", args.new_tokens)
            except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
                print(f"FAIL {folder.name} / {name}: {e}")
                failures += 1
                continue
            problems = []
            if tokens(cap) != tokens(cpu):
                problems.append(f"captured cuda:0 {tokens(cap)} != cpu {tokens(cpu)}")
            if tokens(eager) != tokens(cpu):
                problems.append(f"eager cuda:0 {tokens(eager)} != cpu {tokens(cpu)}")
            s = stats(cap)
            steps, replays, captures = s.get("decode_steps"), s.get("replays"), s.get("captures")
            # Every decode step replays or captures; the eager runs are the prompt's (and its
            # copy into a static cache) and the row compactions of a shrinking batch.
            if steps is None or replays is None or captures is None or captures < 1 or replays + captures < steps:
                problems.append(f"captured run: {captures} capture(s), {replays} replay(s), {s.get('eager_steps')} "
                                f"eager step(s) for {steps} decode steps")
            line = (f"{folder.name} / {name}: {sum(map(len, tokens(cpu)))} tokens; kv {s.get('kv_cache')}; "
                    f"decode {s.get('decode_ms', 0) / max(1, steps or 1):.3f} ms/step captured "
                    f"({captures} capture, {replays} replays), "
                    f"{stats(eager).get('decode_ms', 0) / max(1, steps or 1):.3f} ms/step eager, "
                    f"{stats(cpu).get('decode_ms', 0) / max(1, steps or 1):.3f} ms/step cpu")
            if problems:
                failures += 1
                print("FAIL " + line + "\n    " + "\n    ".join(problems))
            else:
                print("ok   " + line)
    print(f"generation cuda:0 vs cpu: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
