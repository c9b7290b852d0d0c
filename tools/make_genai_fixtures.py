#!/usr/bin/env python3
"""Makes the text-generation fixtures under tests/fixtures/genai/.

Each fixture is a tiny random-weight decoder (fixed seeds) with a byte-level BPE tokenizer
trained here, in one of the folder formats users bring to a serving engine:

  <arch>-builder-fp32   onnxruntime-genai's model builder, fp32 (GroupQueryAttention, shared
                        past/present buffers, genai_config.json)
  <arch>-builder-int4   the same, int4 weights (MatMulNBits)
  <arch>-optimum        Optimum's text-generation-with-past export (present = Concat(past, new),
                        no genai_config.json: the roles of the inputs must be inferred)

and next to each one, reference.json: greedy generations from onnxruntime-genai (for the folders it
loads) and from Hugging Face transformers on the model before export.

This needs torch, transformers and optimum, which the project's .venv does not carry: the script
makes its own environments, .venv-fixtures and .venv-fixtures-optimum (pinned below), and runs
itself in the first. CI does not run it; tests/parity/test_genai_fixtures.py checks its outputs.

  python3 tools/make_genai_fixtures.py [--out tests/fixtures/genai] [--only NAME,...]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "genai"

# Two environments, because no one set of versions serves both exporters: onnxruntime-genai
# 0.18.0's builder imports classes that only transformers 5.x has, and optimum-onnx 0.1.0 (the
# newest) requires transformers < 4.58. The HF models are made, and the HF references computed,
# in the first; the second only runs optimum-cli on the saved folders.
VENV = REPO_ROOT / ".venv-fixtures"
VENV_PINS = ["torch==2.9.1", "transformers==5.23.0", "onnx==1.22.0", "onnx-ir==1.1.0",
             "onnxruntime==1.32.0", "onnxruntime-genai==0.18.0", "numpy==2.4.6", "onnxscript==0.7.2"]
OPTIMUM_VENV = REPO_ROOT / ".venv-fixtures-optimum"
OPTIMUM_PINS = ["torch==2.9.1", "transformers==4.57.6", "optimum==2.1.0", "optimum-onnx==0.1.0",
                "onnx==1.22.0", "onnxruntime==1.32.0", "numpy==2.4.6"]


def _make_venv(venv: Path, pins) -> Path:
    py = venv / "bin" / "python"
    stamp = venv / ".pins"
    wanted = "\n".join(pins) + "\n"
    if not py.exists():
        print(f"make_genai_fixtures: creating {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not stamp.exists() or stamp.read_text() != wanted:
        print(f"make_genai_fixtures: installing {' '.join(pins)} into {venv.name}", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins],
                       check=True)
        stamp.write_text(wanted)
    return py


def ensure_venv():
    """Re-runs this script inside .venv-fixtures, making it first if needed."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    py = _make_venv(VENV, VENV_PINS)
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


def ensure_optimum_venv() -> Path:
    return _make_venv(OPTIMUM_VENV, OPTIMUM_PINS)


# ---------------------------------------------------------------------------------------------
# Training text and tokenizer

TOKENIZER_VOCAB = 1024          # including the three special tokens, which come last

# Two tokenizer styles, each as its family's folders carry it, so that transformers 5 (which
# rebuilds a Qwen2 tokenizer from its vocabulary and merges with Qwen2's own pipeline) and the
# tokenizer.json agree:
#   llama3: Llama 3's pre-tokenizer split (digits in groups of up to three), BOS added by a
#           TemplateProcessing post-processor, distinct BOS/EOS/PAD; tokenizer_class
#           PreTrainedTokenizerFast.
#   qwen2:  NFC normalization, Qwen2's split (single digits), no BOS, EOS = PAD = <|endoftext|>,
#           chat markers <|im_start|>/<|im_end|>; tokenizer_class Qwen2Tokenizer.
SPLIT_CONTRACTIONS_LETTERS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
SPLIT_REST = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
TOKENIZER_STYLES = {
    "llama3": dict(split=SPLIT_CONTRACTIONS_LETTERS + r"\p{N}{1,3}|" + SPLIT_REST, nfc=False,
                   specials=["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"],
                   bos="<|begin_of_text|>", eos="<|end_of_text|>", pad="<|pad|>",
                   ignore_merges=True, hf_class="PreTrainedTokenizerFast",
                   in_prompt="<|end_of_text|>"),   # EOS inside a prompt does not stop generation
    "qwen2": dict(split=SPLIT_CONTRACTIONS_LETTERS + r"\p{N}|" + SPLIT_REST, nfc=True,
                  specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  bos=None, eos="<|endoftext|>", pad="<|endoftext|>",
                  ignore_merges=False, hf_class="Qwen2TokenizerFast",
                  in_prompt="<|im_end|>"),
}
# The families whose own tokenizers are SentencePiece-style (Mistral, Phi-3, Gemma) get the llama3
# style: the point of these fixtures is the decoder, and that tokenizer is already covered.
ARCH_TOKENIZER = {"llama": "llama3", "qwen2": "qwen2", "mistral": "llama3", "phi3": "llama3",
                  "gemma2": "llama3", "gemma3": "llama3"}

