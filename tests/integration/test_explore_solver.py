"""The explorer page's JavaScript port of `allocate_roots` equals the Python solver, run in node.

The same port is checked again inside Chromium by tests/browser/test_pages.py (on the page as written).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.explore_cases import python_answer, random_instances

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


@pytest.mark.skipif(NODE is None, reason="node not on PATH (the Chromium test checks the same port)")
def test_js_port_equals_python_solver_on_random_instances(tmp_path: Path) -> None:
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
