"""benchmarks/kb_regime.py (issue 59 item 3): the regime map's resampling estimators on synthetic outcome tables
whose answers are known in closed form or by hand, its equal-token accounting, and its refusal of malformed tables."""

from __future__ import annotations

import importlib.util
import sys
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "kb_regime_bench", Path(__file__).parents[2] / "benchmarks" / "kb_regime.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up
_spec.loader.exec_module(bench)


def _anchor(
    rollout: int, depth: int, replays: list[float], tokens: int = 50, value: float = 0.5
) -> dict[str, Any]:
    return {
        "rollout": rollout,
        "depth": depth,
        "replays": replays,
        "replay_tokens": [tokens] * len(replays),
        "prefix_tokens": 100 + 50 * depth,
        "value": value,
    }


def _record(
    roots: list[float], anchors: list[dict[str, Any]], *, depth: int = 2, turns: int = 3
) -> dict[str, Any]:
    return {
        "question_depth": depth,
        "roots": roots,
        "root_tokens": [100] * len(roots),
        "root_turns": [turns] * len(roots),
        "anchors": anchors,
    }


def _two_root_table() -> Any:
    """Two failed roots of 100 tokens; root 0 has anchors A (q = 1/2 against its reward 0) and B (q = 1), root 1
    one anchor C (q = 0); every replay costs 50 tokens (half a rollout)."""
    (p,) = bench.load_prompts(
        [
            _record(
                [0.0, 0.0],
                [
                    _anchor(0, 1, [1.0, 1.0, 0.0, 0.0]),
                    _anchor(0, 2, [0.0, 0.0, 0.0, 0.0]),
                    _anchor(1, 1, [1.0, 1.0, 1.0, 1.0]),
                ],
            )
        ]
    )
    return p


def test_independent_mixed_is_unbiased_for_the_closed_form() -> None:
    assert bench.independent_mixed(2, 4, 2) == pytest.approx(1 - 2 / 6)  # 4 of the 6 pairs are mixed
    n, m = 8, 4
    for p in (0.1, 0.5, 0.8):
        law = [comb(n, s) * p**s * (1 - p) ** (n - s) for s in range(n + 1)]
        expected = sum(w * bench.independent_mixed(s, n, m) for s, w in enumerate(law))
        assert expected == pytest.approx(1 - p**m - (1 - p) ** m)


def test_power_estimate_is_unbiased_up_to_n_and_plug_in_beyond() -> None:
    n, q = 6, 0.7
    for k in range(n + 1):
        law = [comb(n, f) * (1 - q) ** f * q ** (n - f) for f in range(n + 1)]
        assert sum(w * bench.power_estimate(f, n, k)[0] for f, w in enumerate(law)) == pytest.approx(q**k)
    assert bench.power_estimate(1, 4, 6) == pytest.approx((0.75**6, True))
    with pytest.raises(ValueError):
        bench.power_estimate(5, 4, 1)


def test_independent_arm_counts_mixed_subsets_at_exactly_b_rollouts_of_tokens() -> None:
    (p,) = bench.load_prompts([_record([1.0, 0.0, 0.0, 0.0], [])])
    out = bench.prompt_sums(p, "independent", 2)
    assert out["mixed"] == pytest.approx(0.5)  # 3 of the 6 root pairs hold the success
    assert out["generated_tokens"] == pytest.approx(200.0)
    assert out["replays"] == 0 and out["prefill_tokens"] == 0


def test_random_anchor_flips_and_mixed_by_hand() -> None:
    """Budget 2, m = 1 root, 100 tokens left = 2 replays of 50. Subset {root 0}: k ~ Multinomial(2, (1/2, 1/2)) on
    A, B: P(no flip) = 1/4 C(2,2)/C(4,2) + 1/2 (2/4)(1) + 1/4 (1) = 13/24, flips 2 x 1/4. Subset {root 1}: both
    replays on C, which always flips: mixed 1, flips 2."""
    p = _two_root_table()
    out = bench.prompt_sums(p, "treepo", 2, draws=4000, seed=1)
    assert out["mixed"] == pytest.approx((11 / 24 + 1) / 2, abs=0.01)
    assert out["flips"] / out["replays"] == pytest.approx(2.5 / 4, abs=0.01)
    assert out["replays"] == pytest.approx(2.0)


def test_oracle_is_cross_fitted_and_the_in_sample_variant_is_not() -> None:
    """Subset {root 0}, fold 1: the first halves read A = [1, 1] (q = 0), B = [0, 0] (q = 1): both replays on A,
    scored on A's second half [0, 0]: no flip, not mixed. Fold 2: the second halves read q = 1 on both: a tie,
    spread (1, 1), scored on the first halves: A's replay always flips: mixed, 1 flip. Subset {root 1}: both on C,
    2 flips, mixed. In-sample: A (q = 1/2) gets both; C(2, 2) / C(4, 2) = 1/6 repeat, 1 flip expected."""
    p = _two_root_table()
    oracle = bench.prompt_sums(p, "oracle", 2)
    assert oracle["mixed"] == pytest.approx((0.5 + 1) / 2)
    assert oracle["flips"] == pytest.approx((0.5 + 2) / 2)
    insample = bench.prompt_sums(p, "oracle_insample", 2)
    assert insample["mixed"] == pytest.approx((5 / 6 + 1) / 2)
    assert insample["flips"] == pytest.approx((1 + 2) / 2)