COMMON_WORDS = """the of and to in is was for on that with as by at from it be this are or have an
not which one had but were all we when there can more if out so up said what its about than into
them only some could time these two may first then do any like my now over such our man me even
most made after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work
long get here between both life being under never day same another know while last might us great
old year off come since against go came right used take three cat dog river stone light garden
window paper music water green small quick brown fox jumps lazy number model token engine cache
memory kernel graph tensor layer batch prompt decode sample greedy value north south""".split()

UNICODE_WORDS = ["café", "naïve", "Straße", "über", "façade", "smörgåsbord", "crème", "brûlée",
                 "日本語", "東京", "中文", "한국어", "Привет", "мир", "Ελλάδα", "🙂", "🚀", "✓", "€5",
                 "½", "—", "…"]


def _made_up_word(rng):
    syllables = ["ka", "lo", "mi", "zu", "ter", "an", "qui", "vel", "ro", "sha", "po", "ix", "den",
                 "tra", "ble", "or", "un", "ed", "ing", "th"]
    return "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))


def training_text(seed=1234, lines=6000):
    """Deterministic text: English-like sentences, made-up words, numbers, code, non-ASCII."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        kind = rng.random()
        if kind < 0.6:
            n = rng.randint(3, 18)
            words = [rng.choice(COMMON_WORDS) if rng.random() < 0.8 else _made_up_word(rng)
                     for _ in range(n)]
            if rng.random() < 0.15:
                words.insert(rng.randrange(len(words)), rng.choice(UNICODE_WORDS))
            if rng.random() < 0.2:
                words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
            s = " ".join(words)
            s = s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!", ",", ":", ";"])
            if rng.random() < 0.1:
                s = s.replace(" it ", " it's ").replace(" do ", " don't ")
            out.append(s)
        elif kind < 0.75:
            a, b = rng.choice(COMMON_WORDS), rng.choice(COMMON_WORDS)
            out.append(rng.choice([
                f"def {a}_{b}(x, y):\n    return x + y * {rng.randint(0, 9)}",
                f"for {a} in range({rng.randint(1, 100)}):\n\tprint({a}, '{b}')",
                f"{a} = {{'{b}': [{rng.randint(0, 9)}, {rng.randint(10, 99)}], \"id\": {rng.randint(0, 999)}}}",
                f"if ({a} >= {rng.randint(0, 50)} && {b} != nullptr) {{ return -1; }}",
            ]))
        elif kind < 0.9:
            out.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(rng.randint(2, 8))))
        else:
            out.append(" ".join(rng.choice(UNICODE_WORDS + COMMON_WORDS) for _ in range(rng.randint(2, 10))))
        if rng.random() < 0.05:
            out.append("")  # blank lines, so runs of newlines are seen
    return out


def make_tokenizer(style: str, out_dir: Path):
    """A byte-level BPE of the given style trained on training_text(), saved as tokenizer.json with
    the tokenizer_config.json and special_tokens_map.json that transformers 4.x save_pretrained
    writes (the form most model folders carry; the builder folders get transformers 5's form from
    the builder)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    st = TOKENIZER_STYLES[style]
    tok = Tokenizer(models.BPE(ignore_merges=st["ignore_merges"]))
    if st["nfc"]:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(st["split"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB - len(st["specials"]), min_frequency=2,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer=trainer)
    tok.add_special_tokens(st["specials"])
    if st["bos"]:
        bos_id = tok.token_to_id(st["bos"])
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{st['bos']} $A", pair=f"{st['bos']} $A {st['bos']} $B",
                                          special_tokens=[(st["bos"], bos_id)]),
        ])
    assert tok.get_vocab_size() == TOKENIZER_VOCAB, tok.get_vocab_size()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "tokenizer.json"
        tok.save(str(raw))
        code = ("import sys, json, transformers; a = json.loads(sys.argv[1]); "
                "cls = getattr(transformers, a.pop('cls')); out = a.pop('out'); "
                "cls(**a, model_max_length=256, clean_up_tokenization_spaces=False).save_pretrained(out)")
        spec = dict(cls=st["hf_class"], out=str(out_dir), tokenizer_file=str(raw), bos_token=st["bos"],
                    eos_token=st["eos"], pad_token=st["pad"])
        if style == "qwen2":
            spec["unk_token"] = None
        run([ensure_optimum_venv(), "-c", code, json.dumps(spec)])
    for name in TOKENIZER_FILES:
        assert (out_dir / name).exists(), name


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


