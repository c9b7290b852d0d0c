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
