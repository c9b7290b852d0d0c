"""onyx serve against onyx generate and against itself, through the official openai client.

Greedy completions equal `onyx generate`'s (text and token count), for text prompts and token-id
prompts, whole and chunked prefill, on both cache forms (the Optimum Llama's rewritten static
cache; the builder Qwen2's GroupQueryAttention shared buffer). 64 concurrent streaming clients
with random prompts, lengths and sampling seeds each get exactly what they get alone. A client
that goes away mid-stream frees its slot (the metrics show it); bad requests get 400s naming the
field; a full queue gets 429s; the server answers /health through all of it. Prompts are fresh
random ids each run; the seed is printed.
"""

import concurrent.futures as cf
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "genai"
LLAMA = FIXTURES / "llama-optimum"   # static cache (Concat rewritten), context 256, vocab 1024
QWEN = FIXTURES / "qwen2-builder-fp32"  # shared GroupQueryAttention buffer
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def rng_and_seed():
    seed = int(os.environ.get("ONYX_PARITY_SEED", np.random.SeedSequence().entropy)) % (2**32)
    print(f"\nserve seed: {seed}  (rerun with ONYX_PARITY_SEED={seed})")
    return np.random.default_rng(seed)


class Server:
    def __init__(self, onyx_bin, folder, *args):
        self.proc = subprocess.Popen([str(onyx_bin), "serve", str(folder), "--port", "0", *map(str, args)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO)
        self.log = []
        deadline = time.time() + 120
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"onyx serve exited (rc {self.proc.wait()}): {''.join(self.log)}")
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            assert time.time() < deadline, "onyx serve did not start"
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = json.loads(self.get("/health")[1])["model"]
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, headers=None):
        return self.request("POST", path, body, headers)

    def metric(self, series):
        text = self.get("/metrics")[1]
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"onyx serve exited {rc}: {''.join(self.log)}"