# ---------------------------------------------------------------------------------------------
# The Hugging Face models

# One config per architecture: hidden 64, 2 layers, 4 query heads over 2 KV heads (GQA groups of
# two), intermediate 128, untied embeddings. initializer_range 0.2 (10x the default) spreads the
# logits so that greedy decoding does not fall into repeating one token at once.
COMMON_CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, max_position_embeddings=256, tie_word_embeddings=False,
                     initializer_range=0.2, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu")
# Seeds of phi3 and gemma2: the first after 20261204 and 20261205 (+10) for which greedy decoding
# of PROMPTS neither falls into repeating a few tokens nor passes a step whose two largest logits
# lie within 1e-3 (the first seeds had gaps of 4.5e-4 and 9e-5, near enough to a tie for summation
# order to matter).
ARCH_SEEDS = {"llama": 20261201, "qwen2": 20261202, "mistral": 20261203, "phi3": 20261218,
              "gemma2": 20261215, "gemma3": 20261206}
# A sliding window shorter than most test sequences (prompts of up to 51 tokens, 32 new ones), so
# that prefills longer than the window and decodes that cross it both occur.
SLIDING_WINDOW = 16
ATTN_SOFTCAP = 10.0
# transformers' config and model classes per architecture, and what each config sets beyond (or
# instead of) COMMON_CONFIG.
ARCH_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(use_sliding_window=False)),  # q/k/v with bias
    # Mistral 7B v0.2/v0.3's form: no sliding window. (v0.1's, a window over every layer, the
    # builder exports without the window, and og then cannot run: see the README.)
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(head_dim=16, sliding_window=None)),
    # Phi-3-mini (4k): fused qkv_proj and gate_up_proj, as many KV heads as query heads,
    # original_max_position_embeddings = max_position_embeddings (no LongRoPE).
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4, original_max_position_embeddings=256,
                                                   sliding_window=None)),
    # Gemma 2: embeddings scaled by sqrt(hidden), RMSNorm weights as (1 + w), GELU (tanh), four norms
    # a layer, attention scale query_pre_attn_scalar**-0.5 (not head_dim's), attention and final
    # logits softcapped, local (sliding window) and global layers alternating. Untied embeddings
    # (Gemma ties them): with random weights, tied ones make greedy decoding repeat one token.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=16, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=32, attn_logit_softcapping=ATTN_SOFTCAP,
        final_logit_softcapping=30.0, sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"])),
    # Gemma 3 (text): as Gemma 2 without softcapping, plus RMSNorm of each head's q and k, and
    # RoPE of another theta on the local layers.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=16, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=32, sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})),
}
# A random model ranks EOS no better than any other token, so greedy decoding almost never stops
# (none of ~300 probe prompts did). Scaling EOS's row of lm_head by 1.5 makes it win now and then:
# some prompts stop early, most run to the length limit.
EOS_ROW_SCALE = 1.5


