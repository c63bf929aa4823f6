"""`trace-rl train --set backend.kind=sglang --set backend.urls=...` end to end on the smoke preset, against two
SGLang stand-ins (`sglang_stand_in.py`: the documented native API, generating with the tiny policy; no SGLang
runs on this CPU), and the clear error when no URLs are given (trace-rl never launches SGLang)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.sglang_stand_in import SGLangStandIn

CLI = [sys.executable, "-m", "trace_rl.cli.main"]
SMOKE = ["train", "--preset", "smoke", "--overwrite", "--no-progress", "--set", "threads=1"]


def train_records(out: Path) -> list[dict]:  # type: ignore[type-arg]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == "train"]


def test_train_on_two_sglang_servers(tmp_path):  # type: ignore[no-untyped-def]
    from trace_rl.policy import load_policy

    # the stand-ins start from other weights than the run's (seed 7): the trainer's first push must replace them
    fakes = [SGLangStandIn(load_policy("tiny", seed=7)).start() for _ in range(2)]
    out = tmp_path / "run"
    try:
        urls = ",".join(f.url for f in fakes)
        proc = subprocess.run(
            ["nice", "-n", "19", *CLI, *SMOKE, "--out", str(out), "--set", "backend.kind=sglang",
             "--set", f"backend.urls={urls}", "--set", "sampling.top_p=0.95"],
            capture_output=True, text=True, timeout=420, check=False,
        )  # fmt: skip
    finally:
        for f in fakes:
            f.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (out / "servers.json").exists()  # nothing launched
    recs = train_records(out)
    assert [r["step"] for r in recs] == [1, 2]
    assert [r["policy_version"] for r in recs] == [2, 3]  # the initial push (1), then one per update
    for r in recs:
        assert r["backend"] == "sglang" and min(r["backend_requests_per_replica"]) > 0  # both replicas used
        assert r["backend_affinity_violations"] == 0 and r["backend_retried_requests"] == 0
        assert r["backend_stale_prefixes"] == 0 and r["backend_live_replicas"] == 2
        if r["replays"]:  # a token-granular radix cache on the replica that ran the roots
            assert r["backend_replay_cache_hit_rate"] >= 0.9
    for f in fakes:
        pushes = [b for p, b in f.requests if p == "/update_weights_from_disk"]
        assert [b["weight_version"] for b in pushes] == ["1", "2", "3"]
        assert all(Path(b["model_path"]).parent == out / "served" for b in pushes)
        paths = [p for p, _ in f.requests]
        assert paths.count("/flush_cache") == 3  # the cache is flushed after every push
        gens = [b for p, b in f.requests if p == "/generate"]
        assert gens and f.weight_version == "3"
        for b in gens:
            n = len(b["input_ids"])
            assert b["return_logprob"] is True and b["logprob_start_len"] == -1 and len(b["rid"]) == n
            for p in b["sampling_params"]:
                top_p = 0.95 if p["temperature"] > 0 else 1.0  # the held-out evaluation is greedy
                assert (p["top_p"], p["top_k"], p["min_p"], p["repetition_penalty"]) == (top_p, -1, 0.0, 1.0)
                assert p["ignore_eos"] is True and p["stop_token_ids"]
            assert b["rid"][0].startswith("trace-v")
        assert any(p["top_p"] == 0.95 for b in gens for p in b["sampling_params"])
        seeds = {p["sampling_seed"] for b in gens for p in b["sampling_params"]}
        assert len(seeds) > 1 and all(0 <= s < 2**63 for s in seeds)


def test_sglang_without_urls_is_a_clear_error(tmp_path):  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        [*CLI, *SMOKE, "--out", str(tmp_path / "run"), "--set", "backend.kind=sglang"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "backend.urls: must list the running SGLang servers" in err and "launches only vLLM" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
