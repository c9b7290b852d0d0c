"""Text generation on the committed decoder fixtures (tests/fixtures/genai, made by
tools/make_genai_fixtures.py), against onnxruntime-genai.

  test_og_reproduces_reference   onnxruntime-genai, run live, still gives what reference.json
                                 holds, so a fixture (or an upgrade of og) cannot drift silently
  test_onyx_generate_*           onyx's greedy generation equals og's, token for token
  test_onyx_tokenize_matches_og  onyx's tokenizer gives og's prompt ids

The onyx tests run `onyx generate DIR --prompt-ids "1 2 3" --max-new-tokens N --json`, which
prints {"prompt_ids": [...], "generated_ids": [...], "stop_reason": "eos"|"max_new_tokens"}
(generated_ids ends with the EOS id when it stopped there); `--prompt TEXT` does the same through
onyx's tokenizer, and `--prompts-file FILE` (JSON lines of {"prompt": ...} or {"prompt_ids": [...]})
prints {"sequences": [{...}, ...]}. They are skipped while `onyx generate --help` fails, and the
tokenizer test while `onyx tokenize --help` does.

A fixture whose MatMulNBits nodes carry accuracy_level 4 (llama-builder-int4) lets onnxruntime
quantize the activations to int8 before the product; the attribute is a floor on the accuracy
onnxruntime may use, and onyx always computes at the full accuracy (level 1: float products of
the dequantized weights). Its tokens are therefore compared with og's tokens on the twin fixture
that holds the same weights at accuracy_level 1 (ONYX_EXPECTS below; test_twin_fixtures_share_weights
keeps that true), while test_og_reproduces_reference still checks og on the fixture itself.

og's results, as the generator records them: get_sequence() holds the prompt and the generated
tokens but not a final EOS (get_next_tokens() shows it), so the expected generated_ids are og's
chosen tokens up to and including EOS.
"""

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

import make_genai_fixtures as mgf  # tools/ is on sys.path (conftest.py)

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "genai"
FIXTURES = sorted(d.name for d in FIXTURES_DIR.iterdir() if (d / "reference.json").is_file())
ONYX_TIMEOUT_S = 120


# fixture -> the fixture whose og tokens onyx must give on it (see the module docstring)
ONYX_EXPECTS = {"llama-builder-int4": "llama-builder-int4-acc1"}


@lru_cache(maxsize=None)
def reference(name):
    return json.loads((FIXTURES_DIR / name / "reference.json").read_text())


@lru_cache(maxsize=None)
def expected(name):
    """What onyx must give on fixture `name`: its reference.json, or for a fixture in ONYX_EXPECTS
    that reference with og's tokens replaced by og's, run live, on the twin folder (same weights,
    accuracy_level 1) for the same prompts."""
    ref = reference(name)
    if name not in ONYX_EXPECTS:
        return ref
    model = mgf.og_model(FIXTURES_DIR / ONYX_EXPECTS[name])
    ref = json.loads(json.dumps(ref))  # a copy
    for case in ref["cases"]:
        if "og" in case:
            seq, chosen, margins = mgf.og_generate(model, case["prompt_ids"], case["max_length"])
            case["og"] = {"sequence": seq, "generated_ids": chosen, "margins": margins}
    rows = ref["batch"]["og"]["sequences"]
    _, _, steps = mgf.og_generate_batch(model, [r["prompt_ids"] for r in rows], ref["pad_token_id"])
    for i, row in enumerate(rows):
        row["generated_ids"] = mgf.upto_eos([step[i] for step in steps], ref["eos_token_id"])
    return ref


@pytest.mark.parametrize("name", sorted(ONYX_EXPECTS))
def test_twin_fixtures_share_weights(name):
    twin = ONYX_EXPECTS[name]
    a, b = FIXTURES_DIR / name, FIXTURES_DIR / twin
    assert (a / "model.onnx.data").read_bytes() == (b / "model.onnx.data").read_bytes(), \
        f"{name} and {twin} no longer hold the same weights"
    import onnx
    levels = {}
    for folder in (a, b):
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        levels[folder.name] = sorted({next((at.i for at in n.attribute if at.name == "accuracy_level"), 0)
                                      for n in model.graph.node if n.op_type == "MatMulNBits"})
    assert levels[twin] in ([0], [1]) and levels[name] != levels[twin], levels


# -- onnxruntime-genai -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def og():
    try:
        import onnxruntime_genai
    except ImportError as e:  # a requirement (scripts/requirements.txt): fail, never skip
        pytest.fail(f"onnxruntime_genai does not import ({e}); run scripts/setup.sh", pytrace=False)
    return onnxruntime_genai