def make_hf_model(arch: str, tok_dir: Path, out_dir: Path):
    import torch
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    assert len(tok) == TOKENIZER_VOCAB, len(tok)
    # Qwen2's configs name <|endoftext|> as BOS too, though its tokenizer adds none.
    ids = dict(vocab_size=TOKENIZER_VOCAB, bos_token_id=tok.bos_token_id if tok.bos_token_id is not None
               else tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(ARCH_SEEDS[arch])
    config_class, model_class, options = ARCH_MODELS[arch]
    config = getattr(transformers, config_class)(**{**COMMON_CONFIG, **options}, **ids)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # the default init leaves biases zero, which tests nothing
                p.normal_(0.0, 0.2)
        model.lm_head.weight[tok.eos_token_id] *= EOS_ROW_SCALE
    model.eval()
    model.save_pretrained(str(out_dir))
    for name in TOKENIZER_FILES:
        shutil.copy(tok_dir / name, out_dir / name)
    return model


# ---------------------------------------------------------------------------------------------
# Exports

def run(cmd, **kw):
    print("$", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kw)


OFFLINE = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


# The builder's exports. Its int4 default on the CPU is accuracy_level 4: onnxruntime quantizes
# MatMulNBits' activations to int8 blockwise, which moves the logits enough to change greedy
# tokens (9 of the 12 prompts the two llama int4 fixtures share differ), so an engine that
# computes in fp32 can only match the second form.
BUILDER_EXPORTS = {
    "builder-fp32": ["-p", "fp32"],
    "builder-int4": ["-p", "int4"],
    "builder-int4-acc1": ["-p", "int4", "--extra_options", "accuracy_level=1"],
}


def export_builder(hf_dir: Path, out_dir: Path, export: str, work: Path):
    """onnxruntime-genai's model builder on a local Hugging Face folder (-i)."""
    with open(work / f"{out_dir.name}.log", "w") as log:
        run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf_dir, "-o", out_dir,
             "-e", "cpu", "-c", work / "cache", *BUILDER_EXPORTS[export]], env=dict(os.environ, **OFFLINE),
            stdout=log, stderr=subprocess.STDOUT)


def export_optimum(hf_dir: Path, out_dir: Path, work: Path):
    """optimum-cli export onnx --task text-generation-with-past, in the optimum environment.
    The model, config.json and generation_config.json are Optimum's; the tokenizer files are the
    HF folder's as they are (Optimum's own copies would be re-saved through transformers 4.57)."""
    with tempfile.TemporaryDirectory() as tmp, open(work / f"{out_dir.name}.log", "w") as log:
        run([ensure_optimum_venv(), "-m", "optimum.commands.optimum_cli", "export", "onnx",
             "--model", hf_dir, "--task", "text-generation-with-past", "--opset", "18", tmp],
            env=dict(os.environ, **OFFLINE), stdout=log, stderr=subprocess.STDOUT)
        out_dir.mkdir(parents=True)
        for f in sorted(Path(tmp).iterdir()):
            if f.name.startswith("model.onnx") or f.name in ("config.json", "generation_config.json"):
                shutil.copy(f, out_dir / f.name)
    for name in TOKENIZER_FILES:
        shutil.copy(hf_dir / name, out_dir / name)


