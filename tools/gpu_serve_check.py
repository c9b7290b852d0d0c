"""onyx serve on a GPU: concurrent streams get what they get alone, decode steps replay.

For each folder: start `onyx serve DIR --device cuda:0 --capture require`; send --requests
requests (random prompts of random lengths, greedy and seeded-sampled, some with stop strings)
one at a time, then all of them again from --concurrency streaming clients at once (several
rounds: a bounded soak), and compare each streamed answer with the one it got alone. Then check
the metrics: decode steps replayed from CUDA graphs, every sequence finished, no slot in use.
Exits 1 on any difference. Plain http.client (the GPU machine has no openai package).

With --vision DIR (a vision-language fixture with reference.json and images/, such as
tests/fixtures/vision/llava-genai): each case's prompt as a chat message with its images as
image_url data URLs, alone and then all at once (twice each), against `onyx generate --image
--device cuda:0`'s text for the case; prompt chunks of 7 tokens, so the image tokens straddle them.

  python3 gpu_serve_check.py --onyx bin/onyx --folder DIR [--folder DIR2] --rounds 3 [--vision DIR]
"""
import base64
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


def vision_check(onyx, folder):
    """The vision fixture served on cuda:0 against onyx generate --image on cuda:0. True when all equal."""
    from pathlib import Path
    folder = Path(folder)
    ref = json.loads((folder / "reference.json").read_text())

    def message(case):
        body = case["prompt"][len("USER: "):-len(" ASSISTANT:")]
        parts, images = [], iter(case["images"])
        for k, piece in enumerate(body.split("<image>")):
            if k:
                data = base64.b64encode((folder / "images" / next(images)).read_bytes()).decode()
                parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}})
            if piece:
                parts.append({"type": "text", "text": piece})
        return [{"role": "user", "content": parts}]

    want = {}
    for case in ref["cases"]:
        args = [onyx, "generate", str(folder), "--prompt", case["prompt"], "--greedy", "--json", "--device", "cuda:0",
                "--max-new-tokens", str(ref["max_new_tokens"])]
        for image in case["images"]:
            args += ["--image", str(folder / "images" / image)]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL vision: onyx generate {case['name']}: {r.stderr.strip()[-400:]}")
            return False
        out = json.loads(r.stdout)
        if out["generated_ids"] != case["generated_ids"]:
            print(f"FAIL vision: onyx generate {case['name']} on cuda:0 differs from transformers' tokens")
            return False
        want[case["name"]] = out["text"]
    s = Server(onyx, str(folder), ["--device", "cuda:0", "--capture", "require", "--max-batch", "4",
                                   "--prefill-chunk", "7"])

    def ask(case):
        code, text = s.call("POST", "/v1/chat/completions", {"model": s.model, "messages": message(case),
                                                             "max_tokens": ref["max_new_tokens"], "temperature": 0})
        return json.loads(text)["choices"][0]["message"]["content"] if code == 200 else f"HTTP {code}: {text}"

    alone = {c["name"]: ask(c) for c in ref["cases"]}
    with cf.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, ref["cases"] * 2))
    replays = s.metric("onyx_decode_replays_total")
    rc = s.stop()
    wrong = [n for n in want if alone[n] != want[n]] + \
        [c["name"] + " (concurrent)" for c, t in zip(ref["cases"] * 2, together) if t != want[c["name"]]]
    ok = not wrong and replays > 0 and rc == 0
    print(f"{'ok  ' if ok else 'FAIL'} vision {folder.name}: {len(ref['cases'])} chats with images served on cuda:0, "
          f"alone and {len(together)} at once, against onyx generate --image on cuda:0 (which equals "
          f"transformers' tokens); replays {replays:.0f}; exit {rc}" + (f"; differ: {wrong}" if wrong else ""),
          flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default="bin/onyx")
    ap.add_argument("--folder", action="append", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--vision", help="a vision-language fixture to serve with images")
    a = ap.parse_args()
    print(f"seed {a.seed}")
    failures = 0
    if a.vision:
        failures += not vision_check(a.onyx, a.vision)
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