def og_folder(name, tmp_path_factory):
    """The folder og runs: the fixture itself, or for a folder without genai_config.json (the
    Optimum export) a copy with the genai_config.json that reference.json records."""
    folder, ref = FIXTURES_DIR / name, reference(name)
    if ref["og_loads_folder"]:
        return folder
    copy = tmp_path_factory.mktemp(name) / name
    shutil.copytree(folder, copy)
    (copy / "genai_config.json").write_text(json.dumps(ref["og_genai_config"]))
    return copy


@pytest.mark.parametrize("name", FIXTURES)
def test_og_reproduces_reference(name, og, tmp_path_factory):
    ref, folder = reference(name), FIXTURES_DIR / name
    problems = []
    if not ref["og_loads_folder"]:
        try:
            mgf.og_model(folder)
            problems.append("og now loads the folder without a genai_config.json")
        except RuntimeError as e:
            if str(e).replace(str(folder), "DIR") != ref["og_error"]:
                problems.append(f"og's error changed: {e} (recorded: {ref['og_error']})")
    model = mgf.og_model(og_folder(name, tmp_path_factory))
    tok, tok_plain = mgf.og_tokenizer(model, True), mgf.og_tokenizer(model, False)
    for case in ref["cases"]:
        where = f"{case['name']} ({case['prompt']!r})"
        ids = [int(t) for t in tok.encode(case["prompt"])]
        if ids != case["prompt_ids"]:
            problems.append(f"{where}: og encodes {ids}, reference.json has {case['prompt_ids']}")
            continue
        plain = [int(t) for t in tok_plain.encode(case["prompt"])]
        if plain != case["prompt_ids_no_special"]:
            problems.append(f"{where}: without special tokens og encodes {plain}, "
                            f"reference.json has {case['prompt_ids_no_special']}")
        if "og_error" in case:
            try:
                mgf.og_generate(model, ids, mgf.NEW_TOKENS)
                problems.append(f"{where}: og now generates (recorded: {case['og_error']})")
            except RuntimeError as e:
                if str(e) != case["og_error"]:
                    problems.append(f"{where}: og's error changed: {e} (recorded: {case['og_error']})")
            continue
        seq, chosen, _ = mgf.og_generate(model, ids, case["max_length"])
        if seq != case["og"]["sequence"] or chosen != case["og"]["generated_ids"]:
            problems.append(f"{where}: og generates {chosen}, reference.json has {case['og']['generated_ids']}")

    batch = ref["batch"]
    width, _, steps = mgf.og_generate_batch(model, [s["prompt_ids"] for s in batch["og"]["sequences"]],
                                            ref["pad_token_id"])
    assert width == batch["padded_width"]
    for i, want in enumerate(batch["og"]["sequences"]):
        got = mgf.upto_eos([step[i] for step in steps], ref["eos_token_id"])
        if got != want["generated_ids"]:
            problems.append(f"batch row {i}: og generates {got}, reference.json has {want['generated_ids']}")
    assert not problems, (f"{name}: onnxruntime-genai {og.__version__} (reference.json: "
                          f"{ref['versions']['onnxruntime-genai']}) disagrees with reference.json:\n  "
                          + "\n  ".join(problems))


# -- onyx --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onyx(onyx_bin):
    """onyx(*args) -> CompletedProcess; a missing binary fails the test (as conftest's run_onyx)."""
    if not onyx_bin.is_file() or not os.access(onyx_bin, os.X_OK):
        pytest.fail(f"onyx CLI not found (or not executable) at {onyx_bin}; build it first or set ONYX_BIN",
                    pytrace=False)

    def run(*args):
        return subprocess.run([str(onyx_bin), *map(str, args)], capture_output=True, text=True,
                              errors="replace", timeout=ONYX_TIMEOUT_S, cwd=REPO_ROOT)
    return run


def require_command(onyx, command, reason):
    proc = onyx(command, "--help")
    if proc.returncode != 0:
        pytest.skip(f"{reason} (`onyx {command} --help` exits {proc.returncode})")


def in_parallel(fn, items):
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(fn, items))


def parse_json(proc, what):
    assert proc.returncode == 0, f"{what}: onyx exited {proc.returncode}\nstderr:\n{proc.stderr}"
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{what}: onyx printed no JSON object ({e}):\n{proc.stdout[:2000]}")