def optimum_genai_config(folder: Path) -> dict:
    """A genai_config.json under which onnxruntime-genai runs an Optimum decoder: the roles of its
    inputs and outputs by name, and past/present in separate buffers (present = Concat(past, new))."""
    hf = json.loads((folder / "config.json").read_text())
    heads, hidden = hf["num_attention_heads"], hf["hidden_size"]
    return {
        "model": {
            "type": hf["model_type"], "context_length": hf["max_position_embeddings"],
            "vocab_size": hf["vocab_size"], "bos_token_id": hf["bos_token_id"],
            "eos_token_id": hf["eos_token_id"], "pad_token_id": hf["pad_token_id"],
            "decoder": {
                "filename": "model.onnx", "session_options": {"provider_options": []},
                "head_size": hf.get("head_dim") or hidden // heads, "hidden_size": hidden,
                "num_attention_heads": heads, "num_key_value_heads": hf["num_key_value_heads"],
                "num_hidden_layers": hf["num_hidden_layers"],
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "max_length": hf["max_position_embeddings"], "num_beams": 1,
                   "past_present_share_buffer": False},
    }


# ---------------------------------------------------------------------------------------------
# References

NEW_TOKENS = 32
# Prompts of 1 to 60 tokens (with BOS) that reach the tokenizer's corners too: the empty text
# (BOS alone), whitespace runs, digits, contractions and case, non-ASCII seen and unseen in
# training (byte-level fallback), a special token's text inside a prompt, and a long paragraph.
PROMPTS = [
    ("empty", ""),
    ("one_char", "x"),
    ("one_word", "Hello"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("code", "def add(a, b):\n    return a + b\n"),
    ("whitespace", "  multiple   spaces\tand\ttabs\n\n\nnewlines  "),
    ("numbers", "3.14159 2718281828 1,000,000 and the 42nd of 7"),
    ("unicode", "Ωmega ñandú ⚙ 𝔘nicode — déjà vu 🙂🚀 café Straße 日本語"),
    ("case", "I'M SURE it's THEIR dog, isn't it? We'll see; they'd know."),
    ("special_text", "first part{in_prompt}second part"),  # a special token of the style
    ("long", "The model reads the first line of each page, and then the cat and the dog go back "
             "over the green river to see the old stone window where the light is small, but most "
             "people must work in the garden."),
]
# Three prompts of different lengths in one batch, one of which stops at EOS early (when the
# search found one; "sentence" otherwise).
BATCH = ["one_word", "eos_early", "long"]
EOS_PROBES = 400                           # candidate prompts searched for early EOS


def og_model(folder: Path):
    import onnxruntime_genai as og
    cfg = og.Config(str(folder))
    cfg.clear_providers()  # the CPU
    return og.Model(cfg)


def og_tokenizer(model, special: bool):
    import onnxruntime_genai as og
    tok = og.Tokenizer(model)
    # onnxruntime-genai encodes without special tokens unless told (its default is
    # add_special_tokens=false); with them, the post-processor's BOS comes first, as in transformers.
    tok.update_options(add_special_tokens="true" if special else "false")
    return tok


def og_generate(model, prompt_ids, max_length):
    """Greedy, batch 1. Returns og's sequence (get_sequence: the prompt and the generated tokens,
    but not a final EOS), the token chosen at each step (get_next_tokens, which does show the
    EOS), and for each step the gap between the two largest logits it chose from."""
    import numpy as np
    import onnxruntime_genai as og
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=max_length)
    gen = og.Generator(model, params)
    gen.append_tokens(np.asarray(prompt_ids, dtype=np.int32))
    chosen, margins = [], []
    while not gen.is_done():
        logits = np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1)
        top2 = np.sort(logits)[-2:]
        gen.generate_next_token()
        chosen.append(int(gen.get_next_tokens()[0]))
        assert chosen[-1] == int(np.argmax(logits)), "get_logits() is not the step's logits"
        margins.append(round(float(top2[1] - top2[0]), 5))
    return [int(t) for t in gen.get_sequence(0)], chosen, margins


def og_generate_batch(model, prompts_ids, pad_id):
    """Greedy, one batch: prompts right-padded with pad_id (as og.Tokenizer.encode_batch pads;
    onnxruntime-genai's GroupQueryAttention models read right padding), max_length = the padded
    length + NEW_TOKENS. Returns the padded width, og's sequences and each step's tokens."""
    import numpy as np
    import onnxruntime_genai as og
    width = max(map(len, prompts_ids))
    arr = np.full((len(prompts_ids), width), pad_id, dtype=np.int32)
    for i, ids in enumerate(prompts_ids):
        arr[i, :len(ids)] = ids
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=width + NEW_TOKENS, batch_size=len(prompts_ids))
    gen = og.Generator(model, params)
    gen.append_tokens(arr)
    steps = []
    while not gen.is_done():
        gen.generate_next_token()
        steps.append([int(t) for t in gen.get_next_tokens()])
    return width, [[int(t) for t in gen.get_sequence(i)] for i in range(len(prompts_ids))], steps


def upto_eos(tokens, eos_id):
    """tokens up to and including the first EOS."""
    return tokens[:tokens.index(eos_id) + 1] if eos_id in tokens else list(tokens)


def stop_reason(generated, eos_id):
    return "eos" if generated and generated[-1] == eos_id else "max_new_tokens"


