"""Shared fixtures for the onyx parity / CLI tests.

The onyx binary is taken from $ONYX_BIN (default: build/onyx under the repo
root). Test models are generated fresh into a temporary directory by
tools/gen_models.py, so the tests never depend on checked-in model files.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "tools"))

import gen_models  # noqa: E402  (needs the sys.path entry above)

CLI_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def onyx_bin() -> Path:
    path = Path(os.environ.get("ONYX_BIN", "build/onyx"))
    return path if path.is_absolute() else REPO_ROOT / path


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out), quiet=True)
    return out


@pytest.fixture
def run_onyx(onyx_bin):
    """run_onyx(*args) -> CompletedProcess with text stdout/stderr."""

    def run(*args):
        # A missing binary fails the test (not skip, not a setup error): a
        # silently skipped parity suite would look green in CI.
        if not onyx_bin.is_file() or not os.access(onyx_bin, os.X_OK):
            pytest.fail(f"onyx CLI not found (or not executable) at {onyx_bin}; "
                        "build it first or set ONYX_BIN", pytrace=False)
        cmd = [str(onyx_bin), *map(str, args)]
        print("$", " ".join(cmd))
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              timeout=CLI_TIMEOUT_S, cwd=REPO_ROOT)

    return run


@pytest.fixture
def run_python_checks(onyx_bin, tmp_path):
    """run_python_checks(module, function): calls `module.function(onyx.genai)` in a process of its
    own, with this source tree's package and the extension built beside ONYX_BIN when there is one
    (a build whose package is not installed), else the installed package. (An extension module
    cannot be swapped in a process that has imported another build of it.)"""
    import shutil

    def run(module, function, timeout=120):
        path = []
        built = sorted(Path(onyx_bin).parent.glob("_onyx*.so"))
        if built:
            pkg = tmp_path / "pkg" / "onyx"
            if not pkg.exists():
                shutil.copytree(REPO_ROOT / "python" / "onyx", pkg)
                shutil.copy(built[0], pkg / built[0].name)
            path.append(str(pkg.parent))
        path.append(str(Path(__file__).resolve().parent))
        code = (f"import sys; sys.path[:0] = {path!r}; import onyx.genai as og, {module} as t; "
                f"t.{function}(og); print('python api: ok')")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0 and "python api: ok" in r.stdout, r.stdout + r.stderr

    return run