def compare_sequence(got, prompt_ids, og_generated, eos_id, margins=None):
    """Problems with one onyx result against og's tokens; empty when they agree."""
    problems = []
    for key in ("prompt_ids", "generated_ids", "stop_reason"):
        if key not in got:
            return [f"no '{key}' in onyx's result {got}"]
    if got["prompt_ids"] != prompt_ids:
        problems.append(f"prompt_ids {got['prompt_ids']}, og's {prompt_ids}")
    want = prompt_ids + og_generated
    have = got["prompt_ids"] + got["generated_ids"]
    if have != want:
        at = mgf.first_difference(have, want)
        step = at - len(prompt_ids)
        where = f"generated step {step}" if step >= 0 else "inside the prompt"
        gap = (f"; og's top-2 logit gap at that step: {margins[step]}"
               if margins and 0 <= step < len(margins) else "")
        problems.append(f"sequences differ at position {at} ({where}){gap}:\n"
                        f"      onyx {have}\n        og {want}")
    want_reason = mgf.stop_reason(og_generated, eos_id)
    if got["stop_reason"] != want_reason:
        problems.append(f"stop_reason {got['stop_reason']!r}, og's {want_reason!r}")
    return problems


def generated_cases(name):
    return [c for c in expected(name)["cases"] if "og" in c]


@pytest.mark.parametrize("name", FIXTURES)
def test_onyx_generate_prompt_ids(name, onyx):
    require_command(onyx, "generate", "onyx generate is not built yet")
    ref, folder = expected(name), FIXTURES_DIR / name

    def one(case):
        proc = onyx("generate", folder, "--prompt-ids", " ".join(map(str, case["prompt_ids"])),
                    "--max-new-tokens", ref["new_tokens"], "--json")
        got = parse_json(proc, case["name"])
        return [f"{case['name']}: {p}" for p in compare_sequence(
            got, case["prompt_ids"], case["og"]["generated_ids"], ref["eos_token_id"], case["og"]["margins"])]

    problems = sum(in_parallel(one, generated_cases(name)), [])
    assert not problems, f"{name}: onyx generate --prompt-ids differs from onnxruntime-genai:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", FIXTURES)
def test_onyx_generate_text_prompt(name, onyx):
    require_command(onyx, "generate", "onyx generate is not built yet")
    ref, folder = expected(name), FIXTURES_DIR / name

    def one(case):
        proc = onyx("generate", folder, "--prompt", case["prompt"], "--max-new-tokens", ref["new_tokens"], "--json")
        got = parse_json(proc, case["name"])
        return [f"{case['name']} ({case['prompt']!r}): {p}" for p in compare_sequence(
            got, case["prompt_ids"], case["og"]["generated_ids"], ref["eos_token_id"], case["og"]["margins"])]

    problems = sum(in_parallel(one, generated_cases(name)), [])
    assert not problems, f"{name}: onyx generate --prompt differs from onnxruntime-genai:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", [n for n in FIXTURES if "builder" in n])
def test_onyx_generate_tensor_parallel(name, onyx):
    """Two ranks (threads, each with half the heads and half the MLP: docs/tensor-parallel.md)
    give onnxruntime-genai's tokens, as one does."""
    require_command(onyx, "generate", "onyx generate is not built yet")
    ref, folder = expected(name), FIXTURES_DIR / name

    def one(case):
        proc = onyx("generate", folder, "--prompt-ids", " ".join(map(str, case["prompt_ids"])),
                    "--max-new-tokens", ref["new_tokens"], "--tensor-parallel", "2", "--json")
        got = parse_json(proc, case["name"])
        problems = compare_sequence(got, case["prompt_ids"], case["og"]["generated_ids"], ref["eos_token_id"],
                                    case["og"]["margins"])
        if got.get("stats", {}).get("tensor_parallel") != 2:
            problems.append(f"stats.tensor_parallel is {got.get('stats', {}).get('tensor_parallel')}, not 2")
        return [f"{case['name']}: {p}" for p in problems]

    problems = sum(in_parallel(one, generated_cases(name)), [])
    assert not problems, (f"{name}: onyx generate --tensor-parallel 2 differs from onnxruntime-genai:\n  "
                          + "\n  ".join(problems))