def hf_generate(hf_model, prompt_ids, eos_id, pad_id):
    import torch
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=NEW_TOKENS, eos_token_id=eos_id, pad_token_id=pad_id)
    return [int(t) for t in out[0]]


def hf_generate_batch(hf_model, prompts_ids, eos_id, pad_id):
    """transformers' batched greedy: left padding (its convention for decoder-only models)."""
    import torch
    width = max(map(len, prompts_ids))
    ids = torch.full((len(prompts_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts_ids):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.no_grad():
        out = hf_model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                                eos_token_id=eos_id, pad_token_id=pad_id)
    return [[int(t) for t in row[width:]] for row in out]


def ort_loop_generate(onnx_path: Path, prompt_ids, eos_id, n_layers, kv_heads, head_dim):
    """Greedy over an Optimum decoder with onnxruntime alone (no genai_config): the whole
    sequence, stopping after EOS or NEW_TOKENS tokens."""
    import numpy as np
    import onnxruntime as ort
    sess = ort_loop_generate.sessions.get(onnx_path)
    if sess is None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort_loop_generate.sessions[onnx_path] = ort.InferenceSession(str(onnx_path), so)
    seq = list(prompt_ids)
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
            for i in range(n_layers) for kv in ("key", "value")}
    new = list(prompt_ids)
    for _ in range(NEW_TOKENS):
        start = len(seq) - len(new)
        feeds = {"input_ids": np.array([new], np.int64),
                 "attention_mask": np.ones((1, len(seq)), np.int64),
                 "position_ids": np.arange(start, len(seq), dtype=np.int64)[None], **past}
        outs = sess.run(None, feeds)
        names = [o.name for o in sess.get_outputs()]
        res = dict(zip(names, outs))
        tok = int(np.argmax(res["logits"][0, -1]))
        seq.append(tok)
        past = {k: res[k.replace("past_key_values", "present")] for k in past}
        new = [tok]
        if tok == eos_id:
            break
    return seq


ort_loop_generate.sessions = {}


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def eos_probe_prompts():
    seen, out = set(), []
    for text in training_text(seed=99, lines=EOS_PROBES):
        if text and text not in seen and not text.startswith("-"):
            seen.add(text)
            out.append(text)
    return out


def versions(export):
    from importlib.metadata import version
    v = {p: version(p) for p in ("torch", "transformers", "tokenizers", "onnx", "onnxruntime", "onnxruntime-genai")}
    if export == "optimum":
        code = ("from importlib.metadata import version as v; import json; "
                "print(json.dumps({p: v(p) for p in ('torch', 'transformers', 'optimum', 'optimum-onnx')}))")
        out = subprocess.run([str(ensure_optimum_venv()), "-c", code], check=True, capture_output=True, text=True)
        v["exported_with"] = json.loads(out.stdout)
    return v


