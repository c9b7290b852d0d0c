"""Migration suite: onnxruntime scripts must behave the same with `import onyx as ort`.

Each script in migration/ is ordinary onnxruntime code. It reads the models from
the directory in ONYX_MIGRATION_MODELS and pickles a dict of results to the path
given as its first argument. The test runs it twice with this Python: as
written, and with its one line `import onnxruntime as ort` replaced by
`import <module under test> as ort` (nothing else changes), then compares the
two dicts (compare.diff: same structure, names, shapes and dtypes; float32
within rtol 1e-5 / atol 1e-6, float16 within 1e-3; ints, bools, strings exact).

Values that may differ by design:
  keys starting with "providers": a list of str that contains "CPUExecutionProvider"
  key "device": "CPU" or "GPU"
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pyapi_compare import diff
from pyapi_support import MODULE_NAME, UNDER_TEST_IS_ORT

MIGRATION_DIR = Path(__file__).resolve().parent / "migration"
SCRIPTS = sorted(MIGRATION_DIR.glob("*.py"))
IMPORT_LINE = "import onnxruntime as ort"
TIMEOUT_S = 120


def _lenient(key) -> bool:
    return isinstance(key, str) and (key.startswith("providers") or key == "device")


def _check_lenient(key: str, ref, got) -> list[str]:
    if key == "device":
        return [] if got in ("CPU", "GPU") else [f"[{key!r}]: {got!r} is not 'CPU' or 'GPU'"]
    out = []
    for side, value in (("reference", ref), ("candidate", got)):
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            out.append(f"[{key!r}] ({side}): expected a list of str, got {value!r}")
        elif "CPUExecutionProvider" not in value:
            out.append(f"[{key!r}] ({side}): {value!r} lacks 'CPUExecutionProvider'")
    return out


def compare_results(ref: dict, got: dict) -> list[str]:
    problems = []
    missing, extra = sorted(set(ref) - set(got)), sorted(set(got) - set(ref))
    if missing or extra:
        problems.append(f"result keys differ (missing {missing}, unexpected {extra})")
    for key in ref:
        if key not in got:
            continue
        if _lenient(key):
            problems += _check_lenient(key, ref[key], got[key])
        else:
            problems += diff(ref[key], got[key], f"[{key!r}]")
    return problems


def candidate_source(source: str) -> str:
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == IMPORT_LINE]
    assert len(hits) == 1, f"a migration script needs exactly one line {IMPORT_LINE!r}"
    lines[hits[0]] = f"import {MODULE_NAME} as ort\n"
    out = "".join(lines)
    if not UNDER_TEST_IS_ORT:
        assert "onnxruntime" not in out, "the script names onnxruntime outside its import line"
    return out


def _start(script: Path, result: Path, model_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, ONYX_MIGRATION_MODELS=str(model_dir), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.Popen(
        [sys.executable, str(script), str(result)],
        env=env,
        cwd=str(result.parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, label: str, result: Path) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"{label} run timed out after {TIMEOUT_S} s\n{stderr[-4000:]}")
    if proc.returncode != 0:
        pytest.fail(
            f"{label} run exited with {proc.returncode}\n--- stdout\n{stdout[-2000:]}\n--- stderr\n{stderr[-6000:]}",
            pytrace=False,
        )
    with open(result, "rb") as f:
        return pickle.load(f)


def test_scripts_exist():
    assert len(SCRIPTS) >= 5, f"migration scripts missing from {MIGRATION_DIR}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_migration(script: Path, onyx_module, ort_module, model_dir: Path, tmp_path: Path):
    source = script.read_text(encoding="utf-8")
    candidate = tmp_path / script.name
    candidate.write_text(candidate_source(source), encoding="utf-8")
    (tmp_path / "reference").mkdir()
    (tmp_path / "candidate").mkdir()
    ref_out = tmp_path / "reference" / "result.pkl"
    got_out = tmp_path / "candidate" / "result.pkl"

    # Both runs at once: the suite has to stay quick.
    ref_proc = _start(script, ref_out, model_dir)
    got_proc = _start(candidate, got_out, model_dir)
    ref = _finish(ref_proc, f"onnxruntime ({script.name})", ref_out)
    got = _finish(got_proc, f"{MODULE_NAME} ({script.name})", got_out)

    assert isinstance(ref, dict) and ref, "the reference run recorded nothing"
    problems = compare_results(ref, got)
    if problems:
        pytest.fail(
            f"{script.name}: {MODULE_NAME} differs from onnxruntime:\n  " + "\n  ".join(problems),
            pytrace=False,
        )


def test_comparison_catches_differences():
    """The comparison itself must notice what it is meant to notice."""
    import numpy as np

    base = {"y": [np.ones((2, 3), np.float32)], "io": [("X", ["batch", 16], "tensor(float)")], "n": 3}
    assert compare_results(base, base) == []
    assert compare_results(base, {**base, "y": [np.ones((2, 3), np.float32) * (1 + 1e-3)]})
    assert compare_results(base, {**base, "y": [np.ones((2, 3), np.float64)]})
    assert compare_results(base, {**base, "y": [np.ones((3, 2), np.float32)]})
    assert compare_results(base, {**base, "io": [("X", ["batch", "16"], "tensor(float)")]})
    assert compare_results(base, {**base, "io": [("X", ("batch", 16), "tensor(float)")]})
    assert compare_results(base, {**base, "n": np.int64(3)})
    assert compare_results(base, {k: v for k, v in base.items() if k != "n"})
    ints = {"t": np.array([1, 2], np.int64)}
    assert compare_results(ints, {"t": np.array([1, 3], np.int64)})
    words = {"s": np.array(["a", "b"], dtype=object)}
    assert compare_results(words, {"s": np.array(["a", "b"])}) == []
    assert compare_results(words, {"s": np.array([b"a", b"b"], dtype=object)})
    providers = {"providers": ["CPUExecutionProvider"], "device": "CPU"}
    assert compare_results(providers, {"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"], "device": "GPU"}) == []
    assert compare_results(providers, {"providers": ["CUDAExecutionProvider"], "device": "CPU"})
