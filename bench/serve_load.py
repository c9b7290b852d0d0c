"""Load test of `onyx serve` on loopback: throughput and latency at several concurrencies.

Method: start `onyx serve MODEL` (or use --url of a running server); for each concurrency C,
C client threads each send --requests streaming /v1/completions requests back to back, with a
prompt of --prompt-len random token ids and --max-tokens tokens to generate (ignore_eos, so
every request generates exactly that many). Measured per request from the client's side:
time to first token (request sent -> first text chunk) and inter-token latency (between
consecutive chunks, one chunk per token as the server streams them); per concurrency:
generated tokens / wall time of the whole round. A warm-up round (one request per client
slot of the largest concurrency) runs first, so CUDA graphs are captured before timing.

  python bench/serve_load.py --onyx build/onyx --model DIR --device cuda:0 \
      --concurrency 1 8 32 64 --prompt-len 128 --max-tokens 128 --requests 4 --out bench/results/serve_load.md
"""

import argparse
import datetime
import http.client
import json
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np


def stream_one(host, port, model, prompt, max_tokens):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]}")
    stamps = []
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            data = event[6:]
            if data == b"[DONE]":
                conn.close()
                return t0, stamps
            j = json.loads(data)
            if j.get("choices") and j["choices"][0].get("text"):
                stamps.append(time.perf_counter())
    conn.close()
    return t0, stamps


def run_round(host, port, model, concurrency, requests, prompt_len, max_tokens, vocab, seed):
    rng = np.random.default_rng(seed)
    prompts = [[int(x) for x in rng.integers(0, vocab, prompt_len)] for _ in range(concurrency * requests)]
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for r in range(requests):
            try:
                t0, stamps = stream_one(host, port, model, prompts[i * requests + r], max_tokens)
                with lock:
                    results.append((t0, stamps))
            except Exception as e:  # noqa: BLE001 (reported, counted)
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ttft = [s[0] - t0 for t0, s in results if s]
    itl = [b - a for _, s in results for a, b in zip(s, s[1:])]
    chunks = sum(len(s) for _, s in results)
    return {"concurrency": concurrency, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "tokens_per_s": chunks / wall, "chunks": chunks,
            "ttft_p50_ms": 1e3 * float(np.percentile(ttft, 50)) if ttft else float("nan"),
            "ttft_p99_ms": 1e3 * float(np.percentile(ttft, 99)) if ttft else float("nan"),
            "itl_p50_ms": 1e3 * float(np.percentile(itl, 50)) if itl else float("nan"),
            "itl_p99_ms": 1e3 * float(np.percentile(itl, 99)) if itl else float("nan"),
            "first_error": errors[0] if errors else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (http://host:port); else --onyx and --model start one")
    ap.add_argument("--onyx", default="build/onyx")
    ap.add_argument("--model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=1024)
    ap.add_argument("--serve-arg", action="append", default=[], help="more arguments for onyx serve")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--requests", type=int, default=4, help="requests per client per round")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000, help="prompt ids are drawn below this")
    ap.add_argument("--out", help="append a markdown table here")
    ap.add_argument("--label", default="")
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD here)")
    a = ap.parse_args()

    proc = None
    if a.url:
        m = re.match(r"https?://([^:/]+):(\d+)", a.url)
        host, port = m.group(1), int(m.group(2))
    else:
        cmd = [a.onyx, "serve", a.model, "--port", "0", "--device", a.device, "--max-batch", str(a.max_batch),
               "--max-context", str(a.max_context), "--max-queue", "1024", *a.serve_arg]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        host, port, banner = "127.0.0.1", None, ""
        while port is None:
            line = proc.stderr.readline()
            if not line:
                sys.exit(f"onyx serve exited: {banner}")
            banner += line
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        print(banner.strip(), flush=True)
    conn = http.client.HTTPConnection(host, port)
    conn.request("GET", "/health")
    health = json.loads(conn.getresponse().read())
    model = health["model"]

    run_round(host, port, model, max(a.concurrency), 1, a.prompt_len, min(a.max_tokens, 16), a.vocab, 1)  # warm-up
    rows = []
    for c in a.concurrency:
        r = run_round(host, port, model, c, a.requests, a.prompt_len, a.max_tokens, a.vocab, 100 + c)
        rows.append(r)
        print(json.dumps(r), flush=True)
    conn = http.client.HTTPConnection(host, port)  # the first one has timed out by now
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    replays = re.search(r"^onyx_decode_replays_total (\S+)", metrics, re.M)
    eager = re.search(r"^onyx_decode_eager_total (\S+)", metrics, re.M)
    if proc:
        proc.terminate()
        proc.wait(timeout=60)

    commit = a.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
    lines = [f"\n### {a.label or 'onyx serve'}: {model} on {a.device}",
             f"{datetime.date.today()}, commit {commit}, {platform.node()}; prompt {a.prompt_len} tokens, "
             f"{a.max_tokens} generated per request (ignore_eos), {a.requests} requests per client, "
             f"--max-batch {a.max_batch}; replays {replays.group(1) if replays else '?'}, "
             f"eager runs {eager.group(1) if eager else '?'}\n",
             "| streams | requests | errors | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['requests']} | {r['errors']} | {r['tokens_per_s']:.1f} | "
                     f"{r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | {r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
