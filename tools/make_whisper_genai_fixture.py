#!/usr/bin/env python3
"""Makes the speech fixture tests/fixtures/speech/whisper-genai (see tests/fixtures/speech/README.md):
the Whisper of whisper-optimum (the same seed, so the same weights) in onnxruntime-genai's folder
form, made by onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder -i
HF_DIR -p fp32 -e cpu`): genai_config.json naming encoder.onnx (audio_features in, each layer's
cross-attention keys and values out) and decoder.onnx (int32 ids, self- and cross-attention
caches, MultiHeadAttention), audio_processor_config.json and the tokenizer; beside them the
Hugging Face model's config.json and generation_config.json (the decoder's prompt and logit
processors, which the builder does not copy) and the two clips.

Its reference is whisper-optimum's (the same model, the same clips). The script checks that:
the model rebuilt from the seed gives whisper-optimum's greedy tokens in transformers for every
case, and the builder's two files, chained by onnxruntime in a greedy loop over transformers'
features with the same logit processors, give them too. Then it copies whisper-optimum's
reference files, naming this fixture.

Runs in .venv-fixtures-optimum (the model, as whisper-optimum's script makes it) and calls the
builder in .venv-fixtures (make_genai_fixtures.py's pins: onnxruntime-genai 0.18.0 with
transformers 5.23). CI does not run it; tests/parity/test_speech.py checks what it writes.

  python3 tools/make_whisper_genai_fixture.py [--out tests/fixtures/speech]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_genai_fixtures as base  # noqa: E402  (the venvs and their pins)
import make_whisper_fixture as mw  # noqa: E402  (the model, the clips, the greedy loop)

BUILDER_FILES = ["genai_config.json", "audio_processor_config.json", "encoder.onnx", "decoder.onnx"]


def ort_greedy(folder: Path, feats, prompt, never, begin):
    """onnxruntime over the builder's encoder.onnx and decoder.onnx: the encoder once, then the
    decoder on the prompt with an empty self-attention past and one token a step, with
    generate's two logit processors; returns the ids after the prompt."""
    import numpy as np
    import onnxruntime as ort

    cfg = json.loads((folder / "genai_config.json").read_text())["model"]
    layers = cfg["decoder"]["num_hidden_layers"]
    heads, size = cfg["decoder"]["num_key_value_heads"], cfg["decoder"]["head_size"]
    opts = ort.SessionOptions()
    enc = ort.InferenceSession(str(folder / "encoder.onnx"), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(folder / "decoder.onnx"), opts, providers=["CPUExecutionProvider"])
    out = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"audio_features": feats.numpy()})))
    cross = {}
    for i in range(layers):
        cross[f"past_key_cross_{i}"] = out[f"present_key_cross_{i}"]
        cross[f"past_value_cross_{i}"] = out[f"present_value_cross_{i}"]
    past = {f"past_{kv}_self_{i}": np.zeros((1, heads, 0, size), np.float32) for i in range(layers) for kv in ("key", "value")}
    ids, fed = list(prompt), list(prompt)
    for step in range(mw.NEW_TOKENS):
        res = dict(zip([o.name for o in dec.get_outputs()],
                       dec.run(None, {"input_ids": np.array([fed], np.int32), **past, **cross})))
        logits = res["logits"][0, -1].astype(np.float64)
        logits[never] = -np.inf
        if step == 0:
            logits[begin] = -np.inf
        ids.append(int(logits.argmax()))
        for i in range(layers):
            for kv in ("key", "value"):
                past[f"past_{kv}_self_{i}"] = res[f"present_{kv}_self_{i}"]
        fed = [ids[-1]]
        if ids[-1] == mw.EOT:
            break
    return ids[len(prompt):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(mw.DEFAULT_OUT))
    args = ap.parse_args()
    if Path(sys.prefix).resolve() != base.OPTIMUM_VENV.resolve():
        py = base.ensure_optimum_venv()
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])
    import transformers

    src = Path(args.out) / "whisper-optimum"
    dest = Path(args.out) / "whisper-genai"
    ref = json.loads((src / "reference.json").read_text())
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        hf_dir = work / "hf-whisper"
        tok = mw.make_tokenizer(hf_dir)
        extractor = transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=mw.RATE, hop_length=160,
                                                         chunk_length=30, n_fft=400)
        extractor.save_pretrained(str(hf_dir))
        audio = mw.clips()
        feats = {name: mw.features(extractor, s) for name, s in audio.items()}
        model = mw.make_model(ref["seed"], tok)
        never, begin = mw.suppressed(tok)
        for case in ref["cases"]:
            ids, _ = mw.greedy(model, feats[case["audio"]], case["decoder_prompt"], never, begin)
            assert ids == case["generated_ids"], f"{case['name']}: the rebuilt model gives {ids}, whisper-optimum " \
                                                 f"{case['generated_ids']}"
        model.save_pretrained(str(hf_dir))
        model.generation_config.save_pretrained(str(hf_dir))
        built = work / "built"
        py = base._make_venv(base.VENV, base.VENV_PINS)
        cmd = [str(py), "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(built), "-p", "fp32",
               "-e", "cpu", "-c", str(work / "cache")]
        print("$", " ".join(cmd), flush=True)
        with open(work / "builder.log", "w") as log:
            r = subprocess.run(cmd, env=dict(os.environ, **base.OFFLINE), stdout=log, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            sys.exit("the builder failed:\n" + (work / "builder.log").read_text()[-4000:])
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in BUILDER_FILES:
            shutil.copy(built / name, dest / name)
            if (built / f"{name}.data").exists():  # the builder keeps weights as external data
                shutil.copy(built / f"{name}.data", dest / f"{name}.data")
        for name in base.TOKENIZER_FILES:
            shutil.copy(built / name if (built / name).exists() else hf_dir / name, dest / name)
        for name in ["config.json", "generation_config.json"]:
            shutil.copy(hf_dir / name, dest / name)
        for case in ref["cases"]:
            ids = ort_greedy(dest, feats[case["audio"]], case["decoder_prompt"], never, begin)
            assert ids == case["generated_ids"], f"{case['name']}: onnxruntime over the builder's files gives {ids}, " \
                                                 f"transformers {case['generated_ids']}"
            print(f"{case['name']}: onnxruntime over the builder's files: {ids} (equal)")
        for name in ["tones.wav", "short.wav", "reference_features.npy", "reference_logits.npy"]:
            shutil.copy(src / name, dest / name)
        ref["fixture"] = dest.name
        ref["export"] = "python -m onnxruntime_genai.models.builder -i HF_DIR -p fp32 -e cpu (onnxruntime-genai 0.18.0)"
        (dest / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
