"""`trace-rl regime` and its pure statistics (`trace_rl.metrics.regime`): unanimous shares by hand, the verdicts,
and the command on a probe whose prompts announce their difficulty."""

import json
from math import comb

import pytest

from trace_rl.cli.main import main
from trace_rl.metrics.regime import regime_verdict, unanimous_share


def test_unanimous_share_by_hand() -> None:
    # 3 of 4 succeed: groups of 2 drawn without replacement agree with probability (C(3,2) + C(1,2)) / C(4,2) = 1/2
    assert unanimous_share([[1, 1, 1, 0]], 2) == pytest.approx(0.5)
    assert unanimous_share([[1, 1, 1, 0]], 3) == pytest.approx(comb(3, 3) / comb(4, 3))
    # all agree: 1; a prompt with fewer samples than g is left out; none left: NaN
    assert unanimous_share([[0, 0, 0], [1, 0]], 3) == pytest.approx(1.0)
    assert unanimous_share([[1]], 2) != unanimous_share([[1]], 2)  # NaN
    with pytest.raises(ValueError):
        unanimous_share([[1, 0]], 1)


def test_verdicts() -> None:
    assert regime_verdict(0.7, 0.65).startswith("selection regime")
    assert regime_verdict(0.3, 0.1).startswith("GRPO regime")
    assert "weak ranking" in regime_verdict(0.7, 0.1)
    assert "few unanimous" in regime_verdict(0.2, 0.8)


def test_regime_command_reads_a_probe(tmp_path, capsys) -> None:
    # prompts that name their difficulty: "easy" ones always succeed, "hard" ones never, "coin" ones half the time
    prompts, rewards = [], []
    for i in range(24):
        kind = ("easy", "hard", "coin")[i % 3]
        prompts.append(f"task {i}: a {kind} one")
        rewards.append({"easy": [1.0] * 8, "hard": [0.0] * 8, "coin": [1.0, 0.0] * 4}[kind])
    (tmp_path / "probe_outcomes.json").write_text(json.dumps({"prompts": prompts, "rewards": rewards}))
    assert main(["regime", str(tmp_path), "--predictor", "ngram", "--group-size", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prompts"] == 24 and out["samples_per_prompt"] == 8
    coin = (comb(4, 4) + comb(4, 4)) / comb(8, 4)
    assert out["unanimous_share"]["4"] == pytest.approx((2 + coin) / 3)
    assert out["predictor_spearman_out_of_fold"] > 0.5  # the words rank the prompts
    assert out["verdict"].startswith("selection regime")
    assert main(["regime", str(tmp_path / "missing")]) == 2
    assert "no probe outcomes" in capsys.readouterr().err


def test_regime_refuses_bad_probes(tmp_path, capsys) -> None:
    good = {"prompts": [f"p{i}" for i in range(8)], "rewards": [[1.0, 0.0, 1.0, 0.0]] * 8}
    for name, data in (
        ("empty_row", {**good, "rewards": [[], *good["rewards"][1:]]}),
        ("nan", {**good, "rewards": [[float("nan")] * 4, *good["rewards"][1:]]}),
    ):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "probe_outcomes.json").write_text(json.dumps(data))
        assert main(["regime", str(folder), "--predictor", "ngram"]) == 2
        assert "not a finite number" in capsys.readouterr().err
    (tmp_path / "probe_outcomes.json").write_text(json.dumps(good))
    assert main(["regime", str(tmp_path), "--predictor", "ngram", "--group-size", "8"]) == 2
    assert "larger than the probe's 4 samples" in capsys.readouterr().err
    assert main(["regime", str(tmp_path), "--predictor", "ngram", "--folds", "9"]) == 2
    assert "--folds must be at most 8" in capsys.readouterr().err
