#!/usr/bin/env python3
"""Makes the vision-language fixture tests/fixtures/vision/llava-genai (see tests/fixtures/vision/README.md).

A tiny random-weight LLaVA (transformers' LlavaForConditionalGeneration: a CLIP vision tower, the
two-layer projector, a Llama decoder; fixed seed) in onnxruntime-genai's multi-model folder form:
genai_config.json naming three models,

  vision.onnx     pixel_values [images, 3, 32, 32] -> image_features [images, 16, 64] (the tower's
                  second-to-last layer without its CLS position, projected: what LLaVA's
                  get_image_features returns)
  embedding.onnx  input_ids [batch, seq], image_features [tokens, 64] -> inputs_embeds: the token
                  embeddings, each image token's replaced by the next row of image_features
  decoder.onnx    inputs_embeds, attention_mask, position_ids, past_key_values.N.key/value ->
                  logits, present.N.key/value

exported by torch.onnx from the model's own modules, with preprocessor_config.json
(CLIPImageProcessor: shortest edge 32, bicubic, center crop 32, CLIP's mean and std), config.json and
a byte-level BPE tokenizer (the llama-optimum fixture's) with an added "<image>" token (id 1024).

Next to it, made from the model before export:
  images/*.png              three small RGB pictures of different sizes and aspect ratios
  reference.json            per case: the prompt, its ids as LlavaProcessor expands them, the images,
                            and the greedy tokens of LlavaForConditionalGeneration.generate
  reference_pixels.npy      CLIPImageProcessor's pixel_values of each image (its Pillow path)
  reference_logits.npy      each case's logits at its first generated token
  resize/                   Pillow's Image.resize of a random 37x23 picture to several sizes by each
                            filter (uint8 .npy), for onyx's resampler

It runs in .venv-fixtures-optimum (transformers 4.57.6, torch 2.9.1; made by
make_genai_fixtures.py's pins if absent), with Pillow. CI does not run it;
tests/parity/test_vision.py and tests/unit/test_image.cpp check what it writes.

  python3 tools/make_vision_fixture.py [--out tests/fixtures/vision]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_genai_fixtures as base  # noqa: E402  (the venv pins)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "vision"
TOKENIZER_FROM = REPO_ROOT / "tests" / "fixtures" / "genai" / "llama-optimum"

IMAGE_TOKEN = "<image>"
IMAGE_SIZE, PATCH = 32, 8
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD = 2, 64, 4, 2, 16
NEW_TOKENS = 16
FIRST_SEED = 20261501
MIN_MARGIN = 1e-3
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# name, width, height
IMAGES = [("wide.png", 45, 29), ("tall.png", 20, 52), ("large.png", 97, 70)]
CASES = [
    ("one_image", "USER: <image>\nWhat is in the picture? ASSISTANT:", ["wide.png"]),
    ("other_image", "USER: <image>\nWhat is in the picture? ASSISTANT:", ["large.png"]),
    ("two_images", "USER: <image> and <image>: which is brighter? ASSISTANT:", ["tall.png", "large.png"]),
    ("text_only", "USER: Tell me about the river. ASSISTANT:", []),
]
# LLaVA 1.5's conversation form ("USER: <image>\n... ASSISTANT:"), an image part as its token.
CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n{% elif m['role'] == 'user' %}USER: {% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %} {% else %}ASSISTANT: {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
RESIZE_SOURCE = (37, 23)  # width, height of the random picture
RESIZE_TO = [(16, 11), (80, 45), (37, 9), (5, 50)]  # width, height
FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def ensure_venv():
    py = base.ensure_optimum_venv()
    if Path(sys.prefix).resolve() != (REPO_ROOT / ".venv-fixtures-optimum").resolve():
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "pillow==12.0.0"],
                       check=True)
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


def make_images(folder: Path):
    """Smooth color fields with noise: deterministic, different in brightness and hue."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(20261502)
    folder.mkdir(parents=True, exist_ok=True)
    for k, (name, w, h) in enumerate(IMAGES):
        y, x = np.mgrid[0:h, 0:w]
        base_rgb = [(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 255 // (w + h))]
        img = np.stack(base_rgb, -1).astype(np.float64)
        img = img * (0.4 + 0.3 * k) + rng.normal(0, 25, img.shape)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(folder / name)


def make_tokenizer(out: Path):
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer.from_file(str(TOKENIZER_FROM / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)])
    raw = out / "tokenizer.raw.json"
    tok.save(str(raw))
    cfg = json.loads((TOKENIZER_FROM / "tokenizer_config.json").read_text())
    hf = PreTrainedTokenizerFast(tokenizer_file=str(raw), bos_token=cfg.get("bos_token"),
                                 eos_token=cfg.get("eos_token"), pad_token=cfg.get("pad_token"),
                                 model_max_length=256, clean_up_tokenization_spaces=False)
    hf.save_pretrained(str(out))
    raw.unlink()
    # The template in tokenizer_config.json, where most folders carry it.
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return hf


def build_model(seed, vocab, ids):
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration
    torch.manual_seed(seed)
    vc = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                          image_size=IMAGE_SIZE, patch_size=PATCH, projection_dim=32, initializer_range=0.2)
    tc = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     num_key_value_heads=KV_HEADS, intermediate_size=128, vocab_size=vocab,
                     max_position_embeddings=256, tie_word_embeddings=False, initializer_range=0.2,
                     rms_norm_eps=1e-5, **ids)
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=ids["image_token_id"],
                      projector_hidden_act="gelu", vision_feature_layer=-2,
                      vision_feature_select_strategy="default", tie_word_embeddings=False)
    model = LlavaForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.2)
            # The projector's output as wide as the token embeddings, so that images steer the text.
            if "multi_modal_projector" in name and name.endswith("weight"):
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5 * 3.0)
    model.eval()
    model.config._attn_implementation = "eager"
    for sub in (model.model.vision_tower, model.model.language_model):
        sub.config._attn_implementation = "eager"
    return model


