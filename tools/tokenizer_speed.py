#!/usr/bin/env python3
"""Encode speed on the generated corpus: onyx against Hugging Face tokenizers, one thread each.

  .venv/bin/python tools/tokenizer_speed.py [--onyx build/onyx] [--repeat 3] [FAMILY_OR_FOLDER ...]

Both encode the 10,000 corpus lines with special tokens, load time excluded, one thread:
onyx through `onyx tokenize DIR --lines CORPUS --bench N`; tokenizers through
encode_batch_fast (no offsets, which onyx does not compute either) with RAYON_NUM_THREADS=1
(a batch keeps Python's per-call cost out of the figure). "cold" is the first pass of a
freshly loaded tokenizer (both cache the BPE of pieces they have seen), "warm" the best of
--repeat passes. Times are CPU time of the process, so that a shared machine counts less.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its thread pool

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import make_tokenizer_fixtures as fixtures  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def folders(names):
    real = fixtures.real_folders()
    if not names:
        names = sorted(p.name for p in fixtures.FIXTURES.iterdir() if (p / "tokenizer.json").is_file()) + sorted(real)
    for n in names:
        yield n, real.get(n, fixtures.FIXTURES / n if (fixtures.FIXTURES / n).is_dir() else Path(n))


def reference(folder, lines, repeat):
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        tok.encode_batch_fast(lines)
        times.append(time.process_time() - t0)
    return times[0], min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default=str(REPO / "build" / "onyx"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        fixtures.write_corpus(corpus, 10000, 20261201)
        lines = [json.loads(l) for l in corpus.read_text(encoding="utf-8").splitlines()]
        mb = sum(len(l.encode()) for l in lines) / 1e6
        print(f"corpus: {len(lines)} lines, {mb:.2f} MB; MB of UTF-8 input per CPU second, one thread")
        print(f"{'family':18} {'onyx cold':>10} {'hf cold':>8} {'ratio':>6}   {'onyx warm':>10} {'hf warm':>8} {'ratio':>6}")
        for name, folder in folders(a.names):
            hf_cold, hf_warm = reference(folder, lines, a.repeat)
            out = subprocess.run([a.onyx, "tokenize", str(folder), "--lines", str(corpus), "--bench", str(a.repeat)],
                                 capture_output=True, text=True, check=True,
                                 env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).stdout
            cold = float(out.split("first pass: ")[1].split(" s")[0])
            warm = float(out.split("passes: ")[1].split(" s")[0])
            print(f"{name:18} {mb / cold:10.2f} {mb / hf_cold:8.2f} {hf_cold / cold:6.2f}   "
                  f"{mb / warm:10.2f} {mb / hf_warm:8.2f} {hf_warm / warm:6.2f}")


if __name__ == "__main__":
    main()
