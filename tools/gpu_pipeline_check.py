#!/usr/bin/env python3
"""Pipelines on cuda:0, for the GPU suite (scripts/gpu_run.sh).

For every fixture under each DIR (tests/fixtures/seq2seq, tests/fixtures/speech and
tests/fixtures/vision, staged with the checkout):

  - `onyx generate DIR --device cuda:0 --greedy --json --memory-report` on each prompt (or, for
    a speech fixture, each clip with its language and task; for a vision-language fixture, each
    prompt with its images) of its reference.json: the tokens (and a speech or vision model's
    prompt ids) equal transformers' (as on the CPU), and the memory report is cuda:0's governor
    with every component's holders in it (encoder weights, decoder weights, decoder kv cache; or
    weights, kv cache, vision weights non-zero and the vision model's planned arena): each
    component was placed on cuda:0, as the report says, not by trust;
  - a budget that holds what the backend itself leases but not the pipeline's weights is
    refused at load, naming the components, with nothing placed;
  - an encoder-decoder's steps use the fixed-capacity cache and replay a captured graph: every
    request of more than two steps replays (one eager warm-up step, one capture).

Prints one line per check and exits 1 on any failure.

  gpu_pipeline_check.py ONYX_BIN DIR [DIR ...]
"""

import json
import re
import subprocess
import sys
from pathlib import Path


def run(cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace", timeout=300)


def holders(report):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^  ([a-zA-Z0-9 ._-]+): [^(\n]*\((\d+) B\)", report, re.M)}


def main():
    onyx = sys.argv[1]
    fails = 0
    folders = [d for root in sys.argv[2:] for d in sorted(Path(root).iterdir()) if (d / "reference.json").is_file()]
    for folder in folders:
        ref = json.loads((folder / "reference.json").read_text())
        speech = "audio" in ref["cases"][0]
        vision = "images" in ref["cases"][0]
        new_tokens = ref.get("new_tokens", ref.get("max_new_tokens"))

        def request(case):
            if vision:
                args = ["--prompt", case["prompt"]]
                for image in case["images"]:
                    args += ["--image", folder / "images" / image]
                return args
            if not speech:
                return ["--prompt-ids", " ".join(map(str, case["prompt_ids"]))]
            args = ["--audio", folder / case["audio"]]
            for key in ("language", "task"):
                if case[key]:
                    args += [f"--{key}", case[key]]
            return args

        wrong, report, uncaptured = [], "", []
        for case in ref["cases"]:
            r = run([onyx, "generate", folder, *request(case), "--greedy",
                     "--max-new-tokens", new_tokens, "--device", "cuda:0", "--json", "--memory-report"])
            if r.returncode != 0:
                print(f"FAIL {folder.name} {case['name']}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
                fails += 1
                break
            out = json.loads(r.stdout)
            if not vision or case["images"]:  # (a text-only request does not run the vision model)
                report = out["memory_report"]
            if out["generated_ids"] != case["generated_ids"] or (speech and out["prompt_ids"] != case["decoder_prompt"]) \
                    or (vision and out["prompt_ids"] != case["prompt_ids"]):
                wrong.append(case["name"])
            if out["stats"]["device"] != "cuda:0":
                wrong.append(f"{case['name']} (device {out['stats']['device']})")
            st = out["stats"]
            # (onnxruntime-genai's Whisper decoder keeps its cache in MultiHeadAttention: growing.)
            genai_form = (folder / "genai_config.json").exists()
            if not vision and not genai_form and (st["kv_cache"] != "static" or
                                                  (st["decode_steps"] > 2 and st["replays"] == 0)):
                uncaptured.append(f"{case['name']} ({st['kv_cache']}: {st['kv_cache_note']}; "
                                  f"{st['captures']} captures, {st['replays']} replays)")
        else:
            h = holders(report)
            if vision:
                # The vision model's values are given back after each run: its weights stay, and
                # its line reports the arena its run planned.
                arena = re.search(r"^vision model: weights [^,]+, arena ([0-9.]+) ", report, re.M)
                placed = report.startswith("cuda:0 governor:") and all(
                    h.get(k, 0) > 0 for k in ("weights", "kv cache", "vision weights")) and \
                    "vision values" in h and arena is not None and float(arena.group(1)) > 0
            else:
                placed = report.startswith("holders of cuda:0's governor") and all(
                    h.get(k, 0) > 0 for k in ("encoder weights", "decoder weights", "decoder kv cache"))
            ok = not wrong and placed
            fails += not ok
            if not vision and not (folder / "genai_config.json").exists():
                fails += bool(uncaptured)
                print(f"{'ok  ' if not uncaptured else 'FAIL'} {folder.name}: steps from the fixed-capacity cache, "
                      f"replayed from a captured graph" + (f"; not: {uncaptured}" if uncaptured else ""))
            print(f"{'ok  ' if ok else 'FAIL'} {folder.name}: {len(ref['cases']) - len(wrong)}/{len(ref['cases'])} "
                  f"prompts equal transformers' on cuda:0; components placed on cuda:0 by the report: {placed}"
                  + (f"; differ: {wrong}" if wrong else ""))
            if not placed:
                print(report)
            # The budget: the backend's own holders fit, the pipeline's weights do not.
            if vision:
                # At admission the backend holds its workspace; the two components' weights need a
                # 64 MiB pool block each.
                own = h.get("library workspace", 0)
                budget = own + (64 << 20)
            else:
                own = sum(b for k, b in h.items() if not k.startswith(("encoder ", "decoder ")))
                weights = h.get("encoder weights", 0) + h.get("decoder weights", 0)
                budget = own + weights // 2
            r = run([onyx, "generate", folder, *request(ref["cases"][0]), "--device", "cuda:0",
                     "--memory-budget", budget])
            refused = (r.returncode != 0 and "does not fit the memory budget of cuda:0" in r.stderr
                       and ("vision weights:" if vision else "encoder weights:") in r.stderr
                       and "nothing was placed" in r.stderr)
            fails += not refused
            print(f"{'ok  ' if refused else 'FAIL'} {folder.name}: a budget of {budget} B (the backend's "
                  f"{own} B and half the weights) refused at load: {refused}"
                  + ("" if refused else f": exit {r.returncode}: {r.stderr.strip()[-600:]}"))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
