"""Encoder-decoder generation on the committed fixtures (tests/fixtures/seq2seq, made by
tools/make_seq2seq_fixtures.py): tiny random-weight T5 and BART exported by Optimum, against
what transformers' generate gave on the same models before export (reference.json,
reference_logits.npy).

  test_greedy_tokens          `onyx generate DIR --prompt-ids ... --json`: the greedy tokens
                              equal transformers', for every prompt, on every fixture
  test_text_prompt            `--prompt TEXT`: onyx's tokenizer gives the encoder transformers' ids
  test_logits                 `--logits-out FILE`: the first steps' logits equal transformers'
                              (within 1e-4 of the largest)
  test_batch                  a batch of prompts of different lengths (the encoder's rows padded
                              and masked): each row equals transformers' batched generate
  test_repetition_penalty     greedy with repetition_penalty 1.3: the penalty reads the decoder's
                              ids (its start token and what it generated), as transformers'
  test_sampling               top_k 1 sampling equals greedy; a seed reproduces a sampled run
  test_memory_report          --memory-report lists each component's weights, arena and KV cache,
                              leased under its own name in one governor
  test_budget_refused         a budget below the weights is refused at load, naming the components;
                              one that admits them, by the governor when the encoder's arena asks
  test_cuda_on_cpu_build      --device cuda:0 where it cannot be had fails with the device error
  test_python                 onyx.genai.Model on a pipeline folder: text, tokens, logits,
                              components, and onnxruntime-genai's Generator loop
  test_folder_errors          folders onyx cannot use, and ids outside the vocabulary, are errors naming them
  test_forced_bos             forced_bos_token_id: the first token forced, the next as onnxruntime makes it
  test_static_cache           the decoders' steps (a merged decoder's then_branch too) are rewritten
                              to a fixed-capacity cache (kept only when its logits match the exported
                              step's); --verify-cache agrees step by step; a cache that grows
                              mid-request gives the same tokens
"""

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "seq2seq"
FIXTURES = sorted(d.name for d in FIXTURES_DIR.iterdir() if (d / "reference.json").is_file())
TIMEOUT_S = 120


@lru_cache(maxsize=None)
def reference(name):
    return json.loads((FIXTURES_DIR / name / "reference.json").read_text())


def test_fixtures_present():
    assert {"t5-optimum", "bart-optimum", "t5-optimum-merged"} <= set(FIXTURES), FIXTURES


