#!/usr/bin/env python3
"""Encode speed on the generated corpus: onyx against Hugging Face tokenizers, one thread each.

  .venv/bin/python tools/tokenizer_speed.py [--onyx build/onyx] [--repeat 3] [FAMILY_OR_FOLDER ...]

onyx runs `onyx tokenize DIR --lines CORPUS --bench N` (single-threaded, load time excluded);
tokenizers runs Tokenizer.encode line by line in this process (one call per line runs on one
thread), also excluding load time. Both add special tokens. The best of --repeat runs counts.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
        print(f"corpus: {len(lines)} lines, {mb:.2f} MB")
        print(f"{'family':18} {'onyx lines/s':>13} {'tokenizers lines/s':>19} {'ratio':>6}")
        for name, folder in folders(a.names):
            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            best_hf = min(_time(lambda: [tok.encode(l) for l in lines]) for _ in range(a.repeat))
            out = subprocess.run([a.onyx, "tokenize", str(folder), "--lines", str(corpus), "--bench", str(a.repeat)],
                                 capture_output=True, text=True, check=True).stdout
            # "onyx: ...; best of R passes: T s, ..." -> seconds of the best pass
            secs = float(out.split("passes: ")[1].split(" s")[0])
            print(f"{name:18} {len(lines) / secs:13.0f} {len(lines) / best_hf:19.0f} {best_hf / secs:6.2f}")


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
