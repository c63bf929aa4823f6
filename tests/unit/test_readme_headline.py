"""The demo and agentic accuracy numbers of README.md and docs/results.md are what `scripts/paired_runs.py` prints from
the kept logs in results/c39 and results/c37v2 (issue 39: every reported number recomputes from what is kept). Read from
paired_runs.py's printed output, independently of scripts/claims.py, which writes those tables (tests/unit/test_claims.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("paired_runs_script", ROOT / "scripts" / "paired_runs.py")
assert _spec is not None and _spec.loader is not None
paired_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paired_runs)

SEEDS = "0,1,2,3,4,5"


def _pages() -> str:
    """README.md and docs/results.md as one text, line breaks as spaces."""
    return " ".join(" ".join((ROOT / page).read_text().split()) for page in ("README.md", "docs/results.md"))


def _printed(capsys: pytest.CaptureFixture[str], baseline: str, methods: str) -> dict[str, str]:
    """'METHOD - BASELINE final' -> '+0.020 [+0.007, +0.033]' (mean and paired t-interval) as printed."""
    assert (
        paired_runs.main(["results/c39", "--baseline", baseline, "--methods", methods, "--seeds", SEEDS]) == 0
    )
    out = capsys.readouterr().out
    rows = re.findall(r"^(\w+ - \w+ \w+): ([+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\])", out, flags=re.M)
    return dict(rows)


def test_readme_demo_numbers_are_what_paired_runs_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    readme = _pages()
    vs_grpo = _printed(capsys, "grpo", "trace,pcl,dapo")
    vs_pcl = _printed(capsys, "pcl", "trace")
    vs_dapo = _printed(capsys, "dapo", "trace")
    assert f"TRACE - GRPO, final held-out pass@1: **{vs_grpo['trace - grpo final']}**" in readme
    for row in (
        vs_pcl["trace - pcl final"],
        vs_dapo["trace - dapo final"],
        vs_grpo["trace - grpo auc_rollouts"],
    ):
        assert row in readme, row


def test_readme_agentic_numbers_are_what_paired_runs_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """Issue 37's five-seed numbers recompute from the logs kept in results/c37v2."""
    monkeypatch.chdir(ROOT)
    readme = _pages()
    for baseline, methods in (
        ("grpo", "trace,pcl,trace_root_only,treepo"),
        ("trace_root_only", "trace"),
        ("pcl", "trace"),
    ):
        args = ["results/c37v2", "--baseline", baseline, "--methods", methods, "--seeds", "0,1,2,3,4"]
        # issue 37's seeds ran on three commits (results/README.md): pairing them needs the explicit flag
        assert paired_runs.main(args) == 2
        assert "ran different code or a dirty tree" in capsys.readouterr().err
        assert paired_runs.main([*args, "--allow-mixed-commits"]) == 0
        out = capsys.readouterr().out
        for method in methods.split(","):
            found = re.search(
                rf"^{method} - {baseline} final: ([+-]\d\.\d{{3}} \[[+-]\d\.\d{{3}}, [+-]\d\.\d{{3}}\])",
                out,
                re.M,
            )
            assert found is not None and found.group(1) in readme, (method, baseline)
