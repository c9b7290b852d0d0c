#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs for the fuzz targets (not committed):
#   fuzz_load           the bundled generated models (tools/gen_models.py) and a sample of the
#                       ONNX backend node-test models
#   fuzz_chat_template  the chat templates of tests/fixtures/genai/* and a few written here,
#                       each followed by a NUL byte and a JSON conversation
#   fuzz_tokenizer      a few texts (first byte: the target's mode)
# PYTHON is a Python with onnx and numpy (default: .venv/bin/python, else /work/main/.venv/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=$root/fuzz/corpus
py=${PYTHON:-}
if [[ -z $py ]]; then
  if [[ -x $root/.venv/bin/python ]]; then py=$root/.venv/bin/python; else py=/work/main/.venv/bin/python; fi
fi
mkdir -p "$corpus"/fuzz_load "$corpus"/fuzz_chat_template "$corpus"/fuzz_tokenizer

# fuzz_load: generated models, then every 20th node-test model (sorted, so the sample is
# the same on every machine with the same onnx) and a few with subgraphs.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$root/tools/gen_models.py" --out "$tmp" >/dev/null
for f in "$tmp"/*.onnx; do cp "$f" "$corpus/fuzz_load/gen_$(basename "$f")"; done
node_dir=$("$py" -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/node"))')
i=0
for d in $(ls "$node_dir" | sort); do
  case $d in test_loop11|test_if|test_scan9_sum|test_range_float_type_positive_delta_expanded|test_gather_0|test_reshape_negative_dim|test_slice) pick=1 ;; *) pick=$(( i % 20 == 0 )) ;; esac
  i=$((i + 1))
  m=$node_dir/$d/model.onnx
  if [[ $pick == 1 && -f $m && $(stat -c %s "$m") -lt 65536 ]]; then cp "$m" "$corpus/fuzz_load/$d.onnx"; fi
done

# fuzz_chat_template: template, NUL, messages.
"$py" - "$root" "$corpus/fuzz_chat_template" <<'PY'
import glob, json, os, sys
root, out = sys.argv[1], sys.argv[2]
messages = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "What is 2+2?"},
]
templates = {}
for cfg in sorted(glob.glob(os.path.join(root, "tests/fixtures/genai/*/tokenizer_config.json"))):
    t = json.load(open(cfg)).get("chat_template")
    if isinstance(t, str):
        templates[os.path.basename(os.path.dirname(cfg))] = t
templates["chatml"] = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
                       " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
templates["llama2"] = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                       "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                       "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}"
                       "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}")
templates["features"] = ("{%- macro show(m, sep=': ') -%}{{ m.role | upper }}{{ sep }}{{ m.content | tojson }}{%- endmacro -%}"
                         "{%- set ns = namespace(n=0) -%}{%- for m in messages if m.role != 'system' -%}"
                         "{%- set ns.n = ns.n + 1 -%}{{ show(m) }}{{ '\n' if not loop.last }}{%- if ns.n > 10 %}{% break %}{% endif -%}"
                         "{%- endfor -%}{{ messages | length }} {{ (messages | map(attribute='role') | list)[1:] | join(',') }}"
                         "{{ '%d-%s' % (3, 'x') }}{{ {'a': [1, 2.5, none, true]} | tojson }}{{ strftime_now('%Y') | length }}"
                         "{% if tools is not none %}{{ tools }}{% endif %}{{ 'abc'.split('b') }}{{ range(3) | list }}")
for name, t in templates.items():
    for k, msgs in enumerate([messages, messages[1:2]]):
        with open(os.path.join(out, f"{name}_{k}"), "wb") as f:
            f.write(t.encode() + b"\0" + json.dumps(msgs, ensure_ascii=False).encode())
PY

# fuzz_tokenizer: mode byte (bit 0 add special tokens, bit 1 raw ids, bit 2 skip special), then the rest.
printf '\x01Hello, world! The quick brown fox.' >"$corpus/fuzz_tokenizer/hello"
printf '\x00  leading spaces\ttabs\nnewlines 12345 <|begin_of_text|>' >"$corpus/fuzz_tokenizer/special"
printf '\x05caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 emoji' >"$corpus/fuzz_tokenizer/unicode"
printf '\x02\x01\x00\x00\x00\x10\x00\x00\x00\xff\xff\xff\x7f\x00\x01\x00\x00' >"$corpus/fuzz_tokenizer/ids"
for t in fuzz_load fuzz_chat_template fuzz_tokenizer; do echo "$t: $(ls "$corpus/$t" | wc -l) seeds"; done