@pytest.fixture
def serve(onyx_bin):
    servers = []

    def start(folder, *args):
        s = Server(onyx_bin, folder, *args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def generate(run_onyx, folder, ids=None, text=None, max_new=16):
    args = ["generate", folder, "--greedy", "--max-new-tokens", max_new, "--json"]
    args += ["--prompt-ids", " ".join(map(str, ids))] if ids is not None else ["--prompt", text]
    r = run_onyx(*args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def random_ids(rng, n, vocab=1021):
    return [int(x) for x in rng.integers(0, vocab, n)]


def completion_ids(out):
    return out["generated_ids"]


@pytest.mark.parametrize("folder,chunk", [(LLAMA, 256), (LLAMA, 5), (QWEN, 256), (QWEN, 3)],
                         ids=["static", "static-chunked", "shared", "shared-chunked"])
def test_greedy_equals_generate(serve, run_onyx, folder, chunk):
    rng = rng_and_seed()
    s = serve(folder, "--prefill-chunk", chunk, "--max-batch", 4)
    vocab = 1021 if folder == LLAMA else 1000
    for n in (1, 7, 23):
        ids = random_ids(rng, n, vocab)
        ref = generate(run_onyx, folder, ids=ids, max_new=12)
        r = s.client.completions.create(model=s.model, prompt=ids, max_tokens=12, temperature=0)
        assert r.choices[0].text == ref["text"], (ids, r.choices[0].text, ref)
        gen = ref["generated_ids"]
        assert r.usage.completion_tokens == len(gen)
        assert r.usage.prompt_tokens == n
        assert r.choices[0].finish_reason == ("stop" if ref["stop_reason"] == "eos" else "length")
    ref = generate(run_onyx, folder, text="Once upon a time there was", max_new=10)
    r = s.client.completions.create(model=s.model, prompt="Once upon a time there was", max_tokens=10, temperature=0)
    assert r.choices[0].text == ref["text"]
    assert r.usage.prompt_tokens == len(ref["prompt_ids"])


def test_stream_equals_whole(serve, tmp_path):
    rng = rng_and_seed()
    s = serve(LLAMA)
    ids = random_ids(rng, 9)
    whole = s.client.completions.create(model=s.model, prompt=ids, max_tokens=20, temperature=0)
    chunks = list(s.client.completions.create(model=s.model, prompt=ids, max_tokens=20, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # Chat streaming: a role delta first, then content that adds up to the whole answer.
    c = serve(chat_folder(tmp_path))
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "tell me a story"}]
    whole = c.client.chat.completions.create(model=c.model, messages=msgs, max_tokens=15, temperature=0)
    parts = list(c.client.chat.completions.create(model=c.model, messages=msgs, max_tokens=15, temperature=0,
                                                  stream=True))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == whole.choices[0].message.content
    assert parts[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def chat_folder(tmp):
    """The Llama fixture with a ChatML chat template added to its tokenizer_config.json."""
    d = tmp / "llama-chat"
    shutil.copytree(LLAMA, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHATML
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def test_chat_equals_generate_over_the_template(serve, run_onyx, tmp_path):
    import jinja2
    from tokenizers import Tokenizer
    folder = chat_folder(tmp_path)
    s = serve(folder)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colors."},
            {"role": "assistant", "content": "red green blue"}, {"role": "user", "content": "And three more?"}]
    prompt = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(CHATML).render(
        messages=msgs, add_generation_prompt=True)
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(prompt, add_special_tokens=False).ids
    ref = generate(run_onyx, folder, ids=ids, max_new=14)
    r = s.client.chat.completions.create(model=s.model, messages=msgs, max_tokens=14, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == ref["text"]
    assert r.usage.prompt_tokens == len(ids)


def test_64_concurrent_streams_get_what_they_get_alone(serve):
    rng = rng_and_seed()
    s = serve(LLAMA, "--max-batch", 8, "--prefill-chunk", 16)
    jobs = []
    for i in range(64):
        job = {"prompt": random_ids(rng, int(rng.integers(1, 60))), "max_tokens": int(rng.integers(1, 30))}
        if i % 3 == 0:  # sampled, seeded: the draw must not depend on who else is in the batch
            job.update(temperature=0.9, top_p=0.95, seed=int(rng.integers(0, 2**31)))
        else:
            job.update(temperature=0)
        if i % 5 == 0:
            job["stop"] = ["e"]
        jobs.append(job)

    def alone(job):
        r = s.client.completions.create(model=s.model, **job)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens

    expected = [alone(j) for j in jobs]

    def streamed(job):
        text, finish, usage = "", None, None
        for c in s.client.completions.create(model=s.model, stream=True, stream_options={"include_usage": True},
                                             **job):
            if c.choices:
                text += c.choices[0].text
                finish = c.choices[0].finish_reason or finish
            if c.usage:
                usage = c.usage.completion_tokens
        return text, finish, usage

    with cf.ThreadPoolExecutor(64) as pool:
        got = list(pool.map(streamed, jobs))
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g == e, (i, jobs[i], e, g)
    assert s.metric("onyx_sequences_running") == 0
    occupancy = s.get("/metrics")[1]
    # Some decode steps ran several sequences at once.
    counts = [float(m) for m in re.findall(r'onyx_decode_batch_rows_bucket\{le="1"\} (\S+)', occupancy)]
    total = s.metric("onyx_decode_batch_rows_count")
    assert counts and total > counts[0], occupancy


def long_context_folder(tmp):
    """The Llama fixture with a context of 8192 (its rotary embedding takes any position): a
    generation long enough to outlast a client."""
    d = tmp / "llama-8k"
    shutil.copytree(LLAMA, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["max_position_embeddings"] = 8192
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_disconnect_frees_the_slot(serve, tmp_path):
    s = serve(long_context_folder(tmp_path), "--max-batch", 2)
    body = json.dumps({"model": s.model, "prompt": [5, 6, 7], "max_tokens": 4000, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data:") < 2:
        piece = sock.recv(4096)
        assert piece, got
        got += piece
    deadline = time.time() + 30
    while s.metric("onyx_sequences_running") != 1:  # the gauge follows the engine's step
        assert time.time() < deadline, s.get("/metrics")[1]
        time.sleep(0.01)
    sock.close()
    deadline = time.time() + 30
    while s.metric('onyx_sequences_finished_total{reason="cancelled"}') < 1:
        assert time.time() < deadline, s.get("/metrics")[1]
        time.sleep(0.05)
    assert s.metric("onyx_sequences_running") == 0
    assert s.metric("onyx_generation_tokens_total") < 4000
    # The slot serves the next request.
    r = s.client.completions.create(model=s.model, prompt=[5, 6], max_tokens=3, temperature=0)
    assert r.usage.completion_tokens >= 1


def test_bad_requests_get_400s_naming_the_field(serve):
    s = serve(LLAMA)
    ok = {"model": s.model, "prompt": "hello", "max_tokens": 2}
    cases = [
        (b"{not json", 400, None),
        ([1, 2], 400, None),
        ({**ok, "temperature": "hot"}, 400, "temperature"),
        ({**ok, "temperature": 3}, 400, "temperature"),
        ({**ok, "top_p": 0}, 400, "top_p"),
        ({**ok, "max_tokens": 0}, 400, "max_tokens"),
        ({**ok, "max_tokens": 1000}, 400, "max_tokens"),
        ({**ok, "n": 2}, 400, "n"),
        ({**ok, "stop": [1]}, 400, "stop"),
        ({**ok, "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({**ok, "max_tokenz": 5}, 400, "max_tokenz"),
        ({**ok, "prompt": list(range(300))}, 400, "prompt"),
        ({**ok, "prompt": [5000]}, 400, None),
        ({**ok, "prompt": 7}, 400, "prompt"),
        ({**ok, "logprobs": 2}, 400, "logprobs"),
        ({k: v for k, v in ok.items() if k != "model"}, 400, "model"),
        ({**ok, "model": "gpt-17"}, 404, "model"),
    ]
    for body, status, param in cases:
        code, text = s.post("/v1/completions", body)
        assert code == status, (body, code, text)
        err = json.loads(text)["error"]
        assert err["message"], text
        if param:
            assert err["param"] == param, (body, text)
    code, text = s.post("/v1/chat/completions", {"model": s.model, "messages": [{"role": "wizard", "content": "x"}]})
    assert code == 400 and json.loads(text)["error"]["param"] == "messages[0].role", text
    code, text = s.post("/v1/chat/completions", {"model": s.model, "messages": [{"role": "user", "content": "x"}]})
    assert code == 400 and "chat template" in json.loads(text)["error"]["message"], text  # this folder has none
    assert s.request("GET", "/v2/nothing")[0] == 404
    assert s.get("/health")[0] == 200
    code, text = s.post("/v1/completions", ok)
    assert code == 200 and json.loads(text)["choices"][0]["text"] is not None


def test_overload_gets_429_and_the_rest_complete(serve):
    s = serve(LLAMA, "--max-batch", 1, "--max-queue", 1)

    def one(_):
        try:
            r = s.client.completions.create(model=s.model, prompt=[3, 4, 5], max_tokens=60, temperature=0)
            return r.usage.completion_tokens
        except openai.RateLimitError as e:
            assert "capacity" in str(e)
            return "429"

    with cf.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, range(12)))
    assert results.count("429") >= 1, results
    assert all(r == "429" or r >= 1 for r in results)
    assert s.metric("onyx_requests_rejected_total") == results.count("429")
    assert s.get("/health")[0] == 200


def test_prefix_reuse(serve):
    rng = rng_and_seed()
    for folder in (LLAMA, QWEN):
        s = serve(folder, "--max-batch", 2)
        ids = random_ids(rng, 40, 1000)
        first = s.client.completions.create(model=s.model, prompt=ids, max_tokens=8, temperature=0)
        again = s.client.completions.create(model=s.model, prompt=ids + [17, 18], max_tokens=8, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens >= 40, again.usage
        s2 = serve(folder, "--max-batch", 2)  # a fresh server: nothing cached
        fresh = s2.client.completions.create(model=s2.model, prompt=ids + [17, 18], max_tokens=8, temperature=0)
        assert fresh.usage.prompt_tokens_details.cached_tokens == 0
        assert again.choices[0].text == fresh.choices[0].text
        assert first.usage.prompt_tokens_details.cached_tokens == 0


def test_api_key(serve):
    s = serve(LLAMA, "--api-key", "sesame")
    body = {"model": s.model, "prompt": "hi", "max_tokens": 1}
    assert s.post("/v1/completions", body)[0] == 401
    assert s.post("/v1/completions", body, {"Authorization": "Bearer wrong"})[0] == 401
    assert s.post("/v1/completions", body, {"Authorization": "Bearer sesame"})[0] == 200
    assert s.get("/health")[0] == 200


def test_tensor_parallel_serves_what_one_rank_does(serve):
    """onyx serve --tensor-parallel 2 (two ranks, threads on the CPU): concurrent requests, greedy
    and seeded sampling, get what the whole model serves them alone; a request that fails on the
    ranks gets its error and the ranks serve on."""
    rng = rng_and_seed()
    one = serve(QWEN, "--max-batch", 4, "--prefill-chunk", 16)
    two = serve(QWEN, "--max-batch", 4, "--prefill-chunk", 16, "--tensor-parallel", 2)
    assert "2 tensor-parallel ranks (cpu to cpu)" in "".join(two.log), two.log
    jobs = []
    for i in range(16):
        job = {"prompt": random_ids(rng, int(rng.integers(1, 40)), 1000), "max_tokens": int(rng.integers(1, 20))}
        if i % 3 == 0:
            job.update(temperature=0.9, top_p=0.95, seed=int(rng.integers(0, 2**31)))
        else:
            job.update(temperature=0)
        jobs.append(job)

    def ask(s, job):
        r = s.client.completions.create(model=s.model, **job)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens

    expected = [ask(one, j) for j in jobs]
    with cf.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda j: ask(two, j), jobs))
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g == e, (i, jobs[i], e, g)
    code, body = two.post("/v1/completions", {"model": two.model, "prompt": [1, 99999], "max_tokens": 3})
    assert code == 400, (code, body)
    assert ask(two, jobs[1]) == expected[1]
