"""onyx's tokenizer against the Hugging Face `tokenizers` package, line by line.

For every tokenizer family (the small trained fixtures under tests/fixtures/tokenizers and
the real tokenizer.json files that pip packages ship, see scripts/requirements-tokenizers.txt),
one onyx process encodes the whole generated corpus (tools/make_tokenizer_fixtures.py):
ids with and without special tokens, the decode of those ids with and without special
tokens, and the streamed decode; then it decodes random id sequences (what a model may
generate: byte tokens out of order, special tokens anywhere), whole and streamed. Each must
equal the reference exactly.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools"))

import make_tokenizer_fixtures as fixtures  # noqa: E402

import tokenizers  # noqa: E402

FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "tokenizers"
TRAINED = sorted(p.name for p in FIXTURE_DIR.iterdir() if (p / "tokenizer.json").is_file())
REAL = sorted(fixtures.REAL)
SHOW = 5  # mismatches reported per check
RANDOM_SEQUENCES = 2000


_REFERENCE = {}


def reference(folder):
    """The reference tokenizer of a folder, loaded once per session (the real ones are 9-11 MB)."""
    key = str(folder)
    if key not in _REFERENCE:
        _REFERENCE[key] = tokenizers.Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    return _REFERENCE[key]


def family_folder(family):
    if family in fixtures.REAL:
        found = fixtures.real_folders()
        if family not in found:
            pytest.fail(f"{family}: the package with its real tokenizer.json is not installed; "
                        "run scripts/setup.sh (scripts/requirements-tokenizers.txt)", pytrace=False)
        return found[family]
    return FIXTURE_DIR / family


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer") / "corpus.jsonl"
    fixtures.write_corpus(path, 10000, 20261201)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 10000
    return path, lines


@pytest.fixture(scope="session")
def onyx_runs(onyx_bin, corpus, tmp_path_factory):
    """Starts one `onyx tokenize --lines --json` per family at once, so that they run while
    the reference computes its side; each test then waits for its own."""
    if not onyx_bin.is_file():
        pytest.fail(f"onyx CLI not found at {onyx_bin}; build it first or set ONYX_BIN", pytrace=False)
    out_dir = tmp_path_factory.mktemp("onyx_tokenize")
    real = fixtures.real_folders()
    runs = {}
    # The CLI links the BLAS of the engine; its idle worker threads would only compete here.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for family in TRAINED + REAL:
        folder = real.get(family, FIXTURE_DIR / family)
        if not (folder / "tokenizer.json").is_file():
            continue
        seqs = random_id_sequences(folder)
        ids_path = out_dir / f"{family}.ids.jsonl"
        ids_path.write_text("".join(json.dumps(q) + "\n" for q in seqs))
        out, err = open(out_dir / f"{family}.out", "wb"), open(out_dir / f"{family}.err", "wb")
        proc = subprocess.Popen([str(onyx_bin), "tokenize", str(folder), "--lines", str(corpus[0]), "--json",
                                 "--decode-lines", str(ids_path)], stdout=out, stderr=err, env=env)
        runs[family] = {"proc": proc, "out_path": out_dir / f"{family}.out", "err_path": out_dir / f"{family}.err",
                        "files": (out, err), "sequences": seqs, "results": None}
    yield runs
    for run in runs.values():
        if run["proc"].poll() is None:
            run["proc"].kill()
            run["proc"].wait()


def random_id_sequences(folder):
    """Seeded random ids below the vocabulary size (and a few past it: unknown ids are skipped)."""
    ref = reference(folder)
    rng = random.Random(folder.name)
    n = ref.get_vocab_size()
    return [[rng.randrange(n + 3) for _ in range(rng.randrange(1, 30))] for _ in range(RANDOM_SEQUENCES)]


def onyx_results(runs, family, corpus_lines):
    """(corpus results, random-sequence results) of a family's onyx run."""
    run = runs[family]
    if run["results"] is None:
        rc = run["proc"].wait(timeout=300)
        for f in run["files"]:
            f.close()
        assert rc == 0, f"onyx tokenize failed ({rc}):\n{run['err_path'].read_text(errors='replace')}"
        rows = [json.loads(line) for line in run["out_path"].read_text(encoding="utf-8").splitlines()]
        assert len(rows) == corpus_lines + len(run["sequences"]), f"onyx printed {len(rows)} results"
        run["results"] = (rows[:corpus_lines], rows[corpus_lines:])
    return run["results"]


def mismatches(name, lines, ours, theirs):
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if len(ours) != len(theirs):
        return [f"{name}: {len(ours)} results from onyx, {len(theirs)} from tokenizers"]
    out = [f"{name}: {len(bad)} of {len(lines)} lines differ"] if bad else []
    for i in bad[:SHOW]:
        out.append(f"  line {i + 1}: {lines[i]!r}\n    onyx:       {ours[i]!r}\n    tokenizers: {theirs[i]!r}")
    return out


