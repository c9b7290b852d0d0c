#!/usr/bin/env python3
"""Per-component memory of an encoder-decoder pipeline, onyx against onnxruntime.

Makes a T5 of t5-small's shape (d_model 512, 6 + 6 layers, 8 heads of 64, feed-forward 2048,
vocabulary 32128, random weights, seed 0), exports it with Optimum
(text2text-generation-with-past), then for each prompt length runs greedy generation of
--new-tokens tokens, batch 1:

  onyx         `onyx generate DIR --prompt-ids ... --json --memory-report`: the governor's
               holders per component (weights, the largest arena planned against its live-set
               lower bound, the KV cache held at the end) and the process's peak RSS
  onnxruntime  the same loop over the same files (encoder once, decoder_model.onnx, then
               decoder_with_past_model.onnx per step, CPU EP, default session options): its RSS
               once the sessions are made (the weights), the most its RSS rose above that during
               the run (polled every 2 ms: its intermediates and caches), and the process's peak

The model is made in .venv-fixtures-optimum (torch, transformers, optimum: see
tools/make_genai_fixtures.py's pins); the runs use the project's .venv (onnxruntime).

  python3 bench/seq2seq_memory.py [--onyx build/onyx] [--work /tmp/onyx-t5-small] [--prompts 64,512]
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))

MAKE = r'''
import sys, torch, transformers, subprocess, os
out = sys.argv[1]
torch.manual_seed(0)
config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                               relative_attention_num_buckets=32, dropout_rate=0.0, feed_forward_proj="relu",
                               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, n_positions=512)
model = transformers.T5ForConditionalGeneration(config).eval()
model.save_pretrained(out + "/hf")
subprocess.run([sys.executable, "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", out + "/hf",
                "--task", "text2text-generation-with-past", "--opset", "18", out + "/onnx"], check=True,
               env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
'''

ORT = r'''
import json, resource, sys, numpy as np, onnxruntime as ort
d, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
base = rss()
so = ort.SessionOptions()
enc = ort.InferenceSession(d + "/encoder_model.onnx", so, providers=["CPUExecutionProvider"])
first = ort.InferenceSession(d + "/decoder_model.onnx", so, providers=["CPUExecutionProvider"])
step = ort.InferenceSession(d + "/decoder_with_past_model.onnx", so, providers=["CPUExecutionProvider"])
loaded = rss()
import threading, time
run_peak = [loaded]
done = []
def sample():  # the run's own peak: RSS polled every 2 ms from here on
    while not done:
        run_peak[0] = max(run_peak[0], rss())
        time.sleep(0.002)
sampler = threading.Thread(target=sample)
sampler.start()
rng = np.random.default_rng(0)
ids = rng.integers(2, 32128, size=(1, n)).astype(np.int64)
mask = np.ones_like(ids)
h = enc.run(None, {"input_ids": ids, "attention_mask": mask})[0]
names = [o.name for o in first.get_outputs()]
out = dict(zip(names, first.run(None, {"input_ids": np.zeros((1, 1), np.int64), "encoder_attention_mask": mask,
                                          "encoder_hidden_states": h})))
del h
past = {k.replace("present", "past_key_values"): v for k, v in out.items() if k.startswith("present")}
tokens = [int(out["logits"][0, -1].argmax())]
snames = [o.name for o in step.get_outputs()]
for _ in range(steps - 1):
    feed = {"input_ids": np.array([[tokens[-1]]], np.int64), "encoder_attention_mask": mask, **past}
    o = dict(zip(snames, step.run(None, feed)))
    for k, v in o.items():
        if k.startswith("present"):
            past[k.replace("present", "past_key_values")] = v
    tokens.append(int(o["logits"][0, -1].argmax()))
done.append(1)
sampler.join()
run_peak[0] = max(run_peak[0], rss())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"tokens": tokens, "rss_before_load": base, "rss_loaded": loaded, "peak_rss": peak,
                  "run_peak_rss": run_peak[0]}))
'''


# Runs a command and reports its peak RSS: a fresh process, so that no earlier child's peak counts.
PEAK = r'''
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
sys.stderr.write("\npeak_rss_kib=%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
'''


def with_peak(cmd):
    r = subprocess.run([sys.executable, "-c", PEAK, *map(str, cmd)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd))[:200]} failed:\n{r.stderr}")
    peak = int(r.stderr.rsplit("peak_rss_kib=", 1)[1]) * 1024
    return r.stdout, peak


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default=str(REPO_ROOT / "build" / "onyx"))
    ap.add_argument("--work", default="/tmp/onyx-t5-small")
    ap.add_argument("--prompts", default="64,512")
    ap.add_argument("--new-tokens", type=int, default=16)
    args = ap.parse_args()
    work = Path(args.work)
    onnx_dir = work / "onnx"
    if not (onnx_dir / "decoder_with_past_model.onnx").exists():
        import make_genai_fixtures as base
        py = base.ensure_optimum_venv()
        work.mkdir(parents=True, exist_ok=True)
        print(f"making a t5-small-shaped model in {work}", flush=True)
        subprocess.run([str(py), "-c", MAKE, str(work)], check=True)
        # onyx reads the split pair; the merged graph is not needed.
        (onnx_dir / "decoder_model_merged.onnx").unlink(missing_ok=True)
    py = REPO_ROOT / ".venv" / "bin" / "python"
    rows = []
    for n in [int(x) for x in args.prompts.split(",")]:
        import numpy as np
        ids = np.random.default_rng(0).integers(2, 32128, size=n).tolist()
        stdout, onyx_peak = with_peak([args.onyx, "generate", onnx_dir, "--prompt-ids", " ".join(map(str, ids)),
                                       "--greedy", "--max-new-tokens", args.new_tokens, "--json", "--memory-report"])
        o = json.loads(stdout)
        ort_out = json.loads(subprocess.run([str(py), "-c", ORT, str(onnx_dir), str(n), str(args.new_tokens)],
                                            capture_output=True, text=True, check=True).stdout)
        comps = {c["name"]: c for c in o["components"]}
        same = ort_out["tokens"][:len(o["generated_ids"])] == o["generated_ids"]
        rows.append((n, comps, onyx_peak, ort_out, same, o["memory_report"]))
    print(f"\nt5-small shape, random weights, batch 1, {args.new_tokens} new tokens, CPU\n")
    print("| prompt | component | weights | arena (planned) | live-set lower bound | all intermediates | arena / all "
          "| KV cache at the end |")
    print("|---|---|---|---|---|---|---|---|")
    for n, comps, *_ in rows:
        for name in ("encoder", "decoder"):
            c = comps[name]
            ratio = c["arena_bytes"] / c["arena_no_reuse"] if c["arena_no_reuse"] else float("nan")
            print(f"| {n} | {name} | {mib(c['weight_bytes'])} | {mib(c['arena_bytes'])} | "
                  f"{mib(c['arena_lower_bound'])} | {mib(c['arena_no_reuse'])} | {ratio:.3f} | "
                  f"{mib(c['kv_bytes']) if name == 'decoder' else '-'} |")
    print("\n| prompt | onyx weights held | onyx's run: most leased past the weights | onyx peak RSS "
          "| onnxruntime RSS after load | onnxruntime's run: peak RSS past load | onnxruntime peak RSS | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for n, comps, onyx_peak, ort_out, same, report in rows:
        held = {m.group(1): int(m.group(2)) for m in re.finditer(r"^  ([a-z ]+): [^(\n]*\((\d+) B\)", report, re.M)}
        weights = sum(b for h, b in held.items() if h.endswith("weights"))
        most = int(re.search(r"most leased at once: [^(]*\((\d+) B\)", report).group(1))
        rest = most - weights
        print(f"| {n} | {mib(weights)} | {mib(rest)} | {mib(onyx_peak)} | "
              f"{mib(ort_out['rss_loaded'] - ort_out['rss_before_load'])} | "
              f"{mib(ort_out['run_peak_rss'] - ort_out['rss_loaded'])} | {mib(ort_out['peak_rss'])} | {same} |")
    for n, *_, report in rows:
        print(f"\nonyx memory report, prompt {n}:\n{report}")


if __name__ == "__main__":
    main()
