"""`trace-rl allocate` through a subprocess, as a user runs it."""

import json
import subprocess
import sys

import pytest

CMD = [sys.executable, "-m", "trace_rl.cli.main", "allocate"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120)


def test_allocate_table_and_json() -> None:
    out = run("--probs", "0.99,0.9,0.5,0.5,0.15,0.02", "--budget", "16")
    assert out.returncode == 0, out.stderr
    assert "TRACE" in out.stdout and "uniform" in out.stdout
    res = json.loads(run("--probs", "0.99,0.9,0.5,0.5,0.15,0.02", "--budget", "16", "--json").stdout)
    assert res["trace"]["rollouts"] == [0, 3, 4, 4, 5, 0]
    assert res["trace"]["expected_mixed"] > res["uniform"]["expected_mixed"]
    assert sum(res["uniform"]["rollouts"]) == 16


def test_allocate_sweep_plot(tmp_path) -> None:
    png = tmp_path / "sweep.png"
    out = run("--probs", "0.9,0.5,0.1", "--budget", "8", "--sweep", "1:12", "--plot", str(png), "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert [r["budget"] for r in res["sweep"]] == list(range(2, 13))  # budget 1 is infeasible and skipped
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--probs", "0.5,1.5", "--budget", "4"], "probabilities in [0, 1]"),
        (["--probs", "0.5,0.2", "--budget", "1"], "cannot spend a root budget of 1"),
        (["--probs", "a,b", "--budget", "4"], "comma-separated numbers"),
        (["--probs", "0.5", "--budget", "4", "--plot", "x.png"], "--plot needs --sweep"),
        (["--probs", "0.5", "--budget", "4", "--sweep", "9:3"], "--sweep"),
        (["--probs", "0.5", "--budget", "4", "--sweep", "2:4", "--plot", "/tmp/x"], "must name a .png"),
        (
            ["--probs", "0.5", "--budget", "4", "--sweep", "2:4", "--plot", "/nonexistent/dir/F.png"],
            "No such file",
        ),
    ],
)
def test_allocate_bad_input_is_one_line(args, message) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