@pytest.mark.parametrize("name", FIXTURES)
def test_onyx_generate_batch(name, onyx, tmp_path):
    """Three prompts of different lengths in one batch; og ran them as one batch too (right
    padding) and gave each the tokens it gives alone."""
    require_command(onyx, "generate", "onyx generate is not built yet")
    ref, folder = expected(name), FIXTURES_DIR / name
    rows = ref["batch"]["og"]["sequences"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": r["prompt_ids"]}) + "\n" for r in rows))
    got = parse_json(onyx("generate", folder, "--prompts-file", prompts, "--max-new-tokens", ref["new_tokens"],
                          "--json"), "batch")
    assert isinstance(got.get("sequences"), list) and len(got["sequences"]) == len(rows), \
        f"expected {{\"sequences\": [{len(rows)} results]}}, onyx printed {got}"
    problems = []
    for i, (have, want) in enumerate(zip(got["sequences"], rows)):
        problems += [f"row {i}: {p}" for p in compare_sequence(have, want["prompt_ids"], want["generated_ids"],
                                                               ref["eos_token_id"])]
    assert not problems, f"{name}: onyx's batch differs from onnxruntime-genai's:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", FIXTURES)
def test_onyx_tokenize_matches_og(name, onyx):
    """`onyx tokenize DIR TEXT` (special tokens added, as og with add_special_tokens=true)."""
    require_command(onyx, "tokenize", "onyx tokenize is not built in this onyx")
    ref, folder = reference(name), FIXTURES_DIR / name

    def one(case):
        proc = onyx("tokenize", folder, case["prompt"])
        if proc.returncode != 0:
            return [f"{case['name']}: onyx tokenize exited {proc.returncode}: {proc.stderr.strip()[:500]}"]
        try:
            ids = [int(t) for t in proc.stdout.split()]
        except ValueError:
            return [f"{case['name']}: onyx tokenize printed {proc.stdout!r}, not ids"]
        if ids != case["prompt_ids"]:
            return [f"{case['name']} ({case['prompt']!r}):\n      onyx {ids}\n        og {case['prompt_ids']}"]
        return []

    problems = sum(in_parallel(one, ref["cases"]), [])
    assert not problems, f"{name}: onyx's tokenizer differs from onnxruntime-genai's:\n  " + "\n  ".join(problems)


# -- the cache over longer generations ---------------------------------------------------------

OPTIMUM = [n for n in FIXTURES if not reference(n)["og_loads_folder"]]


@pytest.mark.parametrize("name", OPTIMUM)
def test_static_cache_equals_the_exported_decoder_for_64_steps(name, onyx):
    """The Concat(past, new) decoder rewritten to a static cache gives the exported decoder's
    logits at every one of 64 teacher-forced steps (onyx generate --verify-cache)."""
    require_command(onyx, "generate", "onyx generate is not built yet")
    ids = next(c["prompt_ids"] for c in reference(name)["cases"] if c["name"] == "sentence")
    proc = onyx("generate", FIXTURES_DIR / name, "--prompt-ids", " ".join(map(str, ids)), "--verify-cache", 64)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kv cache: static" in proc.stdout
    assert proc.stdout.count("max relative logit difference") == 65


@pytest.mark.parametrize("name", ["llama-builder-fp32", "llama-optimum"])
def test_a_full_cache_grows_and_keeps_og_tokens(name, onyx, og, tmp_path_factory):
    """--kv-capacity 1 starts the cache at one block of 64 positions; a long greedy generation
    makes it grow by blocks (a new decode signature each time) and still gives og's tokens."""
    require_command(onyx, "generate", "onyx generate is not built yet")
    ref = reference(name)
    new = 180
    model = mgf.og_model(og_folder(name, tmp_path_factory))
    problems, grew = [], 0
    for case in [c for c in ref["cases"] if c["name"] in ("one_char", "sentence")]:
        ids = case["prompt_ids"]
        _, chosen, margins = mgf.og_generate(model, ids, len(ids) + new)
        got = parse_json(onyx("generate", FIXTURES_DIR / name, "--prompt-ids", " ".join(map(str, ids)),
                              "--max-new-tokens", new, "--kv-capacity", 1, "--json"), case["name"])
        problems += [f"{case['name']}: {p}" for p in compare_sequence(got, ids, chosen, ref["eos_token_id"], margins)]
        # The last step writes position len(ids) + steps - 1, steps = generated - 1.
        need = len(ids) + len(chosen) - 1
        want_grows = (need - 1) // 64
        if got.get("stats", {}).get("kv_cache_grows") != want_grows:
            problems.append(f"{case['name']}: the cache grew {got.get('stats', {}).get('kv_cache_grows')} times, "
                            f"expected {want_grows} for {need} positions")
        grew += want_grows
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)
    assert grew > 0, f"{name}: og stopped too early for the cache to grow; pick longer cases"
