"""Speech recognition on the committed fixtures (tests/fixtures/speech): whisper-optimum (made by
tools/make_whisper_fixture.py), a tiny random-weight Whisper exported by Optimum, and
whisper-genai (tools/make_whisper_genai_fixture.py), the same model in onnxruntime-genai's form
made by its model builder (an encoder returning the cross-attention cache, one decoder with
MultiHeadAttention and int32 ids); two synthetic clips, against what transformers computed on
the model before export (reference.json, reference_logits.npy; the features are checked by
tests/unit/test_audio.cpp). The tests marked "both" run on both folders.

  test_greedy_tokens       (both) `onyx generate DIR --audio FILE [--language L] [--task T] --json`: the
                           decoder prompt transformers' generate builds (language given,
                           detected, translation) and the greedy tokens under its logit
                           processors (suppress_tokens, begin_suppress_tokens)
  test_detection_is_named  a detected language is printed, named as the model names it
  test_logits              (both) `--logits-out`: the first steps' logits equal transformers' (within
                           1e-4 of the largest), -inf exactly where the processors put it
  test_batch               (both) two clips in one request: each row equals its own run
  test_sampling            a seed reproduces a sampled transcription; top_k 1 equals greedy
  test_memory_report       (both) the encoder and decoder are leased under their names in one governor
  test_python              onyx.genai.Model(...).generate(audio=...): a path or samples, the
                           language given or detected, the same tokens as the CLI; both folder
                           forms (their cache forms named)
  test_errors              misuse named: audio to a text model, no audio to a speech model, an
                           unknown language or task, audio past the window, an unreadable file
  test_genai_folder        onnxruntime-genai's form: its cache form named, and folders missing
                           what onyx needs (generation_config.json, the audio settings, a model
                           file genai_config.json names) refused naming it
"""

import json
import shutil
import wave
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "speech" / "whisper-optimum"
GENAI = REPO_ROOT / "tests" / "fixtures" / "speech" / "whisper-genai"
BOTH = pytest.mark.parametrize("folder", [FIXTURE, GENAI], ids=["optimum", "genai"])


@lru_cache(maxsize=None)
def reference(folder=FIXTURE):
    return json.loads((folder / "reference.json").read_text())


def case_args(case, folder=FIXTURE):
    args = ["--audio", folder / case["audio"]]
    if case["language"]:
        args += ["--language", case["language"]]
    if case["task"]:
        args += ["--task", case["task"]]
    return args