def generate_json(run_onyx, name, *args):
    r = run_onyx("generate", FIXTURES_DIR / name, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ids_arg(ids):
    return " ".join(map(str, ids))


@pytest.mark.parametrize("name", FIXTURES)
def test_greedy_tokens(run_onyx, name):
    ref = reference(name)
    wrong = []
    for case in ref["cases"]:
        out = generate_json(run_onyx, name, "--prompt-ids", ids_arg(case["prompt_ids"]), "--greedy",
                            "--max-new-tokens", ref["new_tokens"])
        if out["generated_ids"] != case["generated_ids"]:
            wrong.append((case["name"], out["generated_ids"], case["generated_ids"]))
        else:
            assert out["stop_reason"] == case["stop_reason"], case["name"]
    assert not wrong, "\n".join(f"{n}: onyx {o}\n   transformers {t}" for n, o, t in wrong)
    # The cases are not degenerate: some stop at EOS, some run to the limit.
    reasons = {c["stop_reason"] for c in ref["cases"]}
    assert reasons == {"eos", "max_new_tokens"}, reasons


@pytest.mark.parametrize("name", FIXTURES)
def test_text_prompt(run_onyx, name):
    ref = reference(name)
    for case in ref["cases"][:4]:
        out = generate_json(run_onyx, name, "--prompt", case["prompt"], "--greedy", "--max-new-tokens",
                            ref["new_tokens"])
        assert out["prompt_ids"] == case["prompt_ids"], case["name"]
        assert out["generated_ids"] == case["generated_ids"], case["name"]


@pytest.mark.parametrize("name", FIXTURES)
def test_batch(run_onyx, name, tmp_path):
    ref = reference(name)
    b = ref["batch"]
    by_name = {c["name"]: c for c in ref["cases"]}
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": by_name[n]["prompt_ids"]}) + "\n" for n in b["names"]))
    out = generate_json(run_onyx, name, "--prompts-file", prompts, "--greedy", "--max-new-tokens",
                        ref["new_tokens"])
    eos = ref["eos_token_id"]
    for n, seq, row in zip(b["names"], b["decoder_sequences"], out["sequences"]):
        # transformers pads a finished row with the pad id until the batch ends: cut at EOS.
        want = seq[1:]
        if eos in want:
            want = want[:want.index(eos) + 1]
        assert row["generated_ids"] == want, n


@pytest.mark.parametrize("name", FIXTURES)
def test_repetition_penalty(run_onyx, name):
    ref = reference(name)
    by_name = {c["name"]: c for c in ref["cases"]}
    changed = 0
    for case in ref["repetition_penalty"]:
        out = generate_json(run_onyx, name, "--prompt-ids", ids_arg(by_name[case["name"]]["prompt_ids"]),
                            "--greedy", "--repetition-penalty", case["repetition_penalty"],
                            "--max-new-tokens", ref["new_tokens"])
        assert out["generated_ids"] == case["decoder_sequence"][1:], case["name"]
        changed += case["decoder_sequence"][1:] != by_name[case["name"]]["generated_ids"]
    assert changed, "the penalty changed no generation: the case tests nothing"


@pytest.mark.parametrize("name", ["t5-optimum", "bart-optimum"])
def test_sampling(run_onyx, name):
    ref = reference(name)
    case = ref["cases"][2]
    ids = ids_arg(case["prompt_ids"])
    top1 = generate_json(run_onyx, name, "--prompt-ids", ids, "--top-k", "1", "--seed", "7", "--max-new-tokens",
                         ref["new_tokens"])
    assert top1["generated_ids"] == case["generated_ids"]
    runs = [generate_json(run_onyx, name, "--prompt-ids", ids, "--temperature", "1.5", "--seed", "11",
                          "--max-new-tokens", ref["new_tokens"])["generated_ids"] for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] != case["generated_ids"]


def test_memory_report(run_onyx):
    name = "t5-optimum"
    ref = reference(name)
    out = generate_json(run_onyx, name, "--prompt-ids", ids_arg(ref["cases"][-1]["prompt_ids"]), "--greedy",
                        "--max-new-tokens", "8", "--memory-report")
    report = out["memory_report"]
    for holder in ("encoder weights", "encoder values", "decoder weights", "decoder values"):
        assert f"  {holder}: " in report, report
    assert "on cpu" in report, report
    # The encoder runs once a request: by the end its arena and output are back.
    assert "  encoder values: 0 B (0 B)" in report, report
    comps = {c["name"]: c for c in out["components"]}
    assert set(comps) == {"encoder", "decoder"}
    folder = FIXTURES_DIR / name
    import onnx
    def weights(f):
        m = onnx.load(str(folder / f))
        return [onnx.numpy_helper.to_array(t) for t in m.graph.initializer]
    first, step = weights("decoder_model.onnx"), weights("decoder_with_past_model.onnx")
    # The steps' file repeats the first run's weights (under other names); onyx holds one copy.
    seen = {(a.dtype.str, a.shape, a.tobytes()) for a in first}
    own = [a for a in step if (a.dtype.str, a.shape, a.tobytes()) not in seen]
    assert sum(a.nbytes for a in own) < sum(a.nbytes for a in step) / 10
    # Constant folding at load turns a few computed constants into weights (a few KiB here).
    def near(held, file_bytes):
        return file_bytes <= held <= file_bytes + 16384
    assert near(comps["encoder"]["weight_bytes"], sum(a.nbytes for a in weights("encoder_model.onnx"))), comps
    assert near(comps["decoder"]["weight_bytes"], sum(a.nbytes for a in first) + sum(a.nbytes for a in own)), comps
    enc = comps["encoder"]
    assert 0 < enc["arena_lower_bound"] <= enc["arena_bytes"] <= 1.25 * enc["arena_lower_bound"], enc
    # Planned, the encoder holds a fraction of what its intermediates would take each on its own.
    print(f"encoder arena {enc['arena_bytes']} B, live set {enc['arena_lower_bound']} B, all intermediates "
          f"{enc['arena_no_reuse']} B")
    assert enc["arena_bytes"] <= enc["arena_no_reuse"] / 2, enc
    # The KV cache held at the end: per layer, self-attention over the fixed capacity (the start
    # token and the 8 new tokens asked for, by blocks of 64 positions) and cross-attention over
    # the prompt.
    assert out["stats"]["kv_cache"] == "static", out["stats"]["kv_cache_note"]
    cfg = json.loads((folder / "config.json").read_text())
    layers, heads, d_kv = cfg["num_decoder_layers"], cfg["num_heads"], cfg["d_kv"]
    capacity = 64
    want = layers * 2 * heads * d_kv * 4 * (capacity + len(ref["cases"][-1]["prompt_ids"]))
    assert comps["decoder"]["kv_bytes"] == want, (comps["decoder"], want)


def test_budget_refused(run_onyx):
    name = "bart-optimum"
    r = run_onyx("generate", FIXTURES_DIR / name, "--prompt-ids", "5 6 7", "--memory-budget", "4096")
    assert r.returncode != 0
    assert "does not fit the memory budget of cpu" in r.stderr, r.stderr
    assert "encoder weights:" in r.stderr and "decoder weights:" in r.stderr, r.stderr
    assert "nothing was placed" in r.stderr, r.stderr
    # Weights that fit, and no room for the encoder's arena: refused when it asks, with the holders.
    import re
    weights = sum(int(b) for b in re.findall(r"weights: [^(]*\((\d+) B\)", r.stderr))
    r = run_onyx("generate", FIXTURES_DIR / name, "--prompt-ids", "5 6 7", "--memory-budget", weights + 100)
    assert r.returncode != 0
    assert "the encoder: memory governor of cpu: encoder values asked for" in r.stderr, r.stderr
    assert "nothing was placed" not in r.stderr
    assert "decoder kv cache: 0 B" in r.stderr and "encoder weights:" in r.stderr, r.stderr


def test_cuda_on_cpu_build(run_onyx):
    """On a machine where cuda:0 cannot be had (a build without CUDA, or no GPU) the one device
    decision fails for the whole pipeline with the device error, before anything is placed (a
    GPU is checked by the GPU suite)."""
    r = run_onyx("generate", FIXTURES_DIR / "t5-optimum", "--prompt-ids", "5 6 7", "--device", "cuda:0")
    if r.returncode == 0:
        pytest.skip("cuda:0 exists here")
    assert "loading the encoder-decoder pipeline" in r.stderr, r.stderr
    # The reason after the colon depends on the machine: no CUDA backend in this build, no
    # device, or a driver the runtime cannot use.
    assert "device 'cuda:0' is not available: " in r.stderr, r.stderr
    assert ("this build of onyx has no CUDA backend" in r.stderr or "no CUDA device found" in r.stderr
            or "no usable CUDA device" in r.stderr), r.stderr
    assert "available: cpu" in r.stderr, r.stderr


@pytest.mark.parametrize("name", FIXTURES)
def test_logits(run_onyx, name, tmp_path):
    ref = reference(name)
    want = np.load(FIXTURES_DIR / name / "reference_logits.npy")
    worst = 0.0
    for i, case in enumerate(ref["cases"]):
        path = tmp_path / f"{i}.npy"
        out = generate_json(run_onyx, name, "--prompt-ids", ids_arg(case["prompt_ids"]), "--greedy",
                            "--max-new-tokens", ref["logit_steps"], "--logits-out", path)
        got = np.load(path)
        n = len(out["generated_ids"])
        assert got.shape == (n, want.shape[2])
        diff = np.abs(got - want[i, :n]).max()
        scale = np.abs(want[i, :n]).max()
        worst = max(worst, diff / scale)
    print(f"{name}: largest logit difference {worst:.2e} of the largest logit")
    assert worst < 1e-4


def test_python(run_python_checks):
    """onyx.genai on a pipeline folder, in a process of its own (conftest's run_python_checks)."""
    run_python_checks("test_seq2seq", "python_api_checks", timeout=TIMEOUT_S)


def python_api_checks(og):
    name = "bart-optimum"
    ref = reference(name)
    m = og.Model(str(FIXTURES_DIR / name))
    assert m.is_encoder_decoder and m.device == "cpu"
    case = ref["cases"][3]
    gen = m.generate(case["prompt"], max_new_tokens=ref["new_tokens"], return_logits=True)
    text = "".join(gen)
    assert gen.result["prompt_ids"] == case["prompt_ids"]
    assert gen.result["generated_ids"] == case["generated_ids"]
    want = np.load(FIXTURES_DIR / name / "reference_logits.npy")[3]
    got = gen.result["logits"][:want.shape[0]]
    assert np.abs(got - want[:len(got)]).max() < 1e-4 * np.abs(want).max()
    tok = og.Tokenizer(m)
    assert text == tok.decode(case["generated_ids"])
    comps = {c["name"]: c for c in m.components()}
    assert set(comps) == {"encoder", "decoder"} and comps["decoder"]["kv_bytes"] > 0
    # onnxruntime-genai's loop: append_tokens (the encoder's prompt), then token by token; the
    # sequence is the decoder's.
    params = og.GeneratorParams(m)
    params.set_search_options(max_length=ref["new_tokens"] + 1)
    g = og.Generator(m, params)
    g.append_tokens(np.array(case["prompt_ids"], dtype=np.int32))
    while not g.is_done():
        g.generate_next_token()
    seq = list(g.get_sequence(0))
    eos = ref["eos_token_id"]
    want_seq = case["decoder_sequence"]
    if want_seq[-1] == eos:
        want_seq = want_seq[:-1]
    assert seq == want_seq


def test_folder_errors(run_onyx, tmp_path):
    import shutil
    src = FIXTURES_DIR / "t5-optimum"
    # No decoder: named, with the export that makes one.
    d = tmp_path / "no_decoder"
    d.mkdir()
    for f in ("encoder_model.onnx", "config.json", "generation_config.json", "tokenizer.json"):
        shutil.copy(src / f, d / f)
    r = run_onyx("generate", d, "--prompt-ids", "5 6 1")
    assert r.returncode != 0
    assert f"model folder '{d}'" in r.stderr and "decoder_with_past_model.onnx" in r.stderr, r.stderr
    assert "text2text-generation-with-past" in r.stderr, r.stderr
    # No start token in either config.
    d = tmp_path / "no_start"
    shutil.copytree(src, d)
    for f in ("config.json", "generation_config.json"):
        j = json.loads((d / f).read_text())
        j.pop("decoder_start_token_id", None)
        (d / f).write_text(json.dumps(j))
    r = run_onyx("generate", d, "--prompt-ids", "5 6 1")
    assert r.returncode != 0 and "decoder_start_token_id" in r.stderr, r.stderr
    # A token id outside the vocabulary: the request is refused, naming it.
    r = run_onyx("generate", src, "--prompt-ids", "5 100000 1")
    assert r.returncode != 0 and "token id 100000 is outside the vocabulary" in r.stderr, r.stderr


def test_forced_bos(run_onyx, tmp_path):
    """forced_bos_token_id (BART's summarisers set it): the first generated token is that id, and
    the decoder goes on from it (its second token is what the decoder makes from [start, id])."""
    import shutil
    src = FIXTURES_DIR / "bart-optimum"
    d = tmp_path / "forced"
    shutil.copytree(src, d)
    forced = 42
    j = json.loads((d / "generation_config.json").read_text())
    j["forced_bos_token_id"] = forced
    (d / "generation_config.json").write_text(json.dumps(j))
    case = reference("bart-optimum")["cases"][2]
    out = generate_json(run_onyx, d, "--prompt-ids", ids_arg(case["prompt_ids"]), "--greedy", "--max-new-tokens", 4)
    assert out["generated_ids"][0] == forced and out["generated_ids"][0] != case["generated_ids"][0]
    assert len(out["generated_ids"]) == 4
    # The second token, by onnxruntime: decoder_model.onnx over [start, forced] at once.
    import onnxruntime as ort
    ids = np.array([case["prompt_ids"]], np.int64)
    mask = np.ones_like(ids)
    hidden = ort.InferenceSession(str(src / "encoder_model.onnx")).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    dec = ort.InferenceSession(str(src / "decoder_model.onnx"))
    start = reference("bart-optimum")["decoder_start_token_id"]
    logits = dec.run(["logits"], {"input_ids": np.array([[start, forced]], np.int64),
                                  "encoder_attention_mask": mask, "encoder_hidden_states": hidden})[0]
    assert out["generated_ids"][1] == int(logits[0, -1].argmax())


@pytest.mark.parametrize("name", FIXTURES)
def test_static_cache(run_onyx, name):
    prompt = ("--prompt", "hello world")  # a prompt these fixtures do not end before 100 tokens
    out = generate_json(run_onyx, name, *prompt, "--greedy", "--max-new-tokens", "100")
    assert out["stats"]["kv_cache"] == "static", out["stats"]["kv_cache_note"]
    # Teacher-forced against the growing cache (the exported step graph), 70 steps.
    r = run_onyx("generate", FIXTURES_DIR / name, *prompt, "--verify-cache", "70")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kv cache: static" in r.stdout, r.stdout
    # A cache of one block (64 positions) grows by a block past its capacity: same tokens.
    small = generate_json(run_onyx, name, *prompt, "--greedy", "--max-new-tokens", "100",
                          "--kv-capacity", "1")
    assert len(out["generated_ids"]) == 100
    assert small["stats"]["kv_cache_grows"] == 1 and out["stats"]["kv_cache_grows"] == 0
    assert small["generated_ids"] == out["generated_ids"]