def check_family(ref, ours, lines):
    assert len(ours) == len(lines), f"onyx printed {len(ours)} results for {len(lines)} lines"
    plain_encodings = ref.encode_batch_fast(lines, add_special_tokens=False)  # ids only: no offsets
    plain = [e.ids for e in plain_encodings]
    if ref.truncation is None and ref.padding is None:
        # encode(add_special_tokens=True) is this encoding then post_process: half the work.
        ids = [ref.post_process(e).ids for e in plain_encodings]
    else:
        ids = [e.ids for e in ref.encode_batch_fast(lines, add_special_tokens=True)]
    problems = []
    problems += mismatches("ids (special tokens added)", lines, [o["ids"] for o in ours], ids)
    problems += mismatches("ids (no special tokens)", lines, [o["ids_no_special"] for o in ours], plain)
    # Decode the reference's ids, so a decode check stands on its own even when ids differ.
    problems += mismatches("decode", lines, [o["text"] for o in ours], ref.decode_batch(ids, skip_special_tokens=True))
    problems += mismatches("decode keeping special tokens", lines, [o["text_keep_special"] for o in ours],
                           ref.decode_batch(ids, skip_special_tokens=False))
    problems += mismatches("streamed decode vs whole decode", lines, [o["stream"] for o in ours],
                           [o["text"] for o in ours])
    return problems


@pytest.mark.parametrize("family", TRAINED + REAL)
def test_tokenizer_matches_reference(family, onyx_runs, corpus):
    ref = reference(family_folder(family))
    problems = check_family(ref, onyx_results(onyx_runs, family, len(corpus[1]))[0], corpus[1])
    assert not problems, f"{family}:\n" + "\n".join(problems)


@pytest.mark.parametrize("family", TRAINED + REAL)
def test_random_ids_decode_like_reference(family, onyx_runs, corpus):
    ref = reference(family_folder(family))
    seqs = onyx_runs[family]["sequences"]
    ours = onyx_results(onyx_runs, family, len(corpus[1]))[1]
    assert len(ours) == len(seqs)
    problems = mismatches("decode", seqs, [o["text"] for o in ours], ref.decode_batch(seqs, skip_special_tokens=True))
    problems += mismatches("decode keeping special tokens", seqs, [o["text_keep_special"] for o in ours],
                           ref.decode_batch(seqs, skip_special_tokens=False))
    problems += mismatches("streamed decode vs whole decode", seqs, [o["stream"] for o in ours],
                           [o["text"] for o in ours])
    assert not problems, f"{family}:\n" + "\n".join(problems)


def test_every_family_is_covered():
    # The families onyx promises, so that a fixture lost in a refactor fails loudly.
    assert {"gpt2", "llama3", "qwen2", "llama2", "mistral", "bert_uncased", "bert_cased", "roberta",
            "falcon_like", "clip_like", "wordlevel_misc"} <= set(TRAINED)


def test_cli_encode_and_decode(run_onyx):
    folder = FIXTURE_DIR / "llama3"
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = "Hello, world! It's 2026 👋"
    proc = run_onyx("tokenize", folder, text)
    assert proc.returncode == 0, proc.stderr
    ids = [int(x) for x in proc.stdout.split()]
    assert ids == ref.encode(text).ids
    proc = run_onyx("tokenize", folder, text, "--no-special")
    assert [int(x) for x in proc.stdout.split()] == ref.encode(text, add_special_tokens=False).ids
    proc = run_onyx("tokenize", folder, "--decode", " ".join(map(str, ids)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text + "\n"
    proc = run_onyx("tokenize", folder, "--decode", " ".join(map(str, ids)), "--keep-special")
    assert proc.stdout == ref.decode(ids, skip_special_tokens=False) + "\n"
    proc = run_onyx("tokenize", folder, "--info")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert proc.stdout.split("\n")[:3] == [f"vocab size: {ref.get_vocab_size()}",
                                          f"bos: {ref.token_to_id(config['bos_token'])}",
                                          f"eos: {ref.token_to_id(config['eos_token'])}"], proc.stdout


def test_cli_errors(run_onyx, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}')
    proc = run_onyx("tokenize", bad, "hi")
    assert proc.returncode == 1
    assert str(bad) in proc.stderr and "/model/merges/0" in proc.stderr, proc.stderr
    proc = run_onyx("tokenize", FIXTURE_DIR / "gpt2")
    assert proc.returncode == 2 and "usage" in proc.stderr
