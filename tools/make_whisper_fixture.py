#!/usr/bin/env python3
"""Makes the speech fixture tests/fixtures/speech/whisper-optimum (see tests/fixtures/speech/README.md).

A tiny random-weight Whisper (fixed seed) with a byte-level BPE tokenizer carrying Whisper's
special tokens, exported by Optimum (`optimum-cli export onnx --task
automatic-speech-recognition-with-past`: encoder_model.onnx, decoder_model.onnx,
decoder_with_past_model.onnx), with two short synthetic clips (16 kHz mono WAV),
reference_features.npy (the log-mel features transformers' WhisperFeatureExtractor computes for
them: their first frames; the rest is the padding's constant) and reference.json: the decoder
prompts transformers' Whisper generate builds (a language given, detected, translation) and the
greedy tokens of the model before export under generate's logit processors, with the logits of
the first steps (reference_logits.npy).

It runs in .venv-fixtures-optimum (transformers 4.57.6, optimum-onnx 0.1.0; made by
make_genai_fixtures.py's pins if absent). CI does not run it; tests/parity/test_speech.py checks
what it writes.

  python3 tools/make_whisper_fixture.py [--out tests/fixtures/speech]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_genai_fixtures as base  # noqa: E402  (the training text, the venv pins)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "speech"

VOCAB = 384
# Whisper's special tokens (ids 0..10 here), then the 256 byte symbols and merges.
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|fr|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
EOT, SOT = 0, 1
LANGS = {"<|en|>": 2, "<|de|>": 3, "<|fr|>": 4}
TASKS = {"translate": 5, "transcribe": 6}
NO_TIMESTAMPS = 10
NEW_TOKENS = 20
LOGIT_STEPS = 4
FEATURE_FRAMES = 200          # frames of each clip's features kept in reference.json
FIRST_SEED = 20261401
INIT_STD = 0.25
CROSS_STD = 0.8               # the decoder's cross-attention weights: wider, so that the audio steers the text
EOS_ROW_SCALE = 1.5
MIN_MARGIN = 1e-3
RATE = 16000


def clips():
    """Two deterministic clips: tones with a rising chirp and noise (1.5 s), and a shorter one
    of other tones (0.7 s); int16 samples."""
    import numpy as np
    rng = np.random.default_rng(20261402)
    t = np.arange(int(1.5 * RATE)) / RATE
    a = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * (300 + 900 * t) * t)
         + 0.05 * rng.standard_normal(t.size)) * np.minimum(1, 8 * t) * np.minimum(1, 8 * (t[-1] - t))
    t = np.arange(int(0.7 * RATE)) / RATE
    b = (0.4 * np.sin(2 * np.pi * 1250 * t) * np.sin(2 * np.pi * 3 * t)
         + 0.1 * np.sin(2 * np.pi * 180 * t) + 0.03 * rng.standard_normal(t.size))
    return {"tones.wav": np.round(np.clip(a, -1, 1) * 32767).astype(np.int16),
            "short.wav": np.round(np.clip(b, -1, 1) * 32767).astype(np.int16)}


def write_wav(path: Path, samples):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.tobytes())


def make_tokenizer(out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(base.training_text(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert [tok.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS)))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "tokenizer.json"
        tok.save(str(raw))
        hf = PreTrainedTokenizerFast(tokenizer_file=str(raw), eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                     bos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                     additional_special_tokens=SPECIALS[1:], model_max_length=64,
                                     clean_up_tokenization_spaces=False)
        hf.save_pretrained(str(out_dir))
    return PreTrainedTokenizerFast.from_pretrained(str(out_dir))


def suppressed(tok):
    """generation_config's suppress_tokens (never drawn) and begin_suppress_tokens (not first)."""
    space = tok.convert_tokens_to_ids("Ġ")
    never = [7, 8, 9, tok.convert_tokens_to_ids("e"), tok.convert_tokens_to_ids("Ġthe")]
    return never, [space, EOT]


