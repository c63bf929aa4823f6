"""The run dashboard (report.html): headline numbers with units, intervals over seeds, self-contained page."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.report_examples import write_compare, write_run
from trace_rl.metrics import summary
from trace_rl.metrics.report import write_report


def test_formatting_has_units_and_sensible_precision() -> None:
    assert summary.fmt_number(0.47159032700000125) == "0.4716"
    assert (
        summary.fmt_number(12345.0) == "12,345"
        and summary.fmt_number(64.0) == "64"
        and summary.fmt_number(1.23e-5) == "1.2e-05"
    )
    assert summary.fmt_mean(2.9166) == "2.9" and summary.fmt_mean(8.0) == "8"
    assert (
        summary.fmt_share(0.4871) == "48.7 %"
        and summary.fmt_points(0.031) == "+3.1 pts"
        and summary.fmt_points(-0.2) == "-20.0 pts"
    )
    assert [summary.fmt_seconds(x) for x in (0.0123, 4.381, 12.34, 131, 5400)] == [
        "12 ms",
        "4.38 s",
        "12.3 s",
        "2 min 11 s",
        "1 h 30 min",
    ]
    assert (
        summary.format_field("wall_s", 0.5741) == "574 ms"
        and summary.format_field("replay_depths", [0, 16]) == "[0, 16]"
    )
    assert summary.format_field("predictor_spearman", None) == "–" and summary.fmt_share(math.nan) == "–"


def test_t_interval_by_hand() -> None:
    mu, half = summary.t_interval([1.0, 2.0, 3.0])  # s = 1, t(0.975, 2) = 4.303
    assert mu == 2.0 and half == pytest.approx(4.303 / math.sqrt(3))
    assert summary.t_interval([0.5])[0] == 0.5 and math.isnan(summary.t_interval([0.5])[1])
    assert math.isnan(summary.t_interval([])[0])


def test_time_shares_sum_to_one_with_other() -> None:
    recs = [{"wall_s": 10.0, "time_generation_s": 4.0, "time_tools_s": 2.0, "time_update_s": 3.0}]
    shares = summary.time_shares(recs)
    assert shares == pytest.approx(
        {"generation": 0.4, "tools": 0.2, "predictor": 0.0, "allocation": 0.0, "update": 0.3, "other": 0.1}
    )
    assert summary.time_shares([]) == {}


def test_run_headline_numbers(tmp_path) -> None:
    records = write_run(tmp_path / "run")
    cards = {h.label: h for h in summary.run_headline(records)}
    assert cards["Effective ratio"].value == "49.5 %"  # mean of 0.40 .. 0.59
    assert "first step 40.0 %, last 59.0 %" in cards["Effective ratio"].detail
    assert cards["Held-out pass@1"].value == "43.0 % → 46.0 %"
    assert "+3.0 pts" in cards["Held-out pass@1"].detail and "2 samples per task at temperature 1" in (
        cards["Held-out pass@1"].detail
    )
    assert cards["Budget per step"].value == "64 of 64 rollout-eq."
    assert cards["Budget per step"].detail == "mean 32 roots, 64 replays, 8 active prompts"
    assert (
        cards["Step wall-clock"].value == "5.05 s" and "total 1 min 41 s" in cards["Step wall-clock"].detail
    )
    assert cards["Predictor MSE (last step)"].value == "0.18"


def _summary_text(page: str) -> str:
    section = re.search(r"<section data-role='summary'>(.*?)</section>", page, re.S)
    assert section is not None
    return re.sub(r"<[^>]+>", " ", section.group(1))


def test_run_report_is_a_self_contained_dashboard(tmp_path) -> None:
    folder = tmp_path / "run"
    write_run(folder)
    page = write_report(folder).read_text()
    summary = _summary_text(page)
    assert "49.5 %" in summary and "43.0 % → 46.0 %" in summary
    assert "generation 40.0 %" in summary and "other 5.0 %" in summary  # wall-clock shares
    assert not re.search(r"\d\.\d{6,}", re.sub(r"data:image/png;base64,[^']*", "", page))  # no raw floats
    assert "0.47159032700000125" not in page and "0.4716" in page  # the last-step table is formatted too
    assert page.index("data-role='summary'") < page.index("<h2>Plots</h2>")  # the summary comes first
    images = re.findall(r"<img src='([^']*)'", page)
    assert len(images) >= 9 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # nothing fetched at view time
    assert "effective_ratio.png" in page and (folder / "report" / "effective_ratio.png").stat().st_size > 1000
    assert "replay_flips.png" in page and (folder / "report" / "replay_flips.png").stat().st_size > 1000


def test_compare_report_puts_methods_side_by_side_with_intervals(tmp_path) -> None:
    folder = tmp_path / "cmp"
    write_compare(folder, {"grpo": [-0.2, -0.18, -0.22], "trace": [0.0, 0.02, -0.02]})
    page = write_report(folder).read_text()
    rows = dict(re.findall(r"<tr data-method='(\w+)'>(.*?)</tr>", page, re.S))
    assert set(rows) == {"grpo", "trace"}
    trace = re.sub(r"<[^>]+>", " ", rows["trace"])
    half = 100 * 4.303 * 0.02 / math.sqrt(3)  # seeds 0.495 +- 0.02: s = 0.02, n = 3
    assert f"49.5 %  ± {half:.1f} pts" in trace and "+20.0 pts" in trace  # effective ratio vs grpo
    assert "baseline" in rows["grpo"] and "29.5 %" in rows["grpo"]
    assert "43.0 % → 46.0 % (+3.0 pts)" in trace
    assert "intervals.png" in page and (folder / "report" / "intervals.png").exists()
    assert not re.search(r"\d\.\d{6,}", re.sub(r"data:image/png;base64,[^']*", "", page))


def test_report_errors_stay_plain(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"neither metrics\.jsonl nor comparison\.json"):
        write_report(tmp_path)


def test_warm_start_card_and_plot_come_first(tmp_path) -> None:
    folder = tmp_path / "run"
    write_run(folder)
    (folder / "sft").mkdir()
    sft = {
        "loss_curve": [[10, 3.2], [600, 0.9], [1200, 0.42]],
        "history": [
            {"step": 0, "mean_success": 0.0, "mixed_share": 0.0},
            {"step": 1200, "mean_success": 0.5},
        ],
    }
    (folder / "sft" / "sft.json").write_text(json.dumps(sft))
    page = write_report(folder).read_text()
    summary = _summary_text(page)
    assert (
        "1,200 SFT steps" in summary and "loss 3.2 → 0.42 nats/token; probe success 0.0 % → 50.0 %" in summary
    )
    files = re.findall(r"data-file='report/([\w.]+)'", page)
    assert files[0] == "warm_start.png" and {"effective_ratio.png", "wall_clock.png"} <= set(files)


def test_flip_rates_by_depth_pool_steps_by_replay_counts() -> None:
    from trace_rl.metrics.report import flip_rates_by_depth

    records = [
        {
            "kind": "train",
            "step": 1,
            "replay_depths": [0, 2, 1],
            "replay_flip_rate_depth_1": 0.5,
            "fresh_flip_rate_depth_1": 0.25,
            "replay_flip_rate_depth_2": 1.0,
            "fresh_flip_rate_depth_2": 0.5,
        },
        {
            "kind": "train",
            "step": 2,
            "replay_depths": [0, 6],
            "replay_flip_rate_depth_1": 0.0,
            "fresh_flip_rate_depth_1": 0.5,
        },
        {"kind": "eval", "step": 2, "replay_depths": [0, 9], "replay_flip_rate_depth_1": 1.0},
    ]
    rates = flip_rates_by_depth(records)
    assert list(rates) == [1, 2]
    # depth 1: (2 x 0.5 + 6 x 0) / 8 replays; fresh (2 x 0.25 + 6 x 0.5) / 8; the eval record is not a step
    assert rates[1] == pytest.approx((1.0 / 8, 3.5 / 8, 8))
    assert rates[2] == pytest.approx((1.0, 0.5, 1))


def test_prefix_stage_stats_sum_counts_over_steps() -> None:
    from trace_rl.metrics.report import prefix_stage_stats

    records = [
        {  # a log with counts (4dae319 on): flips and replay tokens per depth
            "kind": "train",
            "step": 1,
            "tokens_generated": 1000,
            "mixed_sibling_share": 0.5,
            "replay_depths": [0, 3, 1],
            "replay_flips_depth_1": 1,
            "replay_tokens_depth_1": 60,
            "replay_flips_depth_2": 1,
            "replay_tokens_depth_2": 10,
        },
        {
            "kind": "train",
            "step": 2,
            "tokens_generated": 1000,
            "mixed_sibling_share": float("nan"),  # no sibling group this step: not averaged in
            "replay_depths": [0, 1],
            "replay_flips_depth_1": 0,
            "replay_tokens_depth_1": 40,
        },
        {"kind": "eval", "step": 2, "replay_depths": [0, 9], "replay_flips_depth_1": 9},
    ]
    st = prefix_stage_stats(records)
    assert st["replays"] == 5 and st["replay_flips"] == 2 and st["replay_flip_rate"] == pytest.approx(0.4)
    assert st["flips_per_1k_tokens"] == pytest.approx(1.0) and st["mixed_sibling_share"] == 0.5
    d1 = st["by_depth"][1]
    assert (d1["replays"], d1["flips"], d1["tokens"]) == (4, 1, 100)
    assert d1["flip_rate"] == 0.25 and d1["flips_per_1k_tokens"] == pytest.approx(10.0)
    assert st["by_depth"][2]["flips_per_1k_tokens"] == pytest.approx(100.0)
    # an older log (rates only, no token counts): flips recovered from rate x count, tokens unknown
    old = [
        {
            "kind": "train",
            "step": 1,
            "tokens_generated": 500,
            "replay_depths": [0, 4],
            "replay_flip_rate_depth_1": 0.5,
        }
    ]
    st = prefix_stage_stats(old)
    assert st["by_depth"][1]["flips"] == 2 and math.isnan(st["by_depth"][1]["flips_per_1k_tokens"])
    assert st["flips_per_1k_tokens"] == pytest.approx(4.0) and math.isnan(st["mixed_sibling_share"])
    assert math.isnan(prefix_stage_stats([{"kind": "train", "step": 1}])["replay_flip_rate"])


def test_compare_variants_parse_and_refuse_what_cannot_differ() -> None:
    from trace_rl.train.compare_shared import parse_variant
    from trace_rl.train.config import ConfigError

    assert parse_variant("trace") == ("trace", "trace", ())
    assert parse_variant(" t32=trace@budget.roots=32; budget.continuations=6 ") == (
        "t32",
        "trace",
        ("budget.roots=32", "budget.continuations=6"),
    )
    assert parse_variant("alias=grpo") == ("alias", "grpo", ())
    for bad in (
        "=trace",
        "x=",
        "a/b=trace",
        "x=trace@policy.sft_steps=0",
        "x=trace@seed=3",
        "x=trace@method=grpo",
    ):
        with pytest.raises(ConfigError):
            parse_variant(bad)


def test_compare_checks_every_variant_before_the_warm_start(tmp_path, monkeypatch) -> None:
    """A bad ``--methods`` entry (unknown method, a setting that cannot take effect) fails at once: no warm start
    is run and no output folder is made."""
    from trace_rl.train import compare as compare_module
    from trace_rl.train.config import ConfigError, load_config

    def no_warm_start(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the warm start ran before the variants were checked")

    monkeypatch.setattr(compare_module, "warm_start_once", no_warm_start)
    cfg = load_config(preset="demo")
    assert cfg.policy.sft_steps > 0
    for methods, message in (
        (["grpo", "ppo"], "method: unknown method 'ppo'"),
        (["grpo", "g2=grpo@budget.max_num_gen_batches=2"], "budget.max_num_gen_batches: only method dapo"),
        (["grpo", "t=trace@budget.roots=10"], "multiple of group_size"),
    ):
        with pytest.raises(ConfigError, match=message):
            compare_module.compare(cfg, methods, seeds=1, out=tmp_path / "cmp")
        assert not (tmp_path / "cmp").exists()


def test_one_interval_function_for_the_report_and_the_lab() -> None:
    """`summary.t_interval` and the lab's `mean_ci` are one implementation: equal on any sample, and the report's
    view only adds skipping of missing values (issue 25)."""
    import numpy as np

    from trace_rl.lab import stats
    from trace_rl.metrics import intervals

    assert stats.mean_ci is intervals.mean_ci and stats.Interval is intervals.Interval
    assert not hasattr(summary, "_T975")  # no second table of t quantiles
    rng = np.random.default_rng(3)
    for n in (2, 3, 7, 31, 40):
        x = rng.normal(size=n).tolist()
        ci = intervals.mean_ci(x)
        mu, half = summary.t_interval([*x, float("nan"), None])  # type: ignore[list-item]
        assert mu == pytest.approx(ci.mean) and half == pytest.approx(ci.high - ci.mean)
