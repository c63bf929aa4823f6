"""The TRL and verl version seams: one line naming the supported and tested releases, checked against faked
TRL installs (no TRL needed here): an old or too-new release is refused, an untested supported one warns once,
the stable AsyncGRPOTrainer path of a newer TRL is preferred, and a moved name is a clear error."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from trace_rl.integrations.trl import compat
from trace_rl.integrations.versions import UnsupportedVersionError, VersionRange, release

RANGE = VersionRange(
    "fw", minimum=(1, 16, 0), below=(2, 0, 0), tested="1.16.0", why_minimum="the rollout seam"
)


def test_release_parses_what_packages_report() -> None:
    assert (
        release("1.16.0") == (1, 16, 0)
        and release("0.10.0.dev") == (0, 10, 0)
        and release("1.18") == (1, 18, 0)
    )
    assert release("unknown") is None


def test_the_range_refuses_outside_and_warns_inside(caplog) -> None:
    assert RANGE.check("1.16.0") is True
    for bad, why in (("1.15.2", "older"), ("2.0.0", "newer"), ("nightly", "cannot read")):
        with pytest.raises(UnsupportedVersionError, match=why) as info:
            RANGE.check(bad)
        message = str(info.value)
        assert "supported: fw >= 1.16.0, < 2.0.0; tested: 1.16.0" in message and "\n" not in message
        assert "pip install fw==1.16.0" in message
    with pytest.raises(UnsupportedVersionError, match=r"\(the rollout seam\)"):
        RANGE.check("1.0")
    with caplog.at_level(logging.WARNING, logger="trace_rl.integrations"):
        assert RANGE.check("1.18.1") is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert "fw 1.18.1 is not the tested release" in line and "tested: 1.16.0" in line


def _fake_trl(monkeypatch, version: str, *, stable: bool) -> types.ModuleType:
    """A stand-in ``trl`` of ``version``; with ``stable`` it exports AsyncGRPOTrainer from a stable module (as
    TRL 1.18 does), without it it has neither the stable nor the experimental path."""
    trl = types.ModuleType("trl")
    trl.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trl", trl)
    monkeypatch.setitem(sys.modules, "trl.experimental", None)  # removed in 1.18
    monkeypatch.setitem(sys.modules, compat.EXPERIMENTAL_ASYNC_GRPO, None)
    if stable:
        module = types.ModuleType("trl.trainer.async_grpo_trainer")
        trainer = type("AsyncGRPOTrainer", (), {"__module__": module.__name__})
        config = type("AsyncGRPOConfig", (), {"__module__": "trl.trainer.async_grpo_config"})
        sample = type("RolloutSample", (), {"__module__": "trl.trainer.async_rollout_worker"})
        module.AsyncGRPOTrainer, module.RolloutSample, module.TREE_ATTENTION = trainer, sample, "tree_fa4"  # type: ignore[attr-defined]
        trl.AsyncGRPOTrainer, trl.AsyncGRPOConfig = trainer, config  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
    compat._check.cache_clear()
    return trl


def test_a_newer_trl_uses_the_stable_async_grpo_path_with_one_warning(monkeypatch, caplog) -> None:
    trl = _fake_trl(monkeypatch, "1.18.0", stable=True)
    with caplog.at_level(logging.WARNING, logger="trace_rl.integrations"):
        trainer, config = compat.async_grpo_classes()
        assert compat.rollout_sample_class().__name__ == "RolloutSample"
        assert compat.tree_attention_name() == "tree_fa4"
    assert trainer is trl.AsyncGRPOTrainer and config is trl.AsyncGRPOConfig  # type: ignore[attr-defined]
    assert compat.async_grpo_trainer_module().__name__ == "trl.trainer.async_grpo_trainer"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "trl 1.18.0 is not the tested release" in lines[0]  # once per process
    with pytest.raises(
        UnsupportedVersionError, match=r"trl 1\.18\.0 has no trl\.trainer\.async_grpo_trainer\.nope"
    ):
        compat.require_trainer_names("RolloutSample", "nope")


def test_a_trl_without_either_path_is_one_clear_line(monkeypatch) -> None:
    _fake_trl(monkeypatch, "1.17.0", stable=False)
    with pytest.raises(UnsupportedVersionError) as info:
        compat.rollout_sample_class()
    message = str(info.value)
    assert message.startswith("trl 1.17.0 has no AsyncGRPOTrainer (stable or experimental)")
    assert "supported: trl >= 1.16.0, < 2.0.0; tested: 1.16.0" in message and "\n" not in message


@pytest.mark.parametrize("version", ["1.14.0", "2.0.0"])
def test_an_unsupported_trl_is_refused_before_any_lookup(monkeypatch, version) -> None:
    _fake_trl(monkeypatch, version, stable=True)
    with pytest.raises(UnsupportedVersionError, match=f"trl {version} is (older|newer) than"):
        compat.async_grpo_classes()


def test_no_trl_installed_is_one_line(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(UnsupportedVersionError, match=r"TRL is not installed .*make trl"):
        compat.trl_module()


def test_the_verl_range_keeps_its_rules() -> None:
    from trace_rl.integrations.verl import VERL_RANGE, VERL_VERSION, check_verl_version

    assert VERL_RANGE.tested == VERL_VERSION and VERL_RANGE.minimum == release(VERL_VERSION)
    with pytest.raises(RuntimeError, match=r"verl 0\.9\.0 is older .*prepare_step.*tested: 0\.9\.1"):
        check_verl_version("0.9.0")
    with pytest.raises(UnsupportedVersionError, match=r"verl 1\.0\.0 is newer"):
        check_verl_version("1.0.0")
    check_verl_version("0.10.0.dev")  # supported, untested: a warning only
