"""`trace-rl explore`: the command writes the page; its JavaScript port of `allocate_roots` equals the Python
solver, run in node. The same port is checked again inside Chromium by tests/browser/test_pages.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.explore_cases import python_answer, random_instances
from tests.runners import require

from trace_rl.explore import SOLVER_JS

NODE = shutil.which("node")


NODE_DRIVER = """
const api = require(process.argv[1]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = cases.map((c) => {
  try { return api.allocateRoots(c.v, c.budget, c); }
  catch (e) { if (e.name !== "ValueError") throw e; return null; }
});
process.stdout.write(JSON.stringify(out));
"""


def test_js_port_equals_python_solver_on_random_instances(tmp_path: Path) -> None:
    require("node", NODE is not None)  # never skips: fails naming what to install
    cases = random_instances(5000, seed=17)
    cases += [  # the blog's six prompts, and budgets that cannot be spent
        {"v": [0.99, 0.9, 0.5, 0.5, 0.15, 0.02], "budget": b} for b in range(0, 65)
    ]
    res = subprocess.run(
        [str(NODE), "-e", NODE_DRIVER, str(SOLVER_JS)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(res.stdout)
    expected = [python_answer(c) for c in cases]
    wrong = [(c, e, g) for c, e, g in zip(cases, expected, got, strict=True) if e != g]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, first: {wrong[0]}"
    assert sum(e is None for e in expected) > 50  # the infeasible cases are exercised too
    assert got[len(cases) - 65 + 16] == [0, 3, 4, 4, 5, 0]  # the blog's allocation at budget 16


def test_explore_command_writes_a_self_contained_page(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "explore.html"
    cli = [sys.executable, "-m", "trace_rl.cli.main", "explore"]
    res = subprocess.run([*cli, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = out.read_text()
    assert (
        SOLVER_JS.read_text() in page and '"probs": [0.99, 0.9, 0.5, 0.5, 0.15, 0.02], "budget": 16' in page
    )
    assert "data-role='trace-count'" in page and "data-role='uniform-count'" in page
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # nothing fetched at view time
    custom = subprocess.run(
        [*cli, "--out", str(tmp_path / "b.html"), "--probs", "0.3,0.7", "--budget", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert custom.returncode == 0 and '"probs": [0.3, 0.7], "budget": 5' in (tmp_path / "b.html").read_text()
    for bad, message in (
        (["--out", str(tmp_path / "x.png")], "must name an .html file"),
        (["--out", str(tmp_path / "x.html"), "--probs", "0.5,1.5"], "probabilities in [0, 1]"),
        (["--out", str(tmp_path / "x.html"), "--budget", "-1"], "whole number >= 0"),
    ):
        res = subprocess.run([*cli, *bad], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
