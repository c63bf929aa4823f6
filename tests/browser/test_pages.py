"""Both pages in a real browser: Debian's chromium driven by Playwright (tests/browser/chromium.py).

The explorer: default counts equal `allocate_roots`, moving the budget slider and editing an estimate updates
them, the zero-signal slider updates P(mixed), and the page's solver equals the Python one on random problems
inside Chromium. The dashboard: a run and a compare folder render with every plot, at 1280 px without
horizontal scrolling. Every page: no console error, no request leaves the page. Screenshots go to tmp_path, or
to $TRACE_RL_SCREENSHOTS when set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.chromium import WIDTH, browser, chromium_path
from tests.explore_cases import python_answer, random_instances
from tests.report_examples import write_compare, write_run
from tests.runners import require
from trace_rl.allocation import allocate_roots, mixed_probability
from trace_rl.cli.allocate import uniform_allocation
from trace_rl.explore import BLOG_BUDGET, BLOG_PROBS, write_explorer
from trace_rl.metrics.report import write_report


@pytest.fixture(scope="module")
def context() -> Iterator[Any]:
    require("chromium", chromium_path() is not None)  # never skips: fails naming what to install
    with browser() as ctx:  # closed, with its processes, when the module's tests are done
        yield ctx


class Watched:
    """A page whose console errors, uncaught exceptions and requests are recorded."""

    def __init__(self, context: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = context.new_page()
        self.page.set_viewport_size({"width": WIDTH, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())

    def texts(self, role: str) -> list[str]:
        return self.page.locator(f'[data-role="{role}"]').all_inner_texts()

    def check_clean(self) -> None:
        assert self.errors == [], self.errors
        outside = [u for u in self.requests if not u.startswith(("file:", "data:"))]
        assert outside == [], outside

    def shot(self, tmp_path: Path, name: str) -> Path:
        folder = Path(os.environ.get("TRACE_RL_SCREENSHOTS") or tmp_path)
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / name
        self.page.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 10_000
        return out


def counts(watched: Watched, role: str) -> list[int]:
    return [int(t) for t in watched.texts(role)]


def test_explorer_in_chromium(context: Any, tmp_path: Path) -> None:
    started = time.perf_counter()
    w = Watched(context, write_explorer(tmp_path / "explore.html"))
    v = list(BLOG_PROBS)
    assert counts(w, "trace-count") == allocate_roots(v, BLOG_BUDGET).tolist() == [0, 3, 4, 4, 5, 0]
    assert counts(w, "uniform-count") == uniform_allocation(6, BLOG_BUDGET).tolist() == [3, 3, 3, 3, 2, 2]
    m = allocate_roots(v, BLOG_BUDGET)
    assert w.texts("trace-expected") == [f"{mixed_probability(v, m).sum():.3f}"] == ["2.576"]
    assert w.texts("uniform-expected") == ["2.094"]
    w.shot(tmp_path, "explorer.png")

    # move the budget slider with the keyboard, as a reader would: 16 -> 24
    slider = w.page.locator("#budget-slider")
    slider.focus()
    for _ in range(8):
        slider.press("ArrowRight")
    assert w.texts("budget-value") == ["24 rollouts"]
    assert counts(w, "trace-count") == allocate_roots(v, 24).tolist()
    assert counts(w, "uniform-count") == uniform_allocation(6, 24).tolist()

    # edit one estimate: the allocation follows
    w.page.locator('[data-role="prompt-v"]').nth(5).fill("0.4")
    v[5] = 0.4
    assert counts(w, "trace-count") == allocate_roots(v, 24).tolist()

    # a budget no allocation can spend (one rollout; active prompts need two) is said, not thrown
    slider.fill("1")
    assert "cannot spend a root budget of 1" in w.texts("error")[0]
    assert w.texts("trace-count") == ["–"] * 6 and counts(w, "uniform-count") == [1, 0, 0, 0, 0, 0]

    # eight rollouts, zero signal: 0.95 -> 0.90 at n = 8
    vs = w.page.locator("#v-slider")
    vs.focus()
    for _ in range(5):
        vs.press("ArrowLeft")
    assert w.texts("v-value") == ["0.90"]
    assert w.texts("p-mixed") == [f"{100 * (1 - 0.9**8 - 0.1**8):.1f} %"] == ["57.0 %"]

    # the page's own solver, in Chromium, on random problems
    cases = random_instances(600, seed=23)
    got = w.page.evaluate(
        """cases => cases.map(c => {
             try { return TraceAllocation.allocateRoots(c.v, c.budget, c); }
             catch (e) { if (e.name !== "ValueError") throw e; return null; } })""",
        cases,
    )
    assert got == [python_answer(c) for c in cases]
    w.check_clean()
    w.page.close()
    print(f"explorer browser test: {time.perf_counter() - started:.1f} s")


def _dashboard(context: Any, folder: Path, tmp_path: Path, name: str) -> Watched:
    w = Watched(context, write_report(folder))
    loaded = w.page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
    assert loaded and all(loaded), loaded
    width = w.page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"the page scrolls sideways at {WIDTH} px: {width} px wide"
    w.shot(tmp_path, name)
    w.check_clean()
    return w


def test_dashboards_in_chromium(context: Any, tmp_path: Path) -> None:
    run = _dashboard(context, _run_folder(tmp_path), tmp_path, "report_run.png")
    values = run.page.locator("[data-role='headline'] .value").all_inner_texts()
    assert values[:3] == ["49.5 %", "43.0 % → 46.0 %", "45.0 %"]
    run.page.locator("details summary").click()  # the last-step table opens, formatted
    assert run.page.locator("details td", has_text="0.4716").count() == 1
    cmp = _dashboard(context, _compare_folder(tmp_path), tmp_path, "report_compare.png")
    rows = cmp.page.locator("[data-role='compare-table'] tr[data-method]").all_inner_texts()
    assert [r.split()[0] for r in rows] == ["grpo", "trace"]
    assert "+20.0 pts" in rows[1]


def _run_folder(tmp_path: Path) -> Path:
    write_run(tmp_path / "run")
    return tmp_path / "run"


def _compare_folder(tmp_path: Path) -> Path:
    write_compare(tmp_path / "cmp", {"grpo": [-0.2, -0.18, -0.22], "trace": [0.0, 0.02, -0.02]})
    return tmp_path / "cmp"
