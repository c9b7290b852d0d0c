"""onyx generate against a greedy loop over onnxruntime, on the generated Llama-style decoder
(present = Concat(past, new): onyx rewrites it to a static cache), in a model folder of the
Optimum kind (model.onnx and config.json, no genai_config.json).

The reference feeds onnxruntime the original decoder the Hugging Face way: prompts of a batch
padded on the left, positions counting each row's own tokens (pads at 1), the past growing by
one position per step. Fresh random prompts each run; the seed is printed.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

TOOLS_DIR = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS_DIR not in sys.path:
    sys.path.insert(0, TOOLS_DIR)
import gen_models  # noqa: E402

C = gen_models.LLAMA
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def folder(models_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("llama_folder")
    shutil.copy(models_dir / "llama_layer.onnx", d / "model.onnx")
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": C["layers"], "num_attention_heads": C["heads"],
        "num_key_value_heads": C["kv_heads"], "hidden_size": C["hidden"], "vocab_size": C["vocab"],
        "max_position_embeddings": C["max_pos"], "bos_token_id": 1, "eos_token_id": 2}))
    return d


def rng_and_seed():
    seed = int(os.environ.get("ONYX_PARITY_SEED", np.random.SeedSequence().entropy)) % (2**32)
    print(f"\ngenerate seed: {seed}  (rerun with ONYX_PARITY_SEED={seed})")
    return np.random.default_rng(seed), seed


def reference(model_path, prompts, new_tokens, eos, presence=0.0, frequency=0.0):
    """Greedy generation over onnxruntime with a growing past, left-padded batch; with OpenAI's
    penalties (in float64) on each row's generated tokens: logit - frequency * count -
    presence * (count > 0)."""
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = np.zeros((B, L), np.int64)
    mask = np.zeros((B, L), np.int64)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = p
        mask[b, L - len(p):] = 1
    pos = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
    past = {f"past_key_values.{i}.{kv}": np.zeros((B, C["kv_heads"], 0, C["head_dim"]), np.float32)
            for i in range(C["layers"]) for kv in ("key", "value")}
    out = [[] for _ in prompts]
    done = [False] * B
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, **past}
    for _ in range(new_tokens):
        res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        logits = res["logits"][:, -1, :].astype(np.float64)
        for b in range(B):
            counts = np.bincount(np.asarray(out[b], np.int64), minlength=logits.shape[1]).astype(np.float64)
            logits[b] -= frequency * counts + presence * (counts > 0)
        nxt = logits.argmax(-1)
        for b in range(B):
            if not done[b]:
                out[b].append(int(nxt[b]))
                done[b] = int(nxt[b]) == eos
        if all(done):
            break
        mask = np.concatenate([mask, np.ones((B, 1), np.int64)], axis=1)
        pos = pos[:, -1:] + 1
        feeds = {"input_ids": nxt.reshape(B, 1).astype(np.int64), "attention_mask": mask, "position_ids": pos}
        for i in range(C["layers"]):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = res[f"present.{i}.{kv}"]
    return out


def onyx_generate(run_onyx, folder, *args):
    r = run_onyx("generate", folder, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_greedy_tokens_equal_onnxruntime_one_prompt_at_a_time(run_onyx, folder):
    rng, seed = rng_and_seed()
    for _ in range(3):
        prompt = [int(x) for x in rng.integers(3, C["vocab"], int(rng.integers(1, 12)))]
        got = onyx_generate(run_onyx, folder, "--prompt-ids", " ".join(map(str, prompt)),
                            "--max-new-tokens", NEW_TOKENS)
        want = reference(folder / "model.onnx", [prompt], NEW_TOKENS, eos=2)[0]
        assert got["stats"]["kv_cache"] == "static", got["stats"]
        assert got["generated_ids"] == want, f"seed {seed}, prompt {prompt}"
        assert got["stop_reason"] == ("eos" if want and want[-1] == 2 else "max_new_tokens")


def test_greedy_batch_of_different_lengths_equals_onnxruntime(run_onyx, folder, tmp_path):
    rng, seed = rng_and_seed()
    prompts = [[int(x) for x in rng.integers(3, C["vocab"], n)] for n in (1, 7, 4, 12)]
    file = tmp_path / "prompts.jsonl"
    file.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    got = onyx_generate(run_onyx, folder, "--prompts-file", file, "--max-new-tokens", NEW_TOKENS)
    want = reference(folder / "model.onnx", prompts, NEW_TOKENS, eos=2)
    for b, p in enumerate(prompts):
        assert got["sequences"][b]["prompt_ids"] == p
        assert got["sequences"][b]["generated_ids"] == want[b], f"seed {seed}, row {b}"
    # Alone or in a batch, a prompt gets the same tokens.
    alone = onyx_generate(run_onyx, folder, "--prompt-ids", " ".join(map(str, prompts[1])),
                          "--max-new-tokens", NEW_TOKENS)
    assert alone["generated_ids"] == got["sequences"][1]["generated_ids"]


def test_static_cache_equals_the_exported_decoder_at_every_step(run_onyx, folder):
    # This decoder's context is 64 positions: 3 + 56 steps fill most of it (64 steps on a
    # longer context: test_genai_fixtures.py).
    r = run_onyx("generate", folder, "--prompt-ids", "5 9 17", "--verify-cache", 56)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kv cache: static" in r.stdout
    assert r.stdout.count("max relative logit difference") == 57


def test_sampling_is_reproducible_and_seeded(run_onyx, folder):
    args = ["--prompt-ids", "4 8 15 16", "--max-new-tokens", 16, "--temperature", "1.5", "--top-k", 20,
            "--top-p", "0.9"]
    a = onyx_generate(run_onyx, folder, *args, "--seed", 7)["generated_ids"]
    b = onyx_generate(run_onyx, folder, *args, "--seed", 7)["generated_ids"]
    c = onyx_generate(run_onyx, folder, *args, "--seed", 8)["generated_ids"]
    assert a == b
    assert a != c, "another seed should sample another sequence (16 tokens at temperature 1.5)"


def test_presence_and_frequency_penalties_equal_onnxruntime(run_onyx, folder, tmp_path):
    # Greedy with the penalties on a batch of different lengths (so different splits of each
    # row's history into prompt and generated tokens): the tokens of the reference loop that
    # subtracts the penalties from onnxruntime's logits, counting the generated tokens only.
    rng, seed = rng_and_seed()
    prompts = [[int(x) for x in rng.integers(3, C["vocab"], n)] for n in (2, 9, 5)]
    file = tmp_path / "prompts.jsonl"
    file.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    presence, frequency = 0.4, 0.7
    got = onyx_generate(run_onyx, folder, "--prompts-file", file, "--max-new-tokens", NEW_TOKENS,
                        "--presence-penalty", presence, "--frequency-penalty", frequency)
    want = reference(folder / "model.onnx", prompts, NEW_TOKENS, eos=2, presence=presence, frequency=frequency)
    plain = reference(folder / "model.onnx", prompts, NEW_TOKENS, eos=2)
    for b in range(len(prompts)):
        assert got["sequences"][b]["generated_ids"] == want[b], f"seed {seed}, row {b}"
    assert want != plain, f"seed {seed}: the penalties changed no token of the reference"
    # Presence alone, one prompt.
    got = onyx_generate(run_onyx, folder, "--prompt-ids", " ".join(map(str, prompts[1])),
                        "--max-new-tokens", NEW_TOKENS, "--presence-penalty", 1.5)
    assert got["generated_ids"] == reference(folder / "model.onnx", [prompts[1]], NEW_TOKENS, eos=2,
                                             presence=1.5)[0], f"seed {seed}"


def test_bad_folders_and_prompts_are_clear_errors(run_onyx, folder, tmp_path):
    r = run_onyx("generate", tmp_path, "--prompt-ids", "1")
    assert r.returncode == 1 and "no genai_config.json and no .onnx file" in r.stderr, r.stderr
    r = run_onyx("generate", folder, "--prompt-ids", f"1 {C['vocab'] + 5}")
    assert r.returncode == 1 and "outside the vocabulary" in r.stderr, r.stderr
    r = run_onyx("generate", folder, "--prompt", "hello")
    assert r.returncode == 1 and "no tokenizer.json" in r.stderr, r.stderr
    r = run_onyx("generate", folder, "--prompt-ids", "1", "--top-p", "1.5")
    assert r.returncode == 1 and "top_p must be in (0, 1]" in r.stderr, r.stderr
    for flag in ("--presence-penalty", "--frequency-penalty"):
        r = run_onyx("generate", folder, "--prompt-ids", "1", flag, "2.5")
        name = flag[2:].replace("-", "_")
        assert r.returncode == 1 and f"{name} must be in [-2, 2], got 2.5" in r.stderr, r.stderr
