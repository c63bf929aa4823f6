"""Learning curves (trace_rl.metrics.curves): hand-computed numbers for the curve, its summaries and the cost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trace_rl.metrics import curves as C


def run_records(evals: dict[int, float], spend: list[dict]) -> list[dict]:
    """metrics.jsonl records: one train record per entry of ``spend`` (steps 1..), evals after their step."""
    out: list[dict] = []
    if 0 in evals:
        out.append({"kind": "eval", "step": 0, "eval_accuracy": evals[0]})
    for step, fields in enumerate(spend, start=1):
        out.append({"kind": "train", "step": step, **fields})
        if step in evals:
            out.append({"kind": "eval", "step": step, "eval_accuracy": evals[step]})
    return out


def flat(n: int, cost: float = 64.0) -> list[dict]:
    return [{"budget_spent": cost, "tokens_generated": 1000, "tool_calls": 2} for _ in range(n)]


def curve(xs: list[float], ys: list[float]) -> C.LearningCurve:
    """A curve with evaluations at steps 0..E-1 at the given cumulative rollouts."""
    x = np.asarray(xs, dtype=float)
    return C.LearningCurve(np.arange(len(xs)), np.asarray(ys, dtype=float), x, x, 10 * x, 0 * x)


def test_learning_curve_sums_spend_up_to_and_including_each_evaluation() -> None:
    records = run_records(
        {0: 0.2, 2: 0.4, 3: 0.5},
        [
            {"budget_spent": 64, "rollouts_generated": 64, "tokens_generated": 1000, "tool_calls": 10},
            {"budget_spent": 64, "rollouts_generated": 128, "tokens_generated": 3000, "tool_calls": 5},
            {
                "budget_spent": 64,
                "tokens_generated": 2000,
                "tool_calls": 0,
            },  # no rollouts_generated: 64 stands in
        ],
    )
    records.insert(0, {"kind": "predictor_warm", "step": 0, "budget_spent": 999})  # not a training step
    c = C.learning_curve(records)
    assert c.step.tolist() == [0, 2, 3]
    assert c.accuracy.tolist() == [0.2, 0.4, 0.5]
    assert c.rollouts.tolist() == [0, 192, 256]
    assert c.rollout_equivalents.tolist() == [0, 128, 192]
    assert c.tokens.tolist() == [0, 4000, 6000] and c.tool_calls.tolist() == [0, 15, 15]
    assert not c.rollouts_logged
    assert C.final_accuracy(c) == pytest.approx(0.45)  # mean of steps 2 and 3


def test_learning_curve_missing_fields_and_duplicate_steps() -> None:
    c = C.learning_curve(run_records({1: 0.3, 2: 0.5}, [{"budget_spent": 8}, {"budget_spent": 8}]))
    assert c.rollouts.tolist() == [8, 16] and not c.rollouts_logged  # budget_spent stood in
    assert np.isnan(c.tokens).all()  # no tokens logged: no tokens curve, never a made-up 0
    assert C.final_accuracy(c) == pytest.approx(0.4)
    only_start = C.learning_curve(run_records({0: 0.3}, []))
    assert only_start.rollouts.tolist() == [0] and math.isnan(C.final_accuracy(only_start))
    one = C.learning_curve(run_records({0: 0.1, 5: 0.3}, flat(5)))
    assert C.final_accuracy(one) == pytest.approx(0.3)  # step 0 (before RL) never enters it
    twice = [*run_records({}, flat(2)), {"kind": "train", "step": 2, "budget_spent": 1}]
    with pytest.raises(ValueError, match=r"step\(s\) \[2\] logged more than once"):
        C.learning_curve(twice)
    with pytest.raises(ValueError, match="unknown learning-curve axis"):
        c.axis("wall_s")


def test_area_under_curve_is_the_mean_over_the_range() -> None:
    x, y = np.array([0.0, 100.0, 200.0]), np.array([0.2, 0.4, 0.6])
    assert C.area_under_curve(x, y, 0, 200) == pytest.approx((100 * 0.3 + 100 * 0.5) / 200)  # 0.4
    assert C.area_under_curve(x, y, 0, 150) == pytest.approx((100 * 0.3 + 50 * 0.45) / 150)  # 0.35
    assert C.area_under_curve(x, y, 50, 150) == pytest.approx((50 * 0.35 + 50 * 0.45) / 100)  # 0.4
    assert math.isnan(C.area_under_curve(x, y, 0, 250))  # never extrapolated
    assert math.isnan(C.area_under_curve(x, y, 100, 100))


def test_first_crossing_interpolates_between_evaluations() -> None:
    x, y = np.array([0.0, 100.0, 200.0]), np.array([0.2, 0.4, 0.6])
    assert C.first_crossing(x, y, 0.5) == pytest.approx(150.0)
    assert C.first_crossing(x, y, 0.1) == 0.0 and C.first_crossing(x, y, 0.4) == pytest.approx(100.0)
    assert math.isnan(C.first_crossing(x, y, 0.7)) and math.isnan(C.first_crossing(x, y, math.nan))
    # the first crossing, not the last: 0.2 -> 0.5 crosses 0.45 at 25/30 of the way
    bumpy = C.first_crossing(np.array([0.0, 10, 20, 30]), np.array([0.2, 0.5, 0.3, 0.6]), 0.45)
    assert bumpy == pytest.approx(10 * 0.25 / 0.3)


def test_band_interpolates_each_seed_and_only_where_all_cover() -> None:
    seeds = [curve([0, 100], [0.2, 0.4]), curve([0, 200], [0.3, 0.5])]
    b = C.band(seeds, np.array([0.0, 50, 100, 150]))
    # at 50: (0.3 + 0.35) / 2; at 100: (0.4 + 0.4) / 2; at 150 the first seed has ended
    assert b.mean[:3] == pytest.approx([0.25, 0.325, 0.4]) and np.isnan(b.mean[3])
    half = 12.706 * np.std([0.2, 0.3], ddof=1) / math.sqrt(2)  # t_{0.975, 1} s / sqrt(2)
    assert b.high[0] - b.mean[0] == pytest.approx(half, abs=1e-6) and b.low[0] == pytest.approx(0.25 - half)
    one = C.band(seeds[:1], np.array([0.0, 50]))
    assert one.low.tolist() == one.mean.tolist() == one.high.tolist() == pytest.approx([0.2, 0.3])
    assert C.common_range(seeds) == (0.0, 100.0)
    assert C.grid_for(seeds, points=3).tolist() == [0.0, 100.0, 200.0]


def test_curve_summaries_against_the_baseline_of_the_same_seed() -> None:
    grpo = [curve([0, 64, 128], [0.2, 0.3, 0.4]), curve([0, 64, 128], [0.2, 0.2, 0.2])]
    dapo = [curve([0, 128, 256], [0.2, 0.3, 0.3]), curve([0, 128, 256], [0.2, 0.5, 0.1])]
    trace = [curve([0, 64, 128, 192], [0.2, 0.4, 0.4, 0.5]), curve([0, 64, 128, 192], [0.1, 0.1, 0.1, 0.1])]
    out = C.curve_summaries({"grpo": grpo, "dapo": dapo, "trace": trace}, "grpo")
    g, d, t = out["grpo"][0], out["dapo"][0], out["trace"][0]
    # seed 0: GRPO's final pass@1 is (0.3 + 0.4) / 2 = 0.35, reached half way from 64 to 128
    assert g["final_accuracy"] == pytest.approx(0.35) and g["rollouts_to_baseline_final"] == pytest.approx(96)
    assert g["rollouts_to_baseline_final_share"] == pytest.approx(0.75)
    assert t["rollouts_to_baseline_final"] == pytest.approx(64 * 0.15 / 0.2)  # 48
    assert t["rollouts_to_baseline_final_share"] == pytest.approx(48 / 128)
    assert math.isnan(d["rollouts_to_baseline_final"]) and math.isnan(d["rollouts_to_baseline_final_share"])
    assert t["final_accuracy"] == pytest.approx(0.45) and d["final_accuracy"] == pytest.approx(0.3)
    # AUC over [0, 128], the range every run covers (GRPO's end): the mean of the piecewise-linear curve
    assert g["auc"] == pytest.approx((64 * 0.25 + 64 * 0.35) / 128)
    assert d["auc"] == pytest.approx((128 * 0.25) / 128)
    assert t["auc"] == pytest.approx((64 * 0.3 + 64 * 0.4) / 128)
    # seed 1: GRPO's final pass@1 0.2 is its start; DAPO reaches it at 0, TRACE never
    assert (
        out["grpo"][1]["rollouts_to_baseline_final"] == 0.0
        and out["dapo"][1]["rollouts_to_baseline_final"] == 0
    )
    assert math.isnan(out["trace"][1]["rollouts_to_baseline_final"])
    with pytest.raises(ValueError, match="baseline 'pcl' is not among"):
        C.curve_summaries({"grpo": grpo}, "pcl")


def test_paired_interval_over_the_seeds_where_both_are_defined() -> None:
    mean, half, n = C.paired_interval([0.5, 0.6, 0.7], [0.4, 0.4, 0.5])
    s = np.std([0.1, 0.2, 0.2], ddof=1)
    assert (mean, n) == (pytest.approx(1 / 6), 3) and half == pytest.approx(4.303 * s / math.sqrt(3))
    mean, half, n = C.paired_interval([0.5, math.nan, 0.7], [0.4, 0.4, 0.5])
    assert (mean, n) == (pytest.approx(0.15), 2) and half == pytest.approx(
        12.706 * np.std([0.1, 0.2], ddof=1) / 2**0.5
    )
    assert C.paired_interval([math.nan], [0.1])[2] == 0


def test_run_cost_per_step_and_total() -> None:
    records = run_records(
        {0: 0.1},
        [
            {"budget_spent": 64, "rollouts_generated": 64, "tokens_generated": 1000, "tool_calls": 10},
            {"budget_spent": 64, "rollouts_generated": 128, "tokens_generated": 3000, "tool_calls": 5},
            {"budget_spent": 64, "tokens_generated": 2000, "tool_calls": 0},
        ],
    )
    cost = C.run_cost(records)
    assert cost["steps"] == 3 and cost["rollouts_generated_total"] == 256
    assert cost["rollouts_generated"] == pytest.approx(256 / 3) and cost["rollouts_generated_logged"] == 0.0
    assert (cost["budget_spent"], cost["budget_spent_total"]) == (64, 192)
    assert (cost["tokens_generated"], cost["tokens_generated_total"]) == (2000, 6000)
    assert (cost["tool_calls"], cost["tool_calls_total"]) == (5, 15)
    partial = C.run_cost(run_records({}, [{"budget_spent": 4, "tokens_generated": 7}, {"budget_spent": 4}]))
    assert "tokens_generated" not in partial and partial["budget_spent_total"] == 8  # never a partial sum
    assert C.run_cost([]) == {"steps": 0.0}


def test_step_means_leave_out_a_metric_some_record_lacks() -> None:
    from trace_rl.train.rundir import summarize

    train = [
        {"effective_ratio": 0.5, "wall_s": 2.0, "skip_rate": 0.1, "budget_spent": 8},
        {"effective_ratio": 0.25, "wall_s": None, "budget_spent": 4},  # null (a NaN written by strict_json)
        {"effective_ratio": 0.0, "wall_s": 4.0, "skip_rate": 0.3, "budget_spent": 6, "rollouts_generated": 9},
    ]
    means = C.step_means(train, ["effective_ratio", "wall_s", "skip_rate", "rollouts_generated"], totals=True)
    # rollouts_generated: 8 and 4 stand in from budget_spent where it was not logged
    assert means == {
        "effective_ratio": 0.25,
        "effective_ratio_total": 0.75,
        "rollouts_generated": 7.0,
        "rollouts_generated_total": 21.0,
    }
    assert C.step_means([], ["effective_ratio"]) == {}
    assert C.step_means([{"x": True}, {"x": math.inf}], ["x"]) == {}  # a bool and an infinity are no numbers
    # summarize (compare's per-run numbers) averages with the same helper: the missing metric is left out
    records = [{"kind": "train", "step": k + 1, **r} for k, r in enumerate(train)]
    records.append({"kind": "eval", "step": 3, "eval_accuracy": 0.4})
    assert summarize(records) == {
        "effective_ratio": 0.25,
        "budget_spent": 6.0,
        "eval_accuracy": 0.4,
        "eval_accuracy_first": 0.4,
    }


def test_one_finite_number_rule() -> None:
    from trace_rl.metrics.numbers import finite_or_none, is_finite_number, number

    assert [is_finite_number(x) for x in (3, 2.5, np.float64(1.0), True, math.nan, -math.inf, "3", None)] == [
        True, True, True, False, False, False, False, False,
    ]  # fmt: skip
    assert number(3) == 3.0 and number(-math.inf) == -math.inf
    assert all(math.isnan(number(x)) for x in (True, "3", None, [1]))
    assert finite_or_none(2) == 2.0 and finite_or_none(math.nan) is None and finite_or_none(math.inf) is None
    assert C.finite_or_none is finite_or_none  # its old import path


def test_curves_document_is_strict_json() -> None:
    import json

    grpo = [C.learning_curve(run_records({0: 0.2, 2: 0.4}, flat(2)))]
    trace = [C.learning_curve(run_records({0: 0.2, 2: 0.3}, flat(2, 32.0)))]
    doc = C.curves_document({"grpo": grpo, "trace": trace}, "grpo", points=3)
    text = json.dumps(doc, allow_nan=False)  # raises on a NaN
    assert doc["auc_range"] == {"axis": "rollouts", "low": 0.0, "high": 64.0}
    assert doc["methods"]["trace"]["summary"][0]["rollouts_to_baseline_final"] is None  # not reached
    assert doc["methods"]["grpo"]["bands"]["rollouts"]["grid"] == [0.0, 64.0, 128.0]
    assert doc["methods"]["trace"]["bands"]["rollouts"]["mean"] == [0.2, 0.3, None]  # trace ends at 64
    assert doc["methods"]["grpo"]["seeds"][0]["tokens"] == [0.0, 2000.0] and "interpolation" in text


def test_compare_pairs_only_the_seeds_where_both_runs_define_a_number() -> None:
    from trace_rl.train.compare import paired_differences

    per_method = {
        "grpo": {"runs": [{"final_accuracy": 0.3, "rollouts_to_baseline_final": 480.0}] * 3},
        "trace": {
            "runs": [
                {"final_accuracy": 0.4, "rollouts_to_baseline_final": 360.0},
                {"final_accuracy": 0.5, "rollouts_to_baseline_final": None},  # not reached
                {"final_accuracy": 0.6, "rollouts_to_baseline_final": 240.0},
            ]
        },
    }
    out = paired_differences(per_method, ["grpo", "trace"], 3, baseline="grpo")["trace-grpo"]
    assert out["final_accuracy"]["mean"] == pytest.approx(0.2) and out["final_accuracy"]["n"] == 3
    half = 4.303 * 0.1 / math.sqrt(3)
    assert out["final_accuracy"]["ci_high"] == pytest.approx(0.2 + half, abs=1e-9)
    reach = out["rollouts_to_baseline_final"]
    assert (reach["mean"], reach["n"]) == (pytest.approx(-180.0), 2.0)  # (-120 - 240) / 2 over two pairs
    assert "auc" not in out  # not logged by either: no row, never a made-up 0


def test_report_names_the_run_whose_log_counts_a_step_twice(tmp_path) -> None:
    import json

    from tests.report_examples import write_run
    from trace_rl.metrics.report import write_report

    records = write_run(tmp_path, "trace", steps=3)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(records[1]) + "\n")  # step 1 again
    with pytest.raises(ValueError, match=r"trace seed 0 \(its metrics\.jsonl\): training step\(s\) \[1\]"):
        write_report(tmp_path)


def test_compare_prints_the_curve_and_cost_table() -> None:
    from trace_rl.cli.compare import curve_lines

    result = {
        "curves": {"baseline": "grpo", "auc_range": {"low": 0.0, "high": 640.0}},
        "methods": {
            "grpo": {"seeds": 2, "final_accuracy": 0.35, "auc": 0.3, "rollouts_to_baseline_final": 480.0}
            | {"rollouts_to_baseline_final_reached": 2, "rollouts_generated": 64.0, "tool_calls_total": 40.0}
            | {"auc_rollout_equivalents": 0.31, "rollout_equivalents_to_baseline_final": 320.0}
            | {"rollout_equivalents_to_baseline_final_reached": 2},
            "dapo": {"seeds": 2, "final_accuracy": 0.315, "rollouts_to_baseline_final_reached": 0},
            "trace": {"seeds": 2, "rollouts_generated": 58.9, "rollouts_generated_total": 5888.0}
            | {"probe_rollouts_generated": 512.0},
        },
        "paired": {
            "dapo-grpo": {"final_accuracy": {"mean": -0.035, "ci_low": -0.05, "ci_high": -0.02, "n": 2.0}}
        },
    }
    lines = curve_lines(result)
    assert "generated rollouts 0..640" in lines[0]
    assert (
        "final=0.350 auc=0.300 reach=480 (2/2 seeds) auc_eq=0.310 reach_eq=320 (2/2 seeds) rollouts=64.0/-"
        in lines[1]
    )
    assert "tool_calls=-/40" in lines[1]
    assert "final=0.315 auc=- reach=- (0/2 seeds)" in lines[2]
    assert "(+" not in lines[1] + lines[2]  # no probe charged to grpo or dapo: nothing added
    assert "rollouts=58.9/5,888 (+512 probe) " in lines[3]
    assert (
        lines[4].split() == "dapo-grpo final -0.035 [-0.050, -0.020] (n=2) (paired 95% t-intervals)".split()
    )


def test_summaries_on_the_rollout_equivalents_axis() -> None:
    # TRACE generates 96 rollouts a step (replays count 1 each) for 64 rollout-equivalents (a replay costs 0.5)
    grpo = [C.learning_curve(run_records({0: 0.2, 2: 0.4}, flat(2)))]
    step = {"budget_spent": 64, "rollouts_generated": 96, "tokens_generated": 900, "tool_calls": 1}
    trace = [C.learning_curve(run_records({0: 0.2, 1: 0.35, 2: 0.45}, [step, step]))]
    assert C.summary_keys("rollout_equivalents") == (
        "auc_rollout_equivalents",
        "rollout_equivalents_to_baseline_final",
        "rollout_equivalents_to_baseline_final_share",
    )
    doc = C.curves_document({"grpo": grpo, "trace": trace}, "grpo", points=3)
    t = doc["methods"]["trace"]["summary"][0]
    # GRPO's final pass@1 0.4 (one evaluation after step 0); TRACE's curve reaches it half way through step 2
    assert t["rollouts_to_baseline_final"] == pytest.approx(144.0)  # 96 + 48 generated rollouts
    assert t["rollouts_to_baseline_final_share"] == pytest.approx(144 / 128)
    assert t["rollout_equivalents_to_baseline_final"] == pytest.approx(96.0)  # 64 + 32 rollout-equivalents
    assert t["rollout_equivalents_to_baseline_final_share"] == pytest.approx(0.75)
    # both AUCs over [0, 128] (GRPO's end on either axis)
    assert t["auc"] == pytest.approx((96 * 0.275 + 32 * (0.35 + 0.35 + 0.1 / 3) / 2) / 128)
    assert t["auc_rollout_equivalents"] == pytest.approx((64 * 0.275 + 64 * 0.4) / 128)
    assert doc["auc_ranges"] == {
        "rollouts": {"low": 0.0, "high": 128.0},
        "rollout_equivalents": {"low": 0.0, "high": 128.0},
    }
    with pytest.raises(ValueError, match="unknown learning-curve axis"):
        C.summary_keys("steps")


def test_read_metrics_reads_a_compressed_log_like_the_plain_one(tmp_path) -> None:
    # logs kept in results/ are gzip-compressed; the curves read from them equal those of the plain log
    import gzip

    from trace_rl.metrics.curves import learning_curve
    from trace_rl.train.rundir import append_jsonl, read_metrics

    plain = tmp_path / "metrics.jsonl"
    for record in (
        {"kind": "eval", "step": 0, "eval_accuracy": 0.25},
        {"kind": "train", "step": 1, "budget_spent": 64.0, "rollouts_generated": 64, "tokens_generated": 900},
        {"kind": "eval", "step": 1, "eval_accuracy": 0.5},
    ):
        append_jsonl(plain, record)
    packed = tmp_path / "metrics.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes() + b'{"kind": "train", "st'))  # torn last line
    assert read_metrics(packed) == read_metrics(plain) and len(read_metrics(plain)) == 3
    a, b = learning_curve(read_metrics(plain)), learning_curve(read_metrics(packed))
    assert a.accuracy.tolist() == b.accuracy.tolist() == [0.25, 0.5] and b.tokens.tolist() == [0.0, 900.0]
