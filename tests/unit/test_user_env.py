"""A researcher's own environment as ``module:factory`` (tests/fixtures/user_env/my_pkg/my_env.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_rl.envs import env_problem, gold_trajectory, load_tasks, make_env
from trace_rl.train.config import ConfigError, load_config

USER_ENV = Path(__file__).resolve().parents[1] / "fixtures" / "user_env"
NAME = "my_pkg.my_env:make"


@pytest.fixture(autouse=True)
def _user_env_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_ENV))


def test_tasks_env_and_gold_trajectory_resolve_through_the_module() -> None:
    train, test = load_tasks(NAME, "train", None, 0), load_tasks(NAME, "test", 3, 0)
    assert len(train) == 15 and len(test) == 3
    assert not {t.prompt for t in train} & {t.prompt for t in test}
    env = make_env(NAME, max_turns=3)
    assert env.max_turns == 3  # type: ignore[attr-defined]
    task = train[0]
    assert env.reset(task) == task.prompt
    saved = env.snapshot()
    results = [env.step(turn) for turn in gold_trajectory(task, NAME)]
    assert [r.done for r in results] == [False, True] and results[-1].reward == 1.0
    env.restore(saved)  # replays start from the saved turn boundary
    assert env.step("<answer>0</answer>").reward == 0.0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("my_pkg.nope:make", "cannot import my_pkg.nope"),
        ("my_pkg.my_env:nope", "defines no callable nope"),
        ("my_pkg my_env:make", "expected module:factory"),
        ("mathpython", "unknown environment 'mathpython'"),
    ],
)
def test_a_bad_name_is_one_config_error_naming_env_name(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(preset="smoke", overrides=[f"env.name={name}"])
    text = str(err.value)
    assert text.startswith("env.name: ") and message in text and "\n" not in text


def test_the_warm_start_needs_gold_trajectories() -> None:
    assert env_problem("my_pkg.no_gold:make") is None
    cfg = load_config(preset="smoke", overrides=["env.name=my_pkg.no_gold:make"])
    assert cfg.env.name == "my_pkg.no_gold:make"
    with pytest.raises(ConfigError, match="defines no callable gold_trajectory"):
        load_config(preset="smoke", overrides=["env.name=my_pkg.no_gold:make", "policy.sft_steps=2"])
    assert (
        load_config(preset="smoke", overrides=[f"env.name={NAME}", "policy.sft_steps=2"]).policy.sft_steps
        == 2
    )


def test_registry_names_are_checked_without_importing_their_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    import trace_rl.envs as envs

    def no_import(name: str) -> None:
        raise AssertionError(f"imported {name}")

    monkeypatch.setattr(envs.importlib, "import_module", no_import)
    assert env_problem("bfcl", gold=True) is None  # config validation stays cheap for the shipped envs


def test_the_cli_resolves_a_user_environment_with_its_gold_trajectories() -> None:
    from trace_rl.cli._envs import resolve_env

    entry = resolve_env(NAME)
    task = entry.load_tasks("train", 2, 0)[0]
    env = entry.make(max_turns=3)
    env.reset(task)
    assert [env.step(turn).reward for turn in entry.gold_trajectory(task)] == [0.0, 1.0]