def export(model, out: Path, image_token_id: int):
    import torch
    from transformers.cache_utils import DynamicCache

    class Vision(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.tower, self.projector = m.model.vision_tower, m.model.multi_modal_projector

        def forward(self, pixel_values):
            h = self.tower(pixel_values, output_hidden_states=True).hidden_states[-2][:, 1:]
            return self.projector(h)

    class Embedding(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.embed = m.model.language_model.embed_tokens

        def forward(self, input_ids, image_features):
            is_image = input_ids == image_token_id
            e = self.embed(torch.where(is_image, torch.zeros_like(input_ids), input_ids))
            flat = is_image.reshape(-1).to(torch.int64)
            index = torch.cumsum(flat, 0) * flat  # the k-th image token reads row k (1-based; 0: none)
            rows = torch.cat([torch.zeros(1, image_features.shape[1], dtype=image_features.dtype), image_features])
            g = rows[index].reshape(e.shape)
            return torch.where(is_image.unsqueeze(-1), g, e)

    class Decoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.lm, self.head = m.model.language_model, m.lm_head

        def forward(self, inputs_embeds, attention_mask, position_ids, *past):
            cache = DynamicCache()
            for l in range(LAYERS):
                cache.update(past[2 * l], past[2 * l + 1], l)
            S, T = inputs_embeds.shape[1], attention_mask.shape[1]
            # The additive causal-and-padding mask (transformers' own mask builder does not trace).
            i = torch.arange(S).unsqueeze(1) + (T - S)
            j = torch.arange(T).unsqueeze(0)
            allowed = (j <= i).unsqueeze(0) & attention_mask.bool().unsqueeze(1)
            low = torch.finfo(inputs_embeds.dtype).min
            mask = torch.where(allowed, torch.zeros((), dtype=inputs_embeds.dtype),
                               torch.full((), low, dtype=inputs_embeds.dtype)).unsqueeze(1)
            o = self.lm(inputs_embeds=inputs_embeds, attention_mask=mask, position_ids=position_ids,
                        past_key_values=cache, use_cache=True)
            outs = [self.head(o.last_hidden_state)]
            for l in range(LAYERS):
                outs += [o.past_key_values.layers[l].keys, o.past_key_values.layers[l].values]
            return tuple(outs)

    torch.manual_seed(0)
    torch.onnx.export(Vision(model), (torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE),), str(out / "vision.onnx"),
                      input_names=["pixel_values"], output_names=["image_features"],
                      dynamic_axes={"pixel_values": {0: "images"}, "image_features": {0: "images"}},
                      opset_version=17, dynamo=False)
    ids = torch.tensor([[1, image_token_id, image_token_id, 5]])
    torch.onnx.export(Embedding(model), (ids, torch.randn(2, HIDDEN)), str(out / "embedding.onnx"),
                      input_names=["input_ids", "image_features"], output_names=["inputs_embeds"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "image_features": {0: "image_tokens"},
                                    "inputs_embeds": {0: "batch", 1: "sequence"}},
                      opset_version=17, dynamo=False)
    names = ["inputs_embeds", "attention_mask", "position_ids"] + \
        [f"past_key_values.{l}.{k}" for l in range(LAYERS) for k in ("key", "value")]
    outs = ["logits"] + [f"present.{l}.{k}" for l in range(LAYERS) for k in ("key", "value")]
    dyn = {"inputs_embeds": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    dyn.update({n: {0: "batch", 2: "past"} for n in names[3:]})
    dyn.update({n: {0: "batch", 2: "total"} for n in outs[1:]})
    B, S, P = 2, 3, 4
    args = (torch.randn(B, S, HIDDEN), torch.ones(B, P + S, dtype=torch.int64),
            torch.arange(P, P + S).expand(B, S).contiguous(),
            *[torch.randn(B, KV_HEADS, P, HEAD) for _ in range(2 * LAYERS)])
    torch.onnx.export(Decoder(model), args, str(out / "decoder.onnx"), input_names=names, output_names=outs,
                      dynamic_axes=dyn, opset_version=17, dynamo=False)
    return Vision(model), Embedding(model), Decoder(model)


def ort_greedy(sessions, case, folder, processor, image_token_id):
    import numpy as np
    from PIL import Image
    feats = np.zeros((0, HIDDEN), np.float32)
    if case["images"]:
        px = np.stack([processor(Image.open(folder / "images" / n).convert("RGB"), return_tensors="np")
                       ["pixel_values"][0] for n in case["images"]]).astype(np.float32)
        feats = sessions["vision"].run(None, {"pixel_values": px})[0].reshape(-1, HIDDEN)
    ids = np.array([case["prompt_ids"]], np.int64)
    past = {f"past_key_values.{l}.{k}": np.zeros((1, KV_HEADS, 0, HEAD), np.float32)
            for l in range(LAYERS) for k in ("key", "value")}
    tokens, total = [], 0
    for _ in range(NEW_TOKENS):
        emb = sessions["embedding"].run(None, {"input_ids": ids, "image_features": feats})[0]
        total += ids.shape[1]
        pos = np.arange(total - ids.shape[1], total)[None]
        r = sessions["decoder"].run(None, {"inputs_embeds": emb, "attention_mask": np.ones((1, total), np.int64),
                                           "position_ids": pos, **past})
        tokens.append(int(r[0][0, -1].argmax()))
        past = {f"past_key_values.{l}.{k}": r[1 + 2 * l + (k == "value")] for l in range(LAYERS)
                for k in ("key", "value")}
        ids, feats = np.array([[tokens[-1]]], np.int64), np.zeros((0, HIDDEN), np.float32)
    return tokens


def genai_config(tok, vocab, image_token_id):
    return {"model": {
        "type": "llava", "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id, "context_length": 256, "vocab_size": vocab,
        "image_token_id": image_token_id,
        "decoder": {"filename": "decoder.onnx", "head_size": HEAD, "hidden_size": HIDDEN,
                    "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS,
                    "inputs": {"inputs_embeds": "inputs_embeds", "attention_mask": "attention_mask",
                               "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                               "past_value_names": "past_key_values.%d.value"},
                    "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                                "present_value_names": "present.%d.value"}},
        "embedding": {"filename": "embedding.onnx",
                      "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
                      "outputs": {"inputs_embeds": "inputs_embeds"}},
        "vision": {"filename": "vision.onnx", "config_filename": "preprocessor_config.json",
                   "inputs": {"pixel_values": "pixel_values"}, "outputs": {"image_features": "image_features"}}},
        "search": {"do_sample": False, "max_length": 256, "num_beams": 1}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    ensure_venv()
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers
    from PIL import Image
    from transformers import CLIPImageProcessor, LlavaProcessor

    folder = args.out / "llava-genai"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tok = make_tokenizer(folder)
    image_token_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    vocab = len(tok)
    processor_cfg = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                       crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, resample=3,
                                       do_center_crop=True, image_mean=CLIP_MEAN, image_std=CLIP_STD)
    processor_cfg.save_pretrained(str(folder))
    processor = LlavaProcessor(image_processor=processor_cfg, tokenizer=tok, patch_size=PATCH,
                               vision_feature_select_strategy="default", image_token=IMAGE_TOKEN,
                               num_additional_image_tokens=1)
    make_images(folder / "images")
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
               image_token_id=image_token_id)
    ids_text = {k: v for k, v in ids.items() if k != "image_token_id"}

    def references(model):
        cases, logits = [], []
        for name, prompt, images in CASES:
            pics = [Image.open(folder / "images" / i).convert("RGB") for i in images]
            inputs = processor(text=prompt, images=pics or None, return_tensors="pt")
            inputs.pop("token_type_ids", None)
            assert int((inputs["input_ids"] == image_token_id).sum()) == TOKENS_PER_IMAGE * len(images)
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                                     return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
            prompt_ids = inputs["input_ids"][0].tolist()
            new = out.sequences[0, len(prompt_ids):].tolist()
            step_logits = torch.stack([l[0] for l in out.logits])
            top2 = torch.topk(step_logits, 2, dim=-1).values
            margin = float((top2[:, 0] - top2[:, 1]).min())
            cases.append(dict(name=name, prompt=prompt, images=images, prompt_ids=prompt_ids, generated_ids=new,
                              margin=margin))
            logits.append(step_logits[0].numpy())
        return cases, np.stack(logits)

    seed = FIRST_SEED
    while True:
        model = build_model(seed, vocab, ids_text | {"image_token_id": image_token_id})
        cases, logits = references(model)
        by = {c["name"]: c for c in cases}
        steered = by["one_image"]["generated_ids"] != by["other_image"]["generated_ids"]
        if min(c["margin"] for c in cases) >= MIN_MARGIN and steered:
            break
        print(f"seed {seed}: margin {min(c['margin'] for c in cases):.2e}, images steer: {steered}; next seed")
        seed += 1
    model.config.to_json_file(str(folder / "config.json"))
    vision, embedding, decoder = export(model, folder, image_token_id)
    (folder / "genai_config.json").write_text(json.dumps(genai_config(tok, vocab, image_token_id), indent=2) + "\n")

    # The exports against the modules they came from (onnxruntime, fresh inputs).
    torch.manual_seed(1)
    px = torch.randn(3, 3, IMAGE_SIZE, IMAGE_SIZE)
    got = ort.InferenceSession(str(folder / "vision.onnx")).run(None, {"pixel_values": px.numpy()})[0]
    want = model.model.get_image_features(px, vision_feature_layer=-2, vision_feature_select_strategy="default")
    want = torch.stack(list(want)) if isinstance(want, (list, tuple)) else want
    assert np.abs(got - want.detach().numpy()).max() < 1e-4, np.abs(got - want.detach().numpy()).max()

    # The three exported models, chained by onnxruntime in a greedy loop, give transformers' tokens.
    sessions = {n: ort.InferenceSession(str(folder / f"{n}.onnx")) for n in ("vision", "embedding", "decoder")}
    for c in cases:
        ort_tokens = ort_greedy(sessions, c, folder, processor_cfg, image_token_id)
        assert ort_tokens == c["generated_ids"], (c["name"], ort_tokens, c["generated_ids"])

    pixels = np.stack([processor_cfg(Image.open(folder / "images" / n).convert("RGB"),
                                     return_tensors="np")["pixel_values"][0] for n, _, _ in IMAGES])
    np.save(folder / "reference_pixels.npy", pixels.astype(np.float32))
    np.save(folder / "reference_logits.npy", logits.astype(np.float32))
    (folder / "reference.json").write_text(json.dumps({
        "seed": seed, "image_token_id": image_token_id, "tokens_per_image": TOKENS_PER_IMAGE,
        "max_new_tokens": NEW_TOKENS, "images": [n for n, _, _ in IMAGES], "cases": cases,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                     "pillow": Image.__version__},
    }, indent=1) + "\n")

    # Pillow's resampling, for onyx's own.
    rs = folder / "resize"
    rs.mkdir()
    rng = np.random.default_rng(20261503)
    src = rng.integers(0, 256, (RESIZE_SOURCE[1], RESIZE_SOURCE[0], 3), dtype=np.uint8)
    np.save(rs / "source.npy", src)
    for f, fname in FILTERS.items():
        for w, h in RESIZE_TO:
            out = np.asarray(Image.fromarray(src, "RGB").resize((w, h), resample=f))
            np.save(rs / f"{fname}_{w}x{h}.npy", out)
    print(f"wrote {folder} (seed {seed})")


if __name__ == "__main__":
    main()
