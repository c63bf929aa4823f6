"""Claim rules on synthetic per-seed numbers (a claim must be able to fail), CIs by hand, fast claims."""

from __future__ import annotations

import numpy as np
import pytest

from trace_rl.lab import mean_ci
from trace_rl.lab.claims import (
    NOISE_LEVELS,
    Arm,
    ArmResults,
    claim_six_prompt,
    comparison_arms,
    method_claims,
)


def test_mean_ci_by_hand() -> None:
    # [1, 2, 3]: mean 2, sample sd 1, t_{0.975, 2} = 4.303 -> half-width 4.303 / sqrt(3) = 2.4843.
    ci = mean_ci([1.0, 2.0, 3.0])
    assert (ci.mean, ci.low, ci.high) == pytest.approx((2.0, 2.0 - 2.4843, 2.0 + 2.4843), abs=1e-4)
    assert mean_ci([5.0]).low == 5.0
    with pytest.raises(ValueError):
        mean_ci([])
    with pytest.raises(ValueError):
        mean_ci([1.0, np.nan])


def _results(values: dict[str, float], seeds: int = 6) -> ArmResults:
    noise = np.linspace(-0.01, 0.01, seeds)  # small spread so CIs are narrow but not empty
    ratio = {a.label: values.get(a.method, 0.5) + noise for a in comparison_arms()}
    for n in NOISE_LEVELS:  # noisy TRACE arms: as good as the oracle unless overridden
        ratio[Arm("trace", "128x2", f"noisy:{n}").label] = values.get(f"noisy:{n}", values["trace"]) + noise
    return ArmResults(ratio=ratio, rmse_prompt={}, rmse_prefix={})


def test_method_claims_hold_and_fail_by_their_rules() -> None:
    good = {
        "trace": 0.9, "treepo": 0.6, "grpo": 0.4, "pcl": 0.7, "knapsack": 0.7,
        "trace_root_only": 0.8, "trace_prefix_only": 0.75,
    }  # fmt: skip
    claims = {c.id: c for c in method_claims(_results(good))}
    assert claims["trace_vs_treepo_128x2"].holds
    assert claims["ablation_stacking"].holds and claims["trace_vs_flat"].holds
    assert not claims["broad_vs_deep"].holds  # every shape gets the same numbers here: a tie is not a win
    assert claims["noisy_predictor"].holds  # equal shares: no rise
    # A gap of 0.05 is significant but below the 10-point bar; PCL above TRACE breaks trace_vs_flat.
    close = dict(good, treepo=0.85, pcl=0.95)
    claims = {c.id: c for c in method_claims(_results(close))}
    assert not claims["trace_vs_treepo_128x2"].holds
    assert claims["trace_vs_treepo_128x2"].measured["difference"]["mean"] == pytest.approx(0.05)
    assert not claims["trace_vs_flat"].holds
    assert not claims["ablation_stacking"].holds  # treepo 0.85 > root_only 0.8
    # A noisier predictor keeping more than a less noisy one is reported as not holding.
    rising = dict(good, **{"noisy:8": 0.5, "noisy:2": 0.8})
    assert not {c.id: c for c in method_claims(_results(rising))}["noisy_predictor"].holds


def test_six_prompt_claim_reads_the_allocator() -> None:
    c = claim_six_prompt()
    assert c.measured["allocation_at_4"] == [0, 0, 2, 2, 0, 0]  # tight budget: the two coin flips, 2 each
    assert sum(c.measured["allocation_at_48"]) == 48
    assert c.holds == all(c.measured["parts"].values())
    assert set(c.to_dict()) == {"id", "statement", "measured", "expected", "holds"}
