"""`trace-rl explore`: a self-contained HTML page with the blog's two widgets.

    write_explorer(path, probs=BLOG_PROBS, budget=16) -> path

"eight rollouts, zero signal": P_mix(v, n) = 1 - v^n - (1-v)^n as the success probability v and the group
size n move. "play the allocator": editable prompt estimates and a root budget, the uniform allocation against
TRACE's exact root allocation and the expected number of mixed groups of each. The allocation runs in the page,
in allocate_roots.js, a line-for-line port of `trace_rl.allocation.allocate_roots` (tested equal to it).
No network at view time: the script and styles are inlined.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BLOG_BUDGET", "BLOG_PROBS", "SOLVER_JS", "explorer_html", "write_explorer"]

HERE = Path(__file__).parent
SOLVER_JS = HERE / "allocate_roots.js"
TEMPLATE = HERE / "explorer.html"
BLOG_PROBS = (0.99, 0.90, 0.50, 0.50, 0.15, 0.02)  # the blog's six prompts
BLOG_BUDGET = 16


def explorer_html(probs: Sequence[float] = BLOG_PROBS, budget: int = BLOG_BUDGET) -> str:
    """The explorer page as one HTML string, starting from these prompt estimates and this root budget.

    Raises:
        ValueError: no prompt, a value that is not a probability in [0, 1], or a negative or fractional budget.
    """
    values = [float(p) for p in probs]
    if not values:
        raise ValueError("the explorer needs at least one prompt estimate")
    if any(not math.isfinite(p) or not 0.0 <= p <= 1.0 for p in values):
        raise ValueError(f"prompt estimates must be probabilities in [0, 1]; got {values}")
    if isinstance(budget, bool) or int(budget) != budget or budget < 0:
        raise ValueError(f"budget must be a whole number >= 0; got {budget!r}")
    state = {"probs": values, "budget": int(budget), "budgetMax": max(64, 4 * int(budget))}
    page = TEMPLATE.read_text(encoding="utf-8")
    page = page.replace("/*__SOLVER_JS__*/", SOLVER_JS.read_text(encoding="utf-8"))
    return page.replace("/*__STATE__*/null", json.dumps(state))


def write_explorer(path: str | Path, probs: Sequence[float] = BLOG_PROBS, budget: int = BLOG_BUDGET) -> Path:
    """Write the explorer page to ``path`` (parent folders are created); returns the path."""
    out = Path(path)
    text = explorer_html(probs, budget)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
