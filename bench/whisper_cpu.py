#!/usr/bin/env python3
"""Speech recognition on the CPU at a realistic shape: onyx against onnxruntime, same files.

Makes a Whisper of whisper-tiny's shape (d_model 384, 4 + 4 layers, 6 heads, feed-forward 1536,
80 mel bins, vocabulary 51865, Whisper's special-token ids; random weights, seed 0), exports it
with Optimum (automatic-speech-recognition-with-past), writes a 10-second clip (tones and
noise, 16 kHz) and transformers' log-mel features of it. Then, batch 1, greedy, --new-tokens
tokens at most, English transcription (the decoder prompt <|startoftranscript|> <|en|>
<|transcribe|> <|notimestamps|>), suppress_tokens and begin_suppress_tokens applied:

  onyx         `onyx generate DIR --audio clip.wav --language en --greedy --json --memory-report`,
               --runs times: its figures (prefill = the encoder and the decoder's first run,
               decode ms per step), the components' memory, the process's peak RSS
  onnxruntime  the same loop over the same files in Python (CPU EP, default session options,
               the features transformers computed): encoder, decoder_model.onnx over the prompt,
               decoder_with_past_model.onnx per step, the same logit processors; timed the same
               way (the features are not counted for either; onyx's are in its load-to-exit
               wall time only)

Both engines run in turn, --runs times each, medians; the tokens must agree. The model is made
in .venv-fixtures-optimum (tools/make_genai_fixtures.py's pins); the runs use the project's
.venv (onnxruntime).

  python3 bench/whisper_cpu.py [--onyx build/onyx] [--work /tmp/onyx-whisper-tiny] [--threads 1]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))

EOT, SOT, EN, TRANSCRIBE, TRANSLATE, NO_TS = 50257, 50258, 50259, 50359, 50358, 50363
SUPPRESS = [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522,
            542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268, 3536, 3846, 3961,
            4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157,
            14635, 15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279,
            29464, 31650, 32302, 32470, 36865, 42863, 47425, 49870, 50254, 50258, 50360, 50361, 50362]

MAKE = r'''
import json, sys, os, subprocess, wave, numpy as np, torch, transformers
out = sys.argv[1]
EOT, SOT, EN, TRANSCRIBE, TRANSLATE, NO_TS = 50257, 50258, 50259, 50359, 50358, 50363
suppress = json.loads(sys.argv[2])
torch.manual_seed(0)
config = transformers.WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=384, encoder_layers=4,
    decoder_layers=4, encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
    decoder_ffn_dim=1536, max_source_positions=1500, max_target_positions=448, pad_token_id=EOT, bos_token_id=EOT,
    eos_token_id=EOT, decoder_start_token_id=SOT)
model = transformers.WhisperForConditionalGeneration(config).eval()
g = model.generation_config
g.decoder_start_token_id, g.eos_token_id, g.pad_token_id = SOT, EOT, EOT
g.is_multilingual = True
g.lang_to_id = {"<|en|>": EN, "<|de|>": 50261, "<|fr|>": 50265}
g.task_to_id = {"transcribe": TRANSCRIBE, "translate": TRANSLATE}
g.no_timestamps_token_id = NO_TS
g.suppress_tokens = suppress
g.begin_suppress_tokens = [220, EOT]
g.max_length = 448
model.save_pretrained(out + "/hf")
ex = transformers.WhisperFeatureExtractor()
ex.save_pretrained(out + "/hf")
subprocess.run([sys.executable, "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", out + "/hf",
                "--task", "automatic-speech-recognition-with-past", "--opset", "18", out + "/onnx"], check=True,
               env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
g.save_pretrained(out + "/onnx")
rng = np.random.default_rng(0)
t = np.arange(10 * 16000) / 16000
x = 0.3 * np.sin(2 * np.pi * 330 * t) + 0.2 * np.sin(2 * np.pi * (200 + 100 * t) * t) + 0.05 * rng.standard_normal(t.size)
pcm = np.round(np.clip(x, -1, 1) * 32767).astype(np.int16)
with wave.open(out + "/clip.wav", "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(pcm.tobytes())
feats = ex(pcm.astype(np.float32) / 32768, sampling_rate=16000, return_tensors="np").input_features
np.save(out + "/features.npy", feats.astype(np.float32))
'''

ORT = r'''
import json, sys, time, statistics, numpy as np, onnxruntime as ort, resource
d, feats_path, steps, runs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
suppress, begin = json.loads(sys.argv[6]), json.loads(sys.argv[7])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
t0 = time.perf_counter()
enc = ort.InferenceSession(d + "/encoder_model.onnx", so, providers=["CPUExecutionProvider"])
first = ort.InferenceSession(d + "/decoder_model.onnx", so, providers=["CPUExecutionProvider"])
step = ort.InferenceSession(d + "/decoder_with_past_model.onnx", so, providers=["CPUExecutionProvider"])
load_s = time.perf_counter() - t0
feats = np.load(feats_path)
prompt = [50258, 50259, 50359, 50363]
fnames = [o.name for o in first.get_outputs()]
snames = [o.name for o in step.get_outputs()]
def pick(logits, k):
    l = logits.astype(np.float32).copy()
    l[suppress] = -np.inf
    if k == 0:
        l[begin] = -np.inf
    return int(l.argmax())
res = []
for _ in range(runs):
    t0 = time.perf_counter()
    h = enc.run(None, {"input_features": feats})[0]
    out = dict(zip(fnames, first.run(None, {"input_ids": np.array([prompt], np.int64), "encoder_hidden_states": h})))
    past = {k.replace("present", "past_key_values"): v for k, v in out.items() if k.startswith("present")}
    tokens = [pick(out["logits"][0, -1], 0)]
    t1 = time.perf_counter()
    while len(tokens) < steps and tokens[-1] != 50257:
        o = dict(zip(snames, step.run(None, {"input_ids": np.array([[tokens[-1]]], np.int64), **past})))
        for k, v in o.items():
            if k.startswith("present"):
                past[k.replace("present", "past_key_values")] = v
        tokens.append(pick(o["logits"][0, -1], len(tokens)))
    t2 = time.perf_counter()
    res.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3 / max(1, len(tokens) - 1)))
print(json.dumps({"tokens": tokens, "prefill_ms": [r[0] for r in res], "step_ms": [r[1] for r in res],
                  "load_s": load_s, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''

PEAK = r'''
import resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t0
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
sys.stderr.write("\npeak_rss_kib=%d wall_s=%.4f\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, wall))
sys.exit(r.returncode)
'''


def run_onyx(cmd):
    r = subprocess.run([sys.executable, "-c", PEAK, *map(str, cmd)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd))[:300]} failed:\n{r.stderr}")
    tail = r.stderr.rsplit("peak_rss_kib=", 1)[1]
    peak, wall = tail.split()
    return json.loads(r.stdout), int(peak) * 1024, float(wall.split("=")[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default=str(REPO_ROOT / "build" / "onyx"))
    ap.add_argument("--work", default="/tmp/onyx-whisper-tiny")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    work = Path(args.work)
    onnx_dir = work / "onnx"
    if not (onnx_dir / "decoder_with_past_model.onnx").exists():
        import make_genai_fixtures as base
        py = base.ensure_optimum_venv()
        work.mkdir(parents=True, exist_ok=True)
        print(f"making a whisper-tiny-shaped model in {work}", flush=True)
        subprocess.run([str(py), "-c", MAKE, str(work), json.dumps(SUPPRESS)], check=True)
        (onnx_dir / "decoder_model_merged.onnx").unlink(missing_ok=True)
        import shutil
        shutil.copy(work / "hf" / "preprocessor_config.json", onnx_dir / "preprocessor_config.json")
    py = REPO_ROOT / ".venv" / "bin" / "python"
    onyx_runs, ort_runs = [], None
    cmd = [args.onyx, "generate", onnx_dir, "--audio", work / "clip.wav", "--language", "en", "--greedy",
           "--max-new-tokens", args.new_tokens, "--intra-op-threads", args.threads, "--json", "--memory-report"]
    ort_prefill, ort_step = [], []
    for _ in range(args.runs):
        onyx_runs.append(run_onyx(cmd))
        r = json.loads(subprocess.run([str(py), "-c", ORT, str(onnx_dir), str(work / "features.npy"),
                                       str(args.new_tokens), "1", str(args.threads), json.dumps(SUPPRESS),
                                       json.dumps([220, EOT])], capture_output=True, text=True, check=True).stdout)
        ort_runs = r
        ort_prefill += r["prefill_ms"]
        ort_step += r["step_ms"]
    o = onyx_runs[-1][0]
    same = o["generated_ids"] == ort_runs["tokens"]
    onyx_prefill = statistics.median(x[0]["stats"]["prefill_ms"] for x in onyx_runs)
    onyx_step = statistics.median(x[0]["stats"]["decode_ms"] / max(1, x[0]["stats"]["decode_steps"]) for x in onyx_runs)
    print(f"\nwhisper-tiny shape, random weights, a 10 s clip, batch 1, greedy, {len(o['generated_ids'])} tokens, "
          f"{args.threads} thread(s), {args.runs} runs each, alternating; medians\n")
    print("| engine | encoder + first decoder run ms | decode ms/step | peak RSS MiB | tokens equal |")
    print("|---|---:|---:|---:|---|")
    print(f"| onnxruntime | {statistics.median(ort_prefill):.1f} | {statistics.median(ort_step):.2f} | "
          f"{ort_runs['peak_rss'] / 2**20:.0f} | |")
    print(f"| onyx | {onyx_prefill:.1f} | {onyx_step:.2f} | "
          f"{statistics.median(x[1] for x in onyx_runs) / 2**20:.0f} | {same} |")
    print(f"\nonyx/onnxruntime: prefill {onyx_prefill / statistics.median(ort_prefill):.2f}, decode step "
          f"{onyx_step / statistics.median(ort_step):.2f}; onyx whole command (load, features, run) median "
          f"{statistics.median(x[2] for x in onyx_runs):.2f} s")
    comps = {c["name"]: c for c in o["components"]}
    print("\n| component | weights | arena (planned) | live-set lower bound | all intermediates | KV cache at the end |")
    print("|---|---|---|---|---|---|")
    for name in ("encoder", "decoder"):
        c = comps[name]
        print(f"| {name} | {c['weight_bytes'] / 2**20:.1f} MiB | {c['arena_bytes'] / 2**20:.1f} MiB | "
              f"{c['arena_lower_bound'] / 2**20:.1f} MiB | {c['arena_no_reuse'] / 2**20:.1f} MiB | "
              f"{c['kv_bytes'] / 2**20:.2f} MiB |" if name == "decoder" else
              f"| {name} | {c['weight_bytes'] / 2**20:.1f} MiB | {c['arena_bytes'] / 2**20:.1f} MiB | "
              f"{c['arena_lower_bound'] / 2**20:.1f} MiB | {c['arena_no_reuse'] / 2**20:.1f} MiB | - |")
    if not same:
        print(f"\ntokens differ:\n onyx {o['generated_ids']}\n ort  {ort_runs['tokens']}")
        sys.exit(1)


if __name__ == "__main__":
    main()
