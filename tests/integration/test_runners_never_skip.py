"""The node, browser and sandbox tests never skip: without their runner they fail naming what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runners import INSTALL, require

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", target],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_require_fails_naming_what_to_install() -> None:
    with pytest.raises(pytest.fail.Exception, match="apt-get install nodejs"):
        require("node", False)
    require("node", True)
    assert "bubblewrap" in INSTALL["sandbox"] and "chromium" in INSTALL["chromium"]


@pytest.mark.parametrize(
    ("target", "env", "words"),
    [
        # node and the sandbox tools are found on PATH: a PATH with only the interpreter hides them
        (
            "tests/integration/test_explore.py::test_js_port_equals_python_solver_on_random_instances",
            {"PATH": str(Path(sys.executable).parent)},
            "install Node.js",
        ),
        (
            "tests/integration/test_sandbox_hostile.py::test_plain_code_runs",
            {"PATH": str(Path(sys.executable).parent)},
            "install bubblewrap",
        ),
        (
            "tests/browser/test_pages.py",
            {"TRACE_RL_CHROMIUM": "/nonexistent/chromium"},
            "install Debian's chromium",
        ),
    ],
)
def test_a_missing_runner_fails_instead_of_skipping(target: str, env: dict[str, str], words: str) -> None:
    res = run_pytest(target, env)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "skipped" not in out and words in out, out