def make_reference(folder: Path, arch: str, export: str, hf_model, hf_tok) -> dict:
    hf_cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else None
    eos_id, bos_id, pad_id = hf_tok.eos_token_id, hf_tok.bos_token_id, hf_tok.pad_token_id
    ref = {
        "format": 1,
        "fixture": folder.name,
        "made_by": "tools/make_genai_fixtures.py",
        "arch": arch,
        "export": export,
        "versions": versions(export),
        "bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id,
        "new_tokens": NEW_TOKENS,
        "search": "greedy (do_sample false), batch 1, CPU, max_length = len(prompt_ids) + new_tokens",
    }
    with tempfile.TemporaryDirectory() as tmp:
        og_dir = folder
        if not (folder / "genai_config.json").exists():
            # onnxruntime-genai needs a genai_config.json; the folder has none on purpose.
            try:
                og_model(folder)
                raise AssertionError(f"{folder}: onnxruntime-genai loaded a folder without genai_config.json")
            except RuntimeError as e:
                ref["og_loads_folder"] = False
                ref["og_error"] = str(e).replace(str(folder), "DIR")
            og_dir = Path(tmp) / folder.name
            shutil.copytree(folder, og_dir)
            ref["og_genai_config"] = optimum_genai_config(folder)
            (og_dir / "genai_config.json").write_text(json.dumps(ref["og_genai_config"], indent=2))
        else:
            ref["og_loads_folder"] = True
        model = og_model(og_dir)
        tok, tok_plain = og_tokenizer(model, True), og_tokenizer(model, False)
        assert list(tok.eos_token_ids) == [eos_id] and tok.pad_token_id == pad_id

        in_prompt = TOKENIZER_STYLES[ARCH_TOKENIZER[arch]]["in_prompt"]
        prompts = [(name, text.replace("{in_prompt}", in_prompt)) for name, text in PROMPTS]
        # Prompts that make this model emit EOS first, and after a few tokens.
        wanted = {"eos_first": lambda i: i == 0, "eos_early": lambda i: 2 <= i <= 16}
        found, probes = {}, eos_probe_prompts()
        for text in probes:
            ids = [int(t) for t in tok.encode(text)]
            if len(ids) > 40:
                continue
            _, gen, _ = og_generate(model, ids, len(ids) + NEW_TOKENS)
            if eos_id in gen:
                for name, ok in wanted.items():
                    if name not in found and ok(gen.index(eos_id)):
                        found[name] = text
            if len(found) == len(wanted):
                break
        ref["eos_search"] = {name: (name in found) for name in wanted}
        ref["eos_search"]["probes"] = len(probes)
        prompts += [(name, found[name]) for name in wanted if name in found]

        cases = []
        for name, text in prompts:
            ids = [int(t) for t in tok.encode(text)]
            assert len(ids) <= 60, (name, len(ids))
            case = {
                "name": name, "prompt": text, "prompt_ids": ids,
                "prompt_ids_no_special": [int(t) for t in tok_plain.encode(text)],
                "hf_tokenizer_ids": hf_tok(text)["input_ids"],
            }
            cases.append(case)
            if not ids:  # a tokenizer without BOS makes nothing of the empty text
                try:
                    og_generate(model, ids, NEW_TOKENS)
                    raise AssertionError("og generated from an empty prompt")
                except RuntimeError as e:
                    case["og_error"] = str(e)
                continue
            max_length = len(ids) + NEW_TOKENS
            seq, gen, margins = og_generate(model, ids, max_length)
            # og's stop rules, as observed (and checked here for every prompt): it stops when the
            # chosen token is EOS, which then is not in get_sequence, or when the sequence
            # reaches max_length; EOS inside the prompt does not stop it.
            assert eos_id not in gen[:-1], (name, "og went on after EOS")
            if gen[-1] == eos_id:
                assert seq == ids + gen[:-1] and len(seq) < max_length, name
            else:
                assert seq == ids + gen and len(seq) == max_length, (name, "og stopped early without EOS")
            hf_seq = hf_generate(hf_model, ids, eos_id, pad_id)
            case.update({
                "max_length": max_length,
                "og": {"sequence": seq, "generated_ids": gen, "stop_reason": stop_reason(gen, eos_id),
                       "generated_text": tok.decode(np_i32(gen)), "margins": margins},
                # transformers' sequence keeps the final EOS; compare it with og's tokens so.
                "hf": {"sequence": hf_seq, "first_difference": first_difference(hf_seq, ids + gen)},
            })
            if export == "optimum":
                n = hf_cfg["num_hidden_layers"]
                hd = hf_cfg.get("head_dim") or hf_cfg["hidden_size"] // hf_cfg["num_attention_heads"]
                ort_seq = ort_loop_generate(folder / "model.onnx", ids, eos_id, n, hf_cfg["num_key_value_heads"], hd)
                case["ort_loop"] = {"sequence": ort_seq, "first_difference": first_difference(ort_seq, ids + gen)}
        ref["cases"] = cases

        by_name = {c["name"]: c for c in cases}
        batch_names = [n if n in by_name else "sentence" for n in BATCH]
        batch_ids = [by_name[n]["prompt_ids"] for n in batch_names]
        width, raw, steps = og_generate_batch(model, batch_ids, pad_id)
        seqs = []
        for i, (ids, row) in enumerate(zip(batch_ids, raw)):
            assert row[:len(ids)] == ids and all(t == pad_id for t in row[len(ids):width])
            chosen = [step[i] for step in steps]
            gen = upto_eos(chosen, eos_id)
            seqs.append({"prompt_ids": ids, "generated_ids": gen, "stop_reason": stop_reason(gen, eos_id),
                         "after_stop": chosen[len(gen):]})
        hf_rows = hf_generate_batch(hf_model, batch_ids, eos_id, pad_id)
        ref["batch"] = {
            "names": batch_names, "padded_width": width, "max_length": width + NEW_TOKENS, "padding": "right",
            "og": {"sequences": seqs, "raw": raw,
                   "equal_to_batch_1": [s["generated_ids"] == by_name[n]["og"]["generated_ids"][:NEW_TOKENS]
                                        for s, n in zip(seqs, batch_names)]},
            "hf": {"generated_ids": [upto_eos(r, eos_id) for r in hf_rows], "padding": "left"},
        }
        ref["batch"]["hf"]["equal_to_og"] = [a == s["generated_ids"] for a, s in zip(ref["batch"]["hf"]["generated_ids"], seqs)]
    return ref