def generate_json(run_onyx, *args, folder=FIXTURE):
    r = run_onyx("generate", folder, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@BOTH
def test_greedy_tokens(run_onyx, folder):
    ref = reference(folder)
    wrong = []
    for case in ref["cases"]:
        out, _ = generate_json(run_onyx, *case_args(case, folder), "--greedy", "--max-new-tokens", ref["new_tokens"],
                               folder=folder)
        got = (out["prompt_ids"], out["generated_ids"], out["stop_reason"])
        want = (case["decoder_prompt"], case["generated_ids"], case["stop_reason"])
        if got != want:
            wrong.append(f"{case['name']}: onyx {got}\n   transformers {want}")
    assert not wrong, "\n".join(wrong)
    # The cases are not degenerate: both ends of a generation, more than one detected language,
    # and transcriptions that depend on the audio.
    assert {c["stop_reason"] for c in ref["cases"]} == {"eos", "max_new_tokens"}
    detected = {c["decoder_prompt"][1] for c in ref["cases"] if not c["language"]}
    assert len(detected) == 2, detected
    by = {c["name"]: c for c in ref["cases"]}
    assert by["en"]["generated_ids"][:4] != by["en_short"]["generated_ids"][:4]


def test_detection_is_named(run_onyx):
    ref = reference()
    lang_to_id = json.loads((FIXTURE / "generation_config.json").read_text())["lang_to_id"]
    names = {v: k for k, v in lang_to_id.items()}
    for case in ref["cases"]:
        if case["language"]:
            continue
        r = run_onyx("generate", FIXTURE, *case_args(case), "--greedy", "--max-new-tokens", 2)
        assert r.returncode == 0, r.stderr
        assert f"language detected: {names[case['decoder_prompt'][1]]}" in r.stderr, r.stderr


@BOTH
def test_logits(run_onyx, tmp_path, folder):
    ref = reference(folder)
    want_all = np.load(folder / "reference_logits.npy")  # -inf saved as -1e30
    worst = 0.0
    for i, case in enumerate(ref["cases"]):
        path = tmp_path / f"{i}.npy"
        out, _ = generate_json(run_onyx, *case_args(case, folder), "--greedy", "--max-new-tokens", ref["logit_steps"],
                               "--logits-out", path, folder=folder)
        got = np.load(path)
        n = len(out["generated_ids"])
        want = want_all[i, :n]
        assert got.shape == want.shape
        masked = want <= -1e29
        assert np.array_equal(np.isneginf(got), masked), f"{case['name']}: suppressed ids differ"
        # The first step suppresses the begin ids too, the later ones only suppress_tokens.
        assert masked[0].sum() == len(set(ref["suppress_tokens"]) | set(ref["begin_suppress_tokens"]))
        if n > 1:
            assert masked[1].sum() == len(ref["suppress_tokens"])
        diff = np.abs(got[~masked] - want[~masked]).max()
        worst = max(worst, diff / np.abs(want[~masked]).max())
    print(f"largest logit difference {worst:.2e} of the largest logit")
    assert worst < 1e-4


@BOTH
def test_batch(run_onyx, folder):
    ref = reference(folder)
    by = {c["name"]: c for c in ref["cases"]}
    b = ref["batch"]
    args = []
    for a in b["audio"]:
        args += ["--audio", folder / a]
    out, _ = generate_json(run_onyx, *args, "--language", b["language"], "--greedy", "--max-new-tokens",
                           ref["new_tokens"], folder=folder)
    for row, name in zip(out["sequences"], b["cases"]):
        assert row["prompt_ids"] == by[name]["decoder_prompt"]
        assert row["generated_ids"] == by[name]["generated_ids"], name


def test_sampling(run_onyx):
    ref = reference()
    case = ref["cases"][0]
    greedy, _ = generate_json(run_onyx, *case_args(case), "--greedy", "--max-new-tokens", 10)
    top1, _ = generate_json(run_onyx, *case_args(case), "--top-k", 1, "--max-new-tokens", 10)
    assert top1["generated_ids"] == greedy["generated_ids"]
    runs = [generate_json(run_onyx, *case_args(case), "--temperature", 1.5, "--top-k", 0, "--seed", s,
                          "--max-new-tokens", 10)[0]["generated_ids"] for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != greedy["generated_ids"] or runs[2] != greedy["generated_ids"]
    # No sampled token is one the processors suppress.
    never = set(ref["suppress_tokens"])
    assert not never & {t for r in runs for t in r}
    assert not set(ref["begin_suppress_tokens"]) & {r[0] for r in runs}


@BOTH
def test_memory_report(run_onyx, folder):
    out, _ = generate_json(run_onyx, "--audio", folder / "tones.wav", "--language", "en", "--greedy",
                           "--max-new-tokens", 3, "--memory-report", folder=folder)
    comps = {c["name"]: c for c in out["components"]}
    assert set(comps) == {"encoder", "decoder"}
    assert comps["encoder"]["weight_bytes"] > 0 and comps["decoder"]["kv_bytes"] > 0
    # The encoder ran at its live set: its arena is what its busiest step holds, far below the
    # sum of its intermediates.
    e = comps["encoder"]
    assert e["arena_bytes"] == e["arena_lower_bound"] and e["arena_bytes"] < e["arena_no_reuse"]
    assert "encoder weights" in out["memory_report"] and "decoder kv cache" in out["memory_report"]


def test_python(run_python_checks):
    """onyx.genai on the speech fixture, in a process of its own (conftest's run_python_checks)."""
    run_python_checks("test_speech", "python_api_checks")


def python_api_checks(og):
    ref = reference()
    by = {c["name"]: c for c in ref["cases"]}
    m = og.Model(str(FIXTURE))
    assert m.is_speech and m.is_encoder_decoder
    # A path, the language given.
    g = m.generate(audio=FIXTURE / "tones.wav", language="en", max_new_tokens=ref["new_tokens"])
    "".join(g)
    assert g.result["prompt_ids"] == by["en"]["decoder_prompt"]
    assert g.result["generated_ids"] == by["en"]["generated_ids"]
    assert g.language is None
    # Samples (the clip's, as float32 at 16 kHz), the language detected.
    with wave.open(str(FIXTURE / "short.wav")) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    g = m.generate(audio=samples, max_new_tokens=ref["new_tokens"])
    "".join(g)
    assert g.result["prompt_ids"] == by["detect_short"]["decoder_prompt"]
    assert g.result["generated_ids"] == by["detect_short"]["generated_ids"]
    assert g.language == "<|en|>"
    # Misuse: no audio, a prompt beside it, audio of the wrong kind.
    for kwargs, words in (({}, "speech model"), ({"prompt": "hi", "audio": samples}, "without a prompt")):
        try:
            m.generate(**kwargs)
        except Exception as e:  # noqa: BLE001
            assert words in str(e), e
        else:
            raise AssertionError(f"no error for {kwargs}")
    try:
        m.generate(audio=np.zeros((2, 100), np.float32))
    except Exception as e:  # noqa: BLE001
        assert "1-D float32 samples at 16000 Hz" in str(e), e
    else:
        raise AssertionError("no error for 2-D samples")
    # onnxruntime-genai's form of the same model through the same API: the same tokens.
    genai = og.Model(str(GENAI))
    assert genai.is_speech and genai.is_encoder_decoder and genai.cache_mode == "growing"
    g = genai.generate(audio=samples, max_new_tokens=ref["new_tokens"])
    "".join(g)
    assert g.result["prompt_ids"] == by["detect_short"]["decoder_prompt"]
    assert g.result["generated_ids"] == by["detect_short"]["generated_ids"]
    assert m.cache_mode == "static"


def write_wav(path, seconds, rate=16000):
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x.tobytes())


def test_errors(run_onyx, tmp_path):
    def fails(*args, folder=FIXTURE):
        r = run_onyx("generate", folder, *args)
        assert r.returncode != 0, r.stdout
        return r.stderr

    text_model = REPO_ROOT / "tests" / "fixtures" / "seq2seq" / "t5-optimum"
    err = fails("--audio", FIXTURE / "tones.wav", folder=text_model)
    assert "is not a speech model" in err, err
    err = fails("--prompt-ids", "1 2 6 10")
    assert "is a speech model" in err and "--audio" in err, err
    err = fails("--audio", FIXTURE / "tones.wav", "--language", "xx")
    assert "unknown language 'xx'" in err and "<|en|>" in err and "<|fr|>" in err, err
    err = fails("--audio", FIXTURE / "tones.wav", "--language", "en", "--task", "summarize")
    assert "unknown task 'summarize'" in err and "transcribe" in err, err
    long_wav = tmp_path / "long.wav"
    write_wav(long_wav, 31)
    err = fails("--audio", long_wav, "--language", "en")
    assert str(long_wav) in err and "31 s long, longer than the model's window of 30 s" in err, err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really a wave file")
    err = fails("--audio", bad, "--language", "en")
    assert str(bad) in err and "could not be read" in err, err
    err = fails("--audio", tmp_path / "missing.flac")
    assert "missing.flac" in err and "does not exist" in err, err
    err = fails("--prompt", "hello", "--language", "en", folder=text_model)
    assert "--language and --task go with --audio" in err, err
    # A folder without its feature extractor's settings.
    d = tmp_path / "no_preprocessor"
    shutil.copytree(FIXTURE, d)
    (d / "preprocessor_config.json").unlink()
    err = fails("--audio", FIXTURE / "tones.wav", folder=d)
    assert "preprocessor_config.json" in err and "is missing" in err, err
    # Suppressed ids outside the vocabulary.
    d = tmp_path / "bad_suppress"
    shutil.copytree(FIXTURE, d)
    g = json.loads((d / "generation_config.json").read_text())
    g["suppress_tokens"] = [5, 100000]
    (d / "generation_config.json").write_text(json.dumps(g))
    err = fails("--audio", FIXTURE / "tones.wav", folder=d)
    assert "suppress_tokens holds id 100000" in err, err


def test_genai_folder(run_onyx, tmp_path):
    # The builder's decoder keeps its cache in MultiHeadAttention: the growing form, and why.
    out, _ = generate_json(run_onyx, "--audio", GENAI / "tones.wav", "--language", "en", "--greedy",
                           "--max-new-tokens", 3, folder=GENAI)
    assert out["stats"]["kv_cache"] == "growing", out["stats"]
    assert "MultiHeadAttention" in out["stats"]["kv_cache_note"], out["stats"]

    def fails(folder):
        r = run_onyx("generate", folder, "--audio", GENAI / "tones.wav", "--language", "en")
        assert r.returncode != 0, r.stdout
        return r.stderr

    def without(name):
        d = tmp_path / f"no_{name}"
        shutil.copytree(GENAI, d)
        (d / name).unlink()
        return d

    err = fails(without("generation_config.json"))
    assert "has no generation_config.json" in err and "builder does not copy it" in err, err
    err = fails(without("audio_processor_config.json"))
    assert "audio_processor_config.json" in err and "is missing" in err, err
    err = fails(without("decoder.onnx"))
    assert "decoder.onnx" in err and "does not exist" in err, err
    d = tmp_path / "not_whisper"
    shutil.copytree(GENAI, d)
    cfg = json.loads((d / "genai_config.json").read_text())
    cfg["model"]["type"] = "t5"
    (d / "genai_config.json").write_text(json.dumps(cfg))
    err = fails(d)
    assert "model.type is 't5'" in err, err