def make_model(seed, tok):
    import torch
    import transformers

    torch.manual_seed(seed)
    never, begin = suppressed(tok)
    config = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=1500, max_target_positions=64, pad_token_id=EOT, bos_token_id=EOT,
        eos_token_id=EOT, decoder_start_token_id=SOT, suppress_tokens=never, begin_suppress_tokens=begin,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False)
    model = transformers.WhisperForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                continue
            if "embed_positions" in name and "encoder" in name:
                continue  # Whisper's fixed sinusoids
            p.normal_(0.0, CROSS_STD if "encoder_attn." in name else INIT_STD)
        model.get_output_embeddings().weight[EOT] *= EOS_ROW_SCALE
    model.eval()
    g = model.generation_config
    g.decoder_start_token_id = SOT
    g.eos_token_id = EOT
    g.pad_token_id = EOT
    g.bos_token_id = EOT
    g.is_multilingual = True
    g.lang_to_id = dict(LANGS)
    g.task_to_id = dict(TASKS)
    g.no_timestamps_token_id = NO_TIMESTAMPS
    g.prev_sot_token_id = 8
    g.suppress_tokens = never
    g.begin_suppress_tokens = begin
    g.forced_decoder_ids = None
    g.max_length = 64
    return model


def features(extractor, samples):
    import numpy as np
    return extractor(samples.astype(np.float32) / 32768.0, sampling_rate=RATE, return_tensors="pt").input_features


def decoder_prompt(model, feats, **kw):
    """The decoder prompt transformers' Whisper generate builds for these options (start token,
    language, detected when not given, task, no-timestamps token): the leading ids of its output."""
    import torch
    with torch.no_grad():
        seq = model.generate(feats, max_new_tokens=1, do_sample=False, num_beams=1, return_dict_in_generate=True,
                             **kw).sequences[0].tolist()
    return seq[:seq.index(NO_TIMESTAMPS) + 1]


def greedy(model, feats, prompt, never, begin):
    """Greedy decoding by the model's forward, with generate's two logit processors as
    transformers defines them (the ids in `never` at -inf every step, those in `begin` at the
    first); returns the ids after the prompt and each step's processed logits. (transformers
    4.57's generate runs a 30-second input that reaches max_new_tokens without a timestamp as
    more than one segment and returns the last one: measured while making this fixture, so its
    tokens are not the reference.)"""
    import torch
    ids, steps = list(prompt), []
    with torch.no_grad():
        hidden = model.model.encoder(feats).last_hidden_state
        for step in range(NEW_TOKENS):
            logits = model(encoder_outputs=(hidden,), decoder_input_ids=torch.tensor([ids])).logits[0, -1].clone()
            logits[never] = -float("inf")
            if step == 0:
                logits[begin] = -float("inf")
            steps.append(logits)
            ids.append(int(logits.argmax()))
            if ids[-1] == EOT:
                break
    return ids[len(prompt):], torch.stack(steps)


def choose_seed(tok, feats):
    never, begin = suppressed(tok)
    """The first seed whose greedy generations keep every step's top-two gap above MIN_MARGIN,
    stop at EOS in some of the cases but not all, differ between the clips within their first
    four tokens, and detect different languages for the two clips."""
    import torch
    for seed in range(FIRST_SEED, FIRST_SEED + 400):
        model = make_model(seed, tok)
        margin, eos, n, firsts, detected = float("inf"), 0, 0, set(), set()
        for f in feats.values():
            for kw in ({"language": "en"}, {"language": "de", "task": "translate"}, {}):
                prompt = decoder_prompt(model, f, **kw)
                ids, scores = greedy(model, f, prompt, never, begin)
                top2 = scores.topk(2, dim=-1).values
                margin = min(margin, float((top2[:, 0] - top2[:, 1]).min()))
                eos += ids[-1] == EOT
                n += 1
                if kw.get("language") == "en":
                    firsts.add(tuple(ids[:4]))
                if not kw:
                    detected.add(prompt[1])
        if margin >= MIN_MARGIN and 0 < eos < n and len(firsts) == 2 and len(detected) == 2:
            print(f"seed {seed} (smallest margin {margin:.4f}, {eos} of {n} stop at EOS)", flush=True)
            return seed, model
    raise SystemExit("no seed of 200 meets the criteria")


