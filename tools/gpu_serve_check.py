"""onyx serve on a GPU: concurrent streams get what they get alone, decode steps replay.

For each folder: start `onyx serve DIR --device cuda:0 --capture require`; send --requests
requests (random prompts of random lengths, greedy and seeded-sampled, some with stop strings)
one at a time, then all of them again from --concurrency streaming clients at once (several
rounds: a bounded soak), and compare each streamed answer with the one it got alone. Then check
the metrics: decode steps replayed from CUDA graphs, every sequence finished, no slot in use.
Exits 1 on any difference. Plain http.client (the GPU machine has no openai package).

  python3 gpu_serve_check.py --onyx bin/onyx --folder DIR [--folder DIR2] --rounds 3
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import re
import subprocess
import sys
import threading
import time

import numpy as np


class Server:
    def __init__(self, onyx, folder, args):
        cmd = [onyx, "serve", folder, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.log = ""
        while True:
            line = self.proc.stderr.readline()
            if not line:
                sys.exit(f"onyx serve exited: {self.log}")
            self.log += line
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        print(self.log.strip(), flush=True)
        self.model = json.loads(self.call("GET", "/health")[1])["model"]

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.status, r.read().decode()
        c.close()
        return out

    def complete(self, job):
        code, text = self.call("POST", "/v1/completions", {"model": self.model, **job})
        assert code == 200, text
        j = json.loads(text)
        return j["choices"][0]["text"], j["choices"][0]["finish_reason"], j["usage"]["completion_tokens"]

    def stream(self, job):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = {"model": self.model, "stream": True, "stream_options": {"include_usage": True}, **job}
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        text, finish, usage, buf = "", None, None, b""
        while True:
            piece = r.read1(65536)
            if not piece:
                break
            buf += piece
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                j = json.loads(event[6:])
                if j.get("choices"):
                    text += j["choices"][0]["text"]
                    finish = j["choices"][0]["finish_reason"] or finish
                if j.get("usage"):
                    usage = j["usage"]["completion_tokens"]
        c.close()
        return text, finish, usage

    def metric(self, series):
        for line in self.call("GET", "/metrics")[1].splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default="bin/onyx")
    ap.add_argument("--folder", action="append", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    print(f"seed {a.seed}")
    failures = 0
    for folder in a.folder:
        s = Server(a.onyx, folder, ["--device", "cuda:0", "--capture", "require", "--max-batch", "16",
                                    "--prefill-chunk", "16"])
        rng = np.random.default_rng(a.seed)
        jobs = []
        for i in range(a.requests):
            job = {"prompt": [int(x) for x in rng.integers(0, a.vocab, int(rng.integers(1, 60)))],
                   "max_tokens": int(rng.integers(1, 40))}
            job.update(temperature=0.8, top_p=0.9, seed=int(rng.integers(0, 2**31))) if i % 3 == 0 else \
                job.update(temperature=0)
            if i % 5 == 0:
                job["stop"] = ["e"]
            jobs.append(job)
        alone = [s.complete(j) for j in jobs]
        wrong = 0
        t0 = time.time()
        for _ in range(a.rounds):
            with cf.ThreadPoolExecutor(a.concurrency) as pool:
                got = list(pool.map(s.stream, jobs))
            for i, (e, g) in enumerate(zip(alone, got)):
                if e != g:
                    wrong += 1
                    print(f"  request {i} {jobs[i]}: alone {e}, concurrent {g}")
        replays, eager = s.metric("onyx_decode_replays_total"), s.metric("onyx_decode_eager_total")
        running = s.metric("onyx_sequences_running")
        steps = s.metric("onyx_decode_steps_total")
        rc = s.stop()
        ok = wrong == 0 and replays > 0 and running == 0 and rc == 0
        failures += not ok
        print(f"{folder}: {a.rounds} rounds of {len(jobs)} concurrent streams in {time.time() - t0:.1f} s: "
              f"{wrong} differ from alone; decode steps {steps:.0f}, replays {replays:.0f}, eager {eager:.0f}; "
              f"running after {running:.0f}; exit {rc} -> {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
