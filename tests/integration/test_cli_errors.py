"""The CLI prints the project's user-facing errors as one line (status 2) and anything else as a bug with its
traceback (status 1): a wrong setting never hides behind a traceback, and a real bug never loses one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trace_rl.cli.common import UsageError, user_input
from trace_rl.cli.main import INTERNAL_ERROR, main
from trace_rl.errors import DataError, UserError
from trace_rl.train.config import ConfigError
from trace_rl.train.warm_start import WarmStartError

CLI = [sys.executable, "-m", "trace_rl.cli.main"]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("optim.max_grad_norm=-1", "optim.max_grad_norm"),
        ("optim.max_grad_norm=0", "optim.max_grad_norm"),
        ("optim.lr=inf", "optim.lr"),
        ("steps=inf", "steps"),
        ("steps=nan", "steps"),
        ("predictor.batch_size=0", "predictor.batch_size"),
        ("policy.sft_lr=-1", "policy.sft_lr"),
        ("env.train_limit=-5", "env.train_limit"),
        ("predictor.updates=1e15", "predictor.updates"),  # issue 60: the step's predictor update never ended
        ("optim.epochs=1e15", "optim.epochs"),
    ],
)
def test_out_of_range_settings_are_one_line_naming_the_key(tmp_path, override, key) -> None:
    res = subprocess.run(
        [*CLI, "train", "--preset", "smoke", "--set", override, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trace-rl train: error: {key}: "), res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "run").exists()


def test_max_new_tokens_beyond_the_policys_context_is_one_line_before_any_step(tmp_path) -> None:
    # issue 60: every turn ran to the context limit (the command seemed to hang); now refused once the policy
    # loads, naming the key, the policy's context and the value (the timeout is CI slack: seconds when idle)
    args = ["--steps", "1", "--out", str(tmp_path / "run"), "--set", "sampling.max_new_tokens=1000000000000"]
    res = subprocess.run(
        [*CLI, "train", "--preset", "smoke", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trace-rl train: error: sampling.max_new_tokens: "), (
        res.stderr
    )
    assert "4096 tokens" in lines[0] and lines[0].endswith("got 1000000000000"), lines[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_an_internal_exception_keeps_its_traceback(tmp_path, monkeypatch, capsys) -> None:
    import trace_rl.metrics.report as report

    def broken(folder: str) -> str:
        raise ValueError("operands could not be broadcast together with shapes (3,) (4,)")

    monkeypatch.setattr(report, "write_report", broken)
    assert main(["report", str(tmp_path)]) == INTERNAL_ERROR
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert (
        first.startswith("trace-rl report: internal error: this is a bug in trace-rl") and "report" in first
    )
    assert "Traceback (most recent call last)" in err and "could not be broadcast" in err
    assert "def broken" in err or "in broken" in err  # the frame that raised is shown


def test_an_internal_error_in_a_subprocess_shows_its_traceback(tmp_path) -> None:
    code = (
        "import sys, trace_rl.metrics.report as r\n"
        "def broken(folder):\n    raise KeyError('node_depth')\n"
        "r.write_report = broken\n"
        "from trace_rl.cli.main import main\n"
        "sys.exit(main(['report', sys.argv[1]]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == INTERNAL_ERROR and "internal error" in res.stderr.splitlines()[0]
    assert "Traceback" in res.stderr and "KeyError: 'node_depth'" in res.stderr


def test_user_errors_share_one_base_and_stay_value_errors() -> None:
    for cls in (ConfigError, WarmStartError, UsageError, DataError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError)
    with pytest.raises(UsageError, match="--budget: must be >= 0"), user_input("--budget: "):
        raise ValueError("must be >= 0")
    with pytest.raises(ConfigError), user_input():  # a user error passes through unchanged
        raise ConfigError("steps: must be at least 1")
    with pytest.raises(KeyError), user_input():  # only ValueErrors are the user's
        raise KeyError("bug")


def test_a_user_error_raised_deep_inside_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    import trace_rl.metrics.report as report

    def missing(folder: str) -> str:
        raise DataError(f"{folder}/tasks.jsonl: line 3: not valid JSON (Expecting value)")

    monkeypatch.setattr(report, "write_report", missing)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not valid JSON" in err and "Traceback" not in err


def test_resume_refuses_a_checkpoint_whose_pickle_runs_code(tmp_path) -> None:
    import json

    import torch
    from safetensors.torch import save_file

    from trace_rl.train.config import load_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(load_config(preset="smoke").to_dict()))
    ckpt = run_dir / "checkpoints" / "step_1"
    (ckpt / "policy").mkdir(parents=True)
    save_file({"w": torch.zeros(4)}, str(ckpt / "policy" / "model.safetensors"))
    marker = tmp_path / "pwned"
    payload = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')"
    for name in ("optimizer.pt", "predictor.pt"):
        torch.save({"state": {}}, ckpt / name)
    torch.save({"torch": torch.get_rng_state(), "python": _Exec(payload)}, ckpt / "rng.pt")
    (ckpt / "state.json").write_text(json.dumps({"step": 1}))
    res = subprocess.run(
        [*CLI, "train", "--resume", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "rng.pt: refused: its pickle would build or call" in lines[0], res.stderr
    assert "builtins.exec" in lines[0] and not marker.exists()


class _Exec:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (exec, (self.code,))


def test_common_mistakes_found_in_review_are_one_line(tmp_path, capsys) -> None:
    # an unknown method in compare, a bad --lr for sft, a damaged config.json on resume: the user's to fix
    cases = [
        (
            ["compare", "--preset", "smoke", "--out", str(tmp_path / "c"), "--methods", "grpo,nonesuch"],
            "nonesuch",
        ),
        (["sft", "--env", "math_python", "--out", str(tmp_path / "s"), "--lr", "-1", "--steps", "1"], "lr"),
        (["lab", "claims", "--seed", "-5", "--seeds", "2", "--steps", "1"], "--seed"),
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{not json")
    cases.append((["train", "--resume", str(run)], "damaged"))
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "internal error" not in err, (argv, err)
