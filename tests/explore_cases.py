"""Random root-allocation problems for checking the explorer's JavaScript solver against `allocate_roots`."""

from __future__ import annotations

import numpy as np

from trace_rl.allocation import allocate_roots


def random_instances(n_cases: int, seed: int) -> list[dict]:
    """Random root-allocation problems: continuous v, 0.01 and 0.1 grids, ties, 0 and 1, and pairs (x, 1 - x),
    whose increments are equal up to rounding: there only the same floating-point operations give the same
    allocation (the Python solver with np.power differed from the port on about 0.4 % of such problems)."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n_cases):
        p = int(rng.integers(0, 13))
        kind = i % 5
        if kind == 0:
            v = rng.random(p)
        elif kind == 1:
            v = np.round(rng.random(p), 2)
        elif kind == 2:
            v = rng.choice([0.0, 0.02, 0.15, 0.3, 0.5, 0.7, 0.85, 0.9, 0.98, 0.99, 1.0], size=p)
        elif kind == 3:
            v = np.round(rng.random(p), 1)
        else:
            x = np.round(rng.uniform(0.01, 0.5, size=(p + 1) // 2), 2)
            v = rng.permutation(np.round(np.concatenate([x, 1.0 - x]), 2))[: max(p, 2)]
        case = {"v": v.tolist(), "budget": int(rng.integers(0, 90))}
        if rng.random() < 0.3:
            case["minRollouts"] = int(rng.integers(1, 4))
        if rng.random() < 0.4:
            case["maxRollouts"] = int(rng.integers(1, 12))
        if rng.random() < 0.3:
            case["maxActive"] = int(rng.integers(0, p + 2))
        cases.append(case)
    return cases


def python_answer(case: dict) -> list[int] | None:
    try:
        m = allocate_roots(
            case["v"],
            case["budget"],
            min_rollouts=case.get("minRollouts", 2),
            max_rollouts=case.get("maxRollouts"),
            max_active=case.get("maxActive"),
        )
    except ValueError:
        return None
    return m.tolist()
