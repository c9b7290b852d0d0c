"""Text generation, shaped like onnxruntime-genai's Python API (Model, Tokenizer,
GeneratorParams, Generator), over onyx's generation loop: the same folders as `onyx generate`
(onnxruntime-genai's format, Optimum and torch.onnx exports), the same tokens.

    import onyx.genai as og
    model = og.Model("folder")
    tokenizer = og.Tokenizer(model)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=64)
    generator = og.Generator(model, params)
    generator.append_tokens(tokenizer.encode("Hello"))
    stream = tokenizer.create_stream()
    while not generator.is_done():
        generator.generate_next_token()
        print(stream.decode(generator.get_next_tokens()[0]), end="")

and onyx's shortcut: `for piece in model.generate("Hello", max_new_tokens=32): print(piece, end="")`.
"""

import json
import os

import numpy as np

from . import _onyx
from ._errors import Error

__all__ = ["ChatTemplate", "Config", "Model", "Tokenizer", "TokenizerStream", "GeneratorParams", "Generator",
           "generate"]


def _text(b):
    return b.decode("utf-8")


class Config:
    """A model folder and where to run it. The providers come from genai_config.json's
    decoder session options ("cuda" or "cpu"), changed with clear_providers/append_provider."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise Error(f"model folder '{self.path}': no such directory")
        self._providers = []
        self._provider_options = {}
        cfg = os.path.join(self.path, "genai_config.json")
        if os.path.isfile(cfg):
            try:
                with open(cfg, encoding="utf-8") as f:
                    model = json.load(f).get("model", {})
            except (OSError, ValueError) as e:
                raise Error(f"reading '{cfg}': {e}") from None
            so = model.get("decoder", {}).get("session_options", {})
            for entry in so.get("provider_options", []):
                for name, opts in entry.items():
                    self._providers.append(name.lower())
                    self._provider_options[name.lower()] = dict(opts)

    def clear_providers(self):
        self._providers = []

    def append_provider(self, name):
        self._providers.append(str(name).lower())

    def set_provider_option(self, name, key, value):
        self._provider_options.setdefault(str(name).lower(), {})[key] = value

    def _device(self):
        for p in self._providers:
            if p == "cuda":
                return f"cuda:{int(self._provider_options.get('cuda', {}).get('device_id', 0))}"
            if p == "cpu":
                return "cpu"
            raise Error(f"provider '{p}' is not one onyx runs (cpu, cuda)")
        return "cpu"


class Model:
    """A model folder loaded to generate: a decoder-only language model, or an encoder-decoder
    pipeline (an Optimum export with encoder_model.onnx: T5, BART; docs/pipelines.md), whose
    prompt goes to the encoder. device: "cpu", "cuda:N" (default: the config's provider, else
    the CPU), for every component. capture: CUDA Graphs for decode steps on a GPU ("auto" by
    default, "off", "require"). memory_budget: bytes the model may hold on its device (a
    pipeline whose weights do not fit is refused here). session_options: more of onyx's session
    options by name (onyx.SessionOptions' native keys, e.g. {"fuse_rotary_attention": False});
    an unknown name is refused."""

    def __init__(self, config_or_path, device=None, capture=None, memory_budget=None, session_options=None):
        config = config_or_path if isinstance(config_or_path, Config) else Config(config_or_path)
        dev = _onyx.resolve_device(device if device is not None else config._device())
        if capture is None:
            capture = "off" if dev == "cpu" else "auto"
        options = {"device": dev, "capture": capture}
        if memory_budget is not None:
            options["memory_budget_bytes"] = int(memory_budget)
            options["host_memory_budget_bytes"] = int(memory_budget)
        for k, v in (session_options or {}).items():
            if k in options:
                raise Error(f"session_options: {k!r} is set by Model's own argument")
            options[k] = v
        self._m = _onyx.LanguageModel.load(config.path, options)
        self._folder = self._m.folder()
        self.path = config.path

    @property
    def device_type(self):
        return "CPU" if self._m.device() == "cpu" else "CUDA"

    @property
    def device(self):
        return self._m.device()

    @property
    def cache_mode(self):
        """How the KV cache is kept: shared, static or growing (docs/genai.md)."""
        return self._m.cache_mode()

    def capture_report(self):
        return self._m.capture_report()

    def memory_report(self):
        return self._m.memory_report()

    def step_kernels(self):
        """What the latest decode step ran: {op: count} over the steps of its plan that launch a
        kernel (views and what was computed while planning left out; on a device, steps that ran
        on the CPU are keyed "op (host)"). Empty before the first step."""
        return dict(self._m.step_kernels())

    @property
    def is_encoder_decoder(self):
        """True for an encoder-decoder pipeline (the prompt goes to the encoder)."""
        return self._m.encoder_decoder()

    def components(self):
        """A pipeline's components, each a dict: name, weight_bytes, arena_bytes (the largest
        arena its runs planned), arena_lower_bound (the bytes live at that plan's busiest step),
        arena_no_reuse (its intermediates, each in bytes of its own), kv_bytes (the KV cache it holds now). Empty for a decoder-only model."""
        return self._m.components()

    @property
    def is_speech(self):
        """True for a speech model (an encoder reading input_features: Whisper); its input is
        audio (generate(audio=...))."""
        return self._m.speech()

    @property
    def is_vision(self):
        """True for a vision-language model (genai_config.json names vision and embedding
        models: LLaVA-style); its prompts take images (generate(prompt, images=[...]))."""
        return self._m.vision()

    def preprocess_image(self, image):
        """The pixels a vision-language model's vision model reads for `image` (a file path, or an
        RGB uint8 array [height, width, 3]): float32 [3, height, width], preprocessed as its
        preprocessor_config.json says (resize, center crop, rescale, normalize)."""
        import os
        return self._m.image_pixels(os.fspath(image) if isinstance(image, (str, os.PathLike)) else image)

    def generate(self, prompt=None, max_new_tokens=128, add_special_tokens=True, audio=None, language=None,
                 task=None, images=None, **search):
        """Streams the text generated from `prompt` (a str, or token ids), or for a speech model
        from `audio` (a file path, or 1-D float32 samples at the model's rate) with `language`
        ("en" or "<|en|>"; None: detected where the model knows languages) and `task`
        ("transcribe", "translate"): an iterator of text pieces; afterwards its .result holds
        the ids and the stop reason and .stats the figures (and .language the detected
        language). Search options: do_sample, temperature, top_k, top_p, min_p,
        repetition_penalty, presence_penalty, frequency_penalty (OpenAI's, in [-2, 2], over the
        generated tokens), seed, stop (a list of strings), kv_capacity, run_ahead (on a GPU, launch
        each decode step before the one before it has given its tokens to the host; default
        True, the tokens are the same either way).

        A vision-language model takes `images` (file paths, or RGB uint8 arrays [height, width,
        3]), one per image token of the prompt (LLaVA's "<image>"), in order."""
        if images is not None or self.is_vision:
            if images is not None and not self.is_vision:
                raise ValueError(f"'{self.path}' is not a vision-language model: it takes no images")
            if prompt is None:
                raise ValueError("a vision-language model needs a prompt (with an image token per image)")
            import os
            ids = (list(Tokenizer(self).encode(prompt, add_special_tokens=add_special_tokens))
                   if isinstance(prompt, str) else [int(t) for t in prompt])
            items = [os.fspath(i) if isinstance(i, (str, os.PathLike)) else i for i in (images or [])]
            return Generation(self, self._m.image_prompt(ids, items), max_new_tokens, add_special_tokens, search)
        if audio is not None or self.is_speech:
            if audio is None:
                raise ValueError(f"'{self.path}' is a speech model: give it audio=")
            if prompt is not None:
                raise ValueError("a speech model's input is its audio: give audio= without a prompt")
            import os
            item = os.fspath(audio) if isinstance(audio, (str, os.PathLike)) else audio
            prompts, detected = self._m.speech_prompts([item], language or "", task or "")
            g = Generation(self, prompts[0], max_new_tokens, add_special_tokens, search)
            g.language = detected[0] or None
            return g
        if language is not None or task is not None:
            raise ValueError("language and task go with audio (a speech model)")
        return Generation(self, prompt, max_new_tokens, add_special_tokens, search)


class Generation:
    """The iterator Model.generate returns."""

    def __init__(self, model, prompt, max_new_tokens, add_special_tokens, search):
        if isinstance(prompt, str):
            ids = list(Tokenizer(model).encode(prompt, add_special_tokens=add_special_tokens))
        else:
            ids = [int(t) for t in prompt]
        self._g = _onyx.Generator(model._m)
        self._g.begin([ids], dict(search, max_new_tokens=int(max_new_tokens)), True)
        self._pending = []
        self.result = None
        self.stats = None
        self.language = None

    def __iter__(self):
        return self

    def __next__(self):
        while not self._pending:
            if self._g.done:
                if self.result is None:
                    r = self._g.results()[0]
                    self.result = dict(r, text=_text(r["text"]))
                    self.stats = self._g.stats()
                raise StopIteration
            self._g.next(lambda s, piece: self._pending.append(piece))
        return _text(self._pending.pop(0))

    def close(self):
        """Stops the generation (the rest of the iteration ends at once)."""
        self._g.stop()


def generate(path, prompt, max_new_tokens=128, device=None, **search):
    """Model(path, device).generate(prompt, ...): the streamed text pieces."""
    return Model(path, device=device).generate(prompt, max_new_tokens, **search)


class TokenizerStream:
    """Decodes one token at a time; text comes out once its UTF-8 is complete."""

    def __init__(self, native):
        self._s = native

    def decode(self, token):
        return _text(self._s.step(int(token)))

    def finish(self):
        """Whatever is still held (an incomplete character as U+FFFD)."""
        return _text(self._s.finish())


class Tokenizer:
    """The folder's tokenizer (tokenizer.json, tokenizer_config.json), token-exact with
    Hugging Face tokenizers. Tokenizer(model), or Tokenizer.from_file(path)."""

    def __init__(self, model=None, *, _native=None):
        # As onnxruntime-genai's: encode adds no special tokens unless update_options says so.
        self._add_special = False
        self._skip_special = True
        if _native is not None:
            self._t = _native
        elif isinstance(model, Model):
            self._t = model._m.tokenizer()
        else:
            raise TypeError("Tokenizer(model) takes an onyx.genai.Model (or use Tokenizer.from_file(path))")

    @staticmethod
    def from_file(path):
        return Tokenizer(_native=_onyx.Tokenizer.from_file(os.fspath(path)))

    def update_options(self, **options):
        """add_special_tokens / skip_special_tokens: "true" or "false" (as onnxruntime-genai's)."""
        for k, v in options.items():
            flag = {"true": True, "false": False, "1": True, "0": False}.get(str(v).lower())
            if k not in ("add_special_tokens", "skip_special_tokens") or flag is None:
                raise Error(f"tokenizer option {k}={v!r}: the options are add_special_tokens and "
                            "skip_special_tokens, each true or false")
            setattr(self, "_add_special" if k == "add_special_tokens" else "_skip_special", flag)

    def encode(self, text, add_special_tokens=None):
        """The ids of text, int32. Without special tokens (BOS) by default, as onnxruntime-genai;
        add_special_tokens=True (or update_options) adds them, as Hugging Face's default."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__}")
        special = self._add_special if add_special_tokens is None else bool(add_special_tokens)
        return np.array(self._t.encode(text, special), dtype=np.int32)

    def encode_batch(self, texts, add_special_tokens=None):
        """[len(texts), longest] int32, shorter rows padded on the right with the pad id."""
        rows = [self.encode(t, add_special_tokens) for t in texts]
        pad = self.pad_token_id
        if pad is None:
            if len({len(r) for r in rows}) > 1:
                raise Error("encode_batch: the tokenizer has no pad token to pad rows of different lengths")
            pad = 0
        out = np.full((len(rows), max((len(r) for r in rows), default=0)), pad, dtype=np.int32)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return out

    def decode(self, tokens, skip_special_tokens=None):
        skip = self._skip_special if skip_special_tokens is None else bool(skip_special_tokens)
        return _text(self._t.decode([int(t) for t in np.asarray(tokens).reshape(-1)], skip))

    def decode_batch(self, tokens, skip_special_tokens=None):
        return [self.decode(row, skip_special_tokens) for row in tokens]

    def create_stream(self, skip_special_tokens=None):
        skip = self._skip_special if skip_special_tokens is None else bool(skip_special_tokens)
        return TokenizerStream(self._t.stream(skip))

    def apply_chat_template(self, messages, template_str=None, tools=None, add_generation_prompt=True):
        """The prompt for a conversation, rendered by the folder's chat template (or template_str)
        as transformers' apply_chat_template renders it. messages and tools: JSON text, as
        onnxruntime-genai takes them, or lists of dicts."""
        if not isinstance(messages, str):
            messages = json.dumps(messages, ensure_ascii=False)
        if tools is not None and not isinstance(tools, str):
            tools = json.dumps(tools, ensure_ascii=False)
        return self._t.apply_chat_template(messages, template_str, tools, bool(add_generation_prompt))

    def to_token_id(self, token):
        i = self._t.token_to_id(token)
        if i is None:
            raise Error(f"'{token}' is not a token of this tokenizer")
        return i

    token_to_id = to_token_id

    def id_to_token(self, i):
        return self._t.id_to_token(int(i))

    @property
    def vocab_size(self):
        return self._t.vocab_size

    @property
    def bos_token_id(self):
        return self._t.bos_id

    @property
    def eos_token_id(self):
        return self._t.eos_id

    @property
    def pad_token_id(self):
        return self._t.pad_id


class ChatTemplate:
    """A Jinja chat template, parsed once: render(messages=..., add_generation_prompt=True, ...)
    takes any variables the template reads (bos_token, tools, date_string, ...)."""

    def __init__(self, source):
        self._t = _onyx.ChatTemplate(source)

    @property
    def source(self):
        return self._t.source

    def render(self, **variables):
        return self._t.render(json.dumps(variables, ensure_ascii=False))


# onnxruntime-genai's search option -> what onyx does with it.
_SEARCH_KEYS = {"max_length", "min_length", "do_sample", "temperature", "top_k", "top_p", "min_p",
                "repetition_penalty", "presence_penalty", "frequency_penalty", "random_seed", "batch_size",
                "num_beams", "num_return_sequences",
                "past_present_share_buffer", "length_penalty", "early_stopping", "no_repeat_ngram_size",
                "diversity_penalty"}


class GeneratorParams:
    """Search options for a Generator. Defaults come from the folder (genai_config.json's
    search section): max_length (prompt plus new tokens), do_sample, temperature, top_k,
    top_p, repetition_penalty; plus min_p, random_seed, and OpenAI's presence_penalty and
    frequency_penalty (default 0), which count the tokens generated since the last append_tokens
    or rewind_to (tokens appended, generated before or not, are prompt to them)."""

    def __init__(self, model):
        if not isinstance(model, Model):
            raise TypeError("GeneratorParams(model) takes an onyx.genai.Model")
        f = model._folder
        d = f["search"]
        self.search_options = {
            "max_length": d["max_length"] or f["context_length"], "do_sample": d["do_sample"],
            "temperature": d["temperature"], "top_k": d["top_k"], "top_p": d["top_p"], "min_p": d["min_p"],
            "repetition_penalty": d["repetition_penalty"], "random_seed": 0, "batch_size": 1,
        }

    def set_search_options(self, **options):
        for k, v in options.items():
            if k not in _SEARCH_KEYS:
                raise Error(f"search option '{k}': no such option ({', '.join(sorted(_SEARCH_KEYS))})")
            if k == "num_beams" and int(v) != 1 or k == "num_return_sequences" and int(v) != 1:
                raise Error(f"search option '{k}': onyx generates one sequence per prompt, without beam search "
                            f"({k}={v})")
            if k in ("min_length", "no_repeat_ngram_size") and int(v) != 0 or k == "diversity_penalty" and v:
                raise Error(f"search option '{k}': not supported by onyx ({k}={v})")
            self.search_options[k] = v

    def try_graph_capture_with_max_batch_size(self, max_batch_size):
        """Accepted for compatibility: onyx captures each batch bucket's decode step as it comes."""


class Generator:
    """Generates token by token: append_tokens, then generate_next_token until is_done."""

    def __init__(self, model, params):
        if not isinstance(model, Model) or not isinstance(params, GeneratorParams):
            raise TypeError("Generator(model, params) takes an onyx.genai.Model and GeneratorParams")
        self._model = model
        self._search = dict(params.search_options)
        self._g = None
        self._sequences = None  # per sequence: the prompt and the tokens taken so far
        self._last = None
        self._pad = model._folder["pad_id"]

    def _rows(self, tokens):
        a = np.asarray(tokens)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2:
            raise Error(f"append_tokens takes [tokens] or [batch, tokens], not an array of rank {a.ndim}")
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"append_tokens takes integer token ids, not {a.dtype}")
        batch = int(self._search.get("batch_size", 1))
        if a.shape[0] != batch:
            raise Error(f"append_tokens: {a.shape[0]} rows for batch_size {batch} (set_search_options(batch_size=N))")
        # Pad ids are padding (as the attention mask onnxruntime-genai derives from them).
        return [[int(t) for t in row if t != self._pad] for row in a]

    def append_tokens(self, tokens):
        rows = self._rows(tokens)
        if self._sequences is not None:
            if len(rows) != len(self._sequences):
                raise Error("append_tokens: a different number of rows than the generation has")
            rows = [s + r for s, r in zip(self._sequences, rows)]
        self._start(rows)

    def rewind_to(self, new_length):
        if self._sequences is None:
            raise Error("rewind_to: nothing to rewind (append_tokens first)")
        self._start([s[:int(new_length)] for s in self._sequences])

    def _start(self, rows):
        if any(not r for r in rows):
            raise Error("append_tokens: a sequence has no tokens (besides padding)")
        s = self._search
        longest = max(len(r) for r in rows)
        max_length = int(s["max_length"])
        encoder_decoder = self._model.is_encoder_decoder
        if encoder_decoder:
            # The rows are the encoder's prompts; max_length bounds the decoder's sequence (its
            # start token and what it generates), which get_sequence returns.
            if self._g is not None:
                raise Error("append_tokens: an encoder-decoder generation takes its prompt once")
            longest = 1
        if longest >= max_length:
            raise Error(f"the sequence ({longest} tokens) already reaches max_length {max_length}")
        search = {"max_new_tokens": max_length - longest, "do_sample": bool(s["do_sample"]),
                  "temperature": float(s["temperature"]), "top_k": int(s["top_k"]), "top_p": float(s["top_p"]),
                  "min_p": float(s.get("min_p", 0.0)), "repetition_penalty": float(s["repetition_penalty"]),
                  "presence_penalty": float(s.get("presence_penalty", 0.0)),
                  "frequency_penalty": float(s.get("frequency_penalty", 0.0)),
                  "seed": int(s.get("random_seed", 0)) & 0xFFFFFFFFFFFFFFFF}
        if self._g is not None:
            self._g.stop()
        self._g = _onyx.Generator(self._model._m)
        self._g.begin(rows, search, False)
        if encoder_decoder:
            start = self._model._folder["decoder_start_id"]
            self._sequences = [[start] for _ in rows]
        else:
            self._sequences = [list(r) for r in rows]
        self._last = None

    def generate_next_token(self):
        if self._g is None:
            raise Error("generate_next_token: no tokens yet (append_tokens first)")
        if self._g.done:
            raise Error("generate_next_token: the generation is done (is_done() is true)")
        taken = self._g.next()
        fill = self._pad if self._pad is not None and self._pad >= 0 else 0
        self._last = [t if t >= 0 else fill for t in taken]
        # As onnxruntime-genai's: get_next_tokens shows an end-of-sequence id, get_sequence does not.
        eos = self._model._folder["eos_ids"]
        for seq, t in zip(self._sequences, taken):
            if t >= 0 and t not in eos:
                seq.append(t)

    def is_done(self):
        return self._g is not None and self._g.done

    def get_next_tokens(self):
        if self._last is None:
            raise Error("get_next_tokens: no token generated yet (generate_next_token first)")
        return np.array(self._last, dtype=np.int32)

    def get_sequence(self, index):
        if self._sequences is None:
            raise Error("get_sequence: no sequence yet (append_tokens first)")
        return np.array(self._sequences[int(index)], dtype=np.int32)

    def get_output(self, name):
        raise Error(f"get_output('{name}'): onyx draws tokens on the device and keeps no logits for Python")

    def stats(self):
        """The generation's figures: prompt and generated tokens, prefill and decode seconds,
        KV cache bytes, captures and replays."""
        return self._g.stats() if self._g is not None else {}