def test_equal_token_accounting_charges_replays_their_own_tokens() -> None:
    p = _two_root_table()
    for arm in ("treepo", "branpo", "trace", "oracle", "oracle_insample"):
        out = bench.prompt_sums(p, arm, 2, draws=8)
        assert out["generated_tokens"] == pytest.approx(200.0)  # 1 root (100) + 2 replays (50 each)
        assert out["prefill_tokens"] > 0  # re-read prefixes: reported, never charged
    assert bench.token_units([50, 10, 0], 100.0).tolist() == [32, 6, 1]
    with pytest.raises(ValueError):
        bench.token_units([10], 0.0)


def test_advantage_error_of_one_replay_by_hand() -> None:
    """Anchor on a failed root (r = 0) with s = 1/2, its child the leaf (s = r = 0): Delta = -1/2. One replay:
    A-hat = (0 - y) / 2, so E(A-hat - Delta)^2 = (-1/4 + 1/2)^2 + 1/4 * 1/4 = 1/8."""
    (p,) = bench.load_prompts([_record([0.0], [_anchor(0, 2, [1.0, 0.0, 1.0, 0.0])])])
    out = bench.tree_sums(p, [0], np.array([1]), np.array([0]), score="all")
    assert out["adv_sq"] == pytest.approx(1 / 8) and out["adv_n"] == 1
    assert out["mixed"] == pytest.approx(0.5) and out["flips"] == pytest.approx(0.5)


def test_cells_have_standard_errors_and_paired_differences() -> None:
    rng = np.random.default_rng(0)
    records = [
        _record(
            [float(x) for x in rng.integers(0, 2, 4)],
            [_anchor(r, 1, [float(x) for x in rng.integers(0, 2, 4)]) for r in range(4)],
        )
        for _ in range(5)
    ]
    cells = bench.regime_map(bench.load_prompts(records), budgets=(2, 4), depths=(2,), draws=4, boot=50)
    assert {(c["budget"], c["arm"]) for c in cells} == {(b, a) for b in (2, 4) for a in bench.ARMS}
    for c in cells:
        assert c["prompts"] == 5 and np.isfinite(c["mixed_per_1k_se"])
        assert ("mixed_per_1k_minus_independent" in c) == (c["arm"] != "independent")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("root_tokens"), "token counts"),
        (lambda r: r["anchors"][0].pop("replay_tokens"), "token counts"),
        (lambda r: r.update(roots=[0.5, 0.0]), "binary"),
        (lambda r: r["anchors"][0].update(rollout=7), "no root"),
        (lambda r: r["anchors"][0].update(replays=[1.0], replay_tokens=[5]), ">= 2 replays"),
        (lambda r: r.update(root_turns=[3]), "one length"),
    ],
)
def test_malformed_tables_are_refused(change: Any, message: str) -> None:
    record = _record([0.0, 1.0], [_anchor(0, 1, [1.0, 0.0])])
    change(record)
    with pytest.raises(ValueError, match=message):
        bench.load_prompts([record])
    with pytest.raises(ValueError, match="no prompts"):
        bench.load_prompts([])


def test_a_budget_beyond_the_kept_roots_is_refused() -> None:
    (p,) = bench.load_prompts([_record([0.0, 1.0], [])])
    with pytest.raises(ValueError, match="needs 4 roots"):
        bench.prompt_sums(p, "independent", 4)


def test_main_reads_gzipped_tables_once_per_task_and_prints_json_last(tmp_path: Path, capsys: Any) -> None:
    import gzip
    import json

    rng = np.random.default_rng(1)
    records = [
        {
            **_record(
                [float(x) for x in rng.integers(0, 2, 4)],
                [_anchor(r, 1, [float(x) for x in rng.integers(0, 2, 4)]) for r in range(4)],
            ),
            "task": f"t{i}",
        }
        for i in range(3)
    ]
    with gzip.open(tmp_path / "a.json.gz", "wt") as f:
        json.dump({"prompts_data": records}, f)
    (tmp_path / "b.json").write_text(json.dumps({"prompts_data": records[:1]}))  # t0 again: kept once
    bench.main(
        [
            "--data",
            str(tmp_path / "a.json.gz"),
            str(tmp_path / "b.json"),
            "--budgets",
            "2",
            "--draws",
            "2",
            "--boot",
            "10",
            "--json-out",
            str(tmp_path / "map.json"),
        ]
    )
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads((tmp_path / "map.json").read_text())
    assert last["prompts_by_depth"] == {"2": 3} and {c["arm"] for c in last["cells"]} >= set(bench.ARMS)
    (tmp_path / "c.json").write_text(json.dumps({"trees": 1}))
    with pytest.raises(ValueError, match="not a kb_oracle"):
        bench.read_table(tmp_path / "c.json")