def np_i32(ids):
    import numpy as np
    return np.asarray(ids, dtype=np.int32)


FIXTURES = [  # name, architecture, export
    ("llama-builder-fp32", "llama", "builder-fp32"),
    ("llama-builder-int4", "llama", "builder-int4"),
    ("llama-builder-int4-acc1", "llama", "builder-int4-acc1"),
    ("llama-optimum", "llama", "optimum"),
    ("qwen2-builder-fp32", "qwen2", "builder-fp32"),
    ("qwen2-optimum", "qwen2", "optimum"),
    ("mistral-builder-fp32", "mistral", "builder-fp32"),
    ("phi3-builder-fp32", "phi3", "builder-fp32"),
    # gemma2-builder-fp32 (arch "gemma2") exports, but og 0.18.0 cannot make its reference: a
    # padded batch through the sliding-window layers fails in GroupQueryAttention ("seqlens_k[0] =
    # 3 is too small for sequence_length 51"), so it is not a fixture.
]
# Fixtures the exporter refuses today: made only when named in --only (to see whether a newer
# exporter takes them), and then a failed export is reported, not raised.
REFUSED = [
    # og 0.18.0's builder reads rope_parameters["rope_type"], which transformers 5 nests per layer
    # type for Gemma 3 ({"sliding_attention": {...}, "full_attention": {...}}): KeyError 'rope_type'.
    ("gemma3-builder-fp32", "gemma3", "builder-fp32"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--keep-work", type=Path, help="keep the tokenizer, HF folders and logs here")
    args = ap.parse_args()
    ensure_venv()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(1)

    only = args.only.split(",") if args.only else []
    chosen = [f for f in FIXTURES if not only or f[0] in only] + [f for f in REFUSED if f[0] in only]
    work = args.keep_work or Path(tempfile.mkdtemp(prefix="genai-fixtures-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for arch in dict.fromkeys(a for _, a, _ in chosen):
        style = ARCH_TOKENIZER[arch]
        if not (work / f"tokenizer-{style}").exists():
            make_tokenizer(style, work / f"tokenizer-{style}")
        hf_dir = work / f"hf-{arch}"
        make_hf_model(arch, work / f"tokenizer-{style}", hf_dir)
        hf_model = AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
        hf_tok = AutoTokenizer.from_pretrained(str(hf_dir))
        for name, a, export in chosen:
            if a != arch:
                continue
            out = args.out / name
            if out.exists():
                shutil.rmtree(out)
            try:
                if export in BUILDER_EXPORTS:
                    export_builder(hf_dir, out, export, work)
                else:
                    export_optimum(hf_dir, out, work)
            except subprocess.CalledProcessError:
                if (name, a, export) not in REFUSED:
                    raise
                log = (work / f"{name}.log").read_text().strip().splitlines()
                print(f"{name}: refused, as recorded in REFUSED:\n    " + "\n    ".join(log[-3:]), flush=True)
                shutil.rmtree(out, ignore_errors=True)
                continue
            if (name, a, export) in REFUSED:
                print(f"{name}: no longer refused (move it from REFUSED to FIXTURES)", flush=True)
            ref = make_reference(out, arch, export, hf_model, hf_tok)
            (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
            size = sum(f.stat().st_size for f in out.iterdir())
            print(f"{name}: {size / 1024:.0f} KiB; og = HF for "
                  f"{sum(c['hf']['first_difference'] is None for c in ref['cases'] if 'og' in c)}/{len(ref['cases'])} prompts",
                  flush=True)
    if not args.keep_work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