def export(hf_dir: Path, out_dir: Path, log: Path):
    with tempfile.TemporaryDirectory() as tmp, open(log, "w") as f:
        cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", str(hf_dir),
               "--task", "automatic-speech-recognition-with-past", "--opset", "18", tmp]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=dict(os.environ, **base.OFFLINE), stdout=f, stderr=subprocess.STDOUT)
        out_dir.mkdir(parents=True)
        for name in ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "config.json",
                     "generation_config.json", "preprocessor_config.json"]:
            shutil.copy(Path(tmp) / name, out_dir / name)
    for name in base.TOKENIZER_FILES:
        shutil.copy(hf_dir / name, out_dir / name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    venv = base.OPTIMUM_VENV
    if Path(sys.prefix).resolve() != venv.resolve():
        py = base.ensure_optimum_venv()
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])
    import numpy as np
    import torch
    import transformers

    dest = Path(args.out) / "whisper-optimum"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        hf_dir = work / "hf-whisper"
        tok = make_tokenizer(hf_dir)
        extractor = transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=RATE, hop_length=160,
                                                         chunk_length=30, n_fft=400)
        extractor.save_pretrained(str(hf_dir))
        audio = clips()
        feats = {name: features(extractor, s) for name, s in audio.items()}
        seed, model = choose_seed(tok, feats)
        model.save_pretrained(str(hf_dir))
        loaded = transformers.WhisperForConditionalGeneration.from_pretrained(str(hf_dir)).state_dict()
        for k, v in model.state_dict().items():
            assert k in loaded and torch.equal(v, loaded[k]), f"{k} does not survive save_pretrained"
        if dest.exists():
            shutil.rmtree(dest)
        export(hf_dir, dest, work / "export.log")
        # The export writes a generation config derived from config.json (without the languages,
        # tasks and timestamps token): the one generate used goes beside the model instead.
        model.generation_config.save_pretrained(str(dest))
        for name, s in audio.items():
            write_wav(dest / name, s)

        ref = {"fixture": dest.name, "arch": "whisper",
               "export": "optimum-cli export onnx --task automatic-speech-recognition-with-past --opset 18",
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
               "seed": seed, "init_std": INIT_STD, "eos_row_scale": EOS_ROW_SCALE, "new_tokens": NEW_TOKENS,
               "logit_steps": LOGIT_STEPS, "feature_frames": FEATURE_FRAMES, "eos_token_id": EOT,
               "suppress_tokens": model.generation_config.suppress_tokens,
               "begin_suppress_tokens": model.generation_config.begin_suppress_tokens,
               "clips": {}, "cases": []}
        kept = []
        for name, f in feats.items():
            x = f[0].numpy()
            ref["clips"][name] = {"samples": int(audio[name].size), "rate": RATE, "padding_value": float(x[0, -1]),
                                  "features_row": len(kept)}
            kept.append(x[:, :FEATURE_FRAMES])
        np.save(dest / "reference_features.npy", np.stack(kept).astype(np.float32))
        logits = []
        for case, clip, kw in (("en", "tones.wav", {"language": "en"}),
                               ("en_short", "short.wav", {"language": "en"}),
                               ("detect", "tones.wav", {}),
                               ("detect_short", "short.wav", {}),
                               ("translate_de", "tones.wav", {"language": "de", "task": "translate"})):
            never, begin = suppressed(tok)
            prompt = decoder_prompt(model, feats[clip], **kw)
            ids, scores = greedy(model, feats[clip], prompt, never, begin)
            top2 = scores.topk(2, dim=-1).values
            ref["cases"].append({"name": case, "audio": clip, "language": kw.get("language", ""),
                                 "task": kw.get("task", ""), "decoder_prompt": prompt, "generated_ids": ids,
                                 "stop_reason": "eos" if ids[-1] == EOT else "max_new_tokens",
                                 "margins": [round(float(m), 5) for m in (top2[:, 0] - top2[:, 1])]})
            block = np.zeros((LOGIT_STEPS, VOCAB), np.float32)
            n = min(LOGIT_STEPS, scores.shape[0])
            block[:n] = np.nan_to_num(scores[:n].numpy(), neginf=-1e30)
            logits.append(block)
        np.save(dest / "reference_logits.npy", np.stack(logits))
        # A batch's reference is each clip's own generation: transformers 4.57's generate takes a
        # batch of two 30-second inputs without an attention mask for long-form audio and
        # returns one sequence (measured while making this fixture), so it is not used here.
        ref["batch"] = {"audio": ["tones.wav", "short.wav"], "language": "en", "cases": ["en", "en_short"]}
        (dest / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
        for c in ref["cases"]:
            print(f"{c['name']}: {c['decoder_prompt']} {c['generated_ids']} ({c['stop_reason']}, smallest margin {min(c['margins']):.4f})")


if __name__ == "__main__":
    main()
