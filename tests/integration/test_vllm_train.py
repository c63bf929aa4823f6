"""`trace-rl serve vllm` and `trace-rl train --set backend.kind=vllm` end to end through subprocesses, on the tiny
policy (2 replicas each, one CPU thread per server, nice 19): the trainer on servers it launched itself (and
stopped: no server outlives the run), the trainer on `serve`'s replicas with one replica killed mid-run
(every step logged exactly once), and a SIGKILLed launcher taking every server process with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trace_rl.rollout.vllm_server import free_port, vllm_python

CLI = [sys.executable, "-m", "trace_rl.cli.main"]
SMOKE = ["train", "--preset", "smoke", "--overwrite", "--no-progress", "--set", "threads=1"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def train_records(out: Path) -> list[dict]:  # type: ignore[type-arg]
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "train"]


def test_train_launches_and_stops_its_own_vllm_servers(tmp_path):  # type: ignore[no-untyped-def]
    vllm_python()
    out = tmp_path / "run"
    cmd = [*CLI, *SMOKE, "--out", str(out), "--set", "backend.kind=vllm", "--set", "backend.replicas=2"]
    proc = subprocess.run(
        ["nice", "-n", "19", *cmd], capture_output=True, text=True, timeout=420, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    servers = json.loads((out / "servers.json").read_text())
    assert len(servers) == 2
    assert not any(alive(s["pid"]) for s in servers)  # stopped with the run
    recs = train_records(out)
    assert [r["step"] for r in recs] == [1, 2]
    assert [r["policy_version"] for r in recs] == [1, 2]  # one weight push per update
    for r in recs:
        assert r["backend"] == "vllm" and sum(r["backend_requests_per_replica"]) > 0
        assert min(r["backend_requests_per_replica"]) > 0  # both replicas used
        assert r["backend_affinity_violations"] == 0 and r["backend_retried_requests"] == 0
        assert r["backend_stale_prefixes"] == 0
        if r["replays"]:
            assert r["backend_replay_cache_hit_rate"] >= 0.9  # affinity keeps replays on their cache
            assert r["backend_replay_prefix_hit_rate"] >= 0.9
    report = (out / "report.html").read_text()
    assert "backend_replay_cache_hit_rate" in report and "backend_requests_per_replica" in report


def test_serve_cli_then_train_with_one_replica_killed(tmp_path):  # type: ignore[no-untyped-def]
    vllm_python()
    port = free_port()
    while free_port() == port + 1:  # want two consecutive ports; the next one is almost always free
        port = free_port()
    serve = subprocess.Popen(
        [*CLI, "serve", "vllm", "--policy", "tiny", "--port", str(port), "--replicas", "2", "--nice", "19",
         "--folder", str(tmp_path / "served")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    pids: list[int] = []
    try:
        urls = None
        deadline = time.monotonic() + 300
        lines = []
        assert serve.stdout is not None
        while time.monotonic() < deadline:
            line = serve.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("replica "):
                pids.append(int(line.split(" pid ")[1].split()[0]))
            if line.startswith("ready:"):
                urls = line.split("backend.urls=")[1].strip()
                break
        assert urls is not None, "".join(lines)[-3000:]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        out = tmp_path / "run"
        train = subprocess.Popen(
            ["nice", "-n", "19", *CLI, *SMOKE, "--out", str(out), "--set", "steps=4", "--set", "eval_every=0",
             "--set", "backend.kind=vllm", "--set", f"backend.urls={urls}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        killed_after = None
        while train.poll() is None:
            recs = train_records(out)
            if recs and killed_after is None:
                os.killpg(pids[1], signal.SIGKILL)  # replica 1 (and its engine process) crashes mid-run
                killed_after = recs[-1]["step"]
            time.sleep(0.05)
        log = train.stdout.read() if train.stdout else ""
        assert train.returncode == 0, log[-3000:]
        assert killed_after is not None and killed_after < 4
        recs = train_records(out)
        assert [r["step"] for r in recs] == [1, 2, 3, 4]  # every step logged exactly once
        assert recs[-1]["backend_live_replicas"] == 1
        assert recs[0]["policy_version"] == 2  # the initial push (1) and step 1's update (2)
        assert sum(r["backend_requests_per_replica"][0] for r in recs[killed_after:]) > 0
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
    assert serve.returncode == 0
    time.sleep(1)
    assert not any(alive(p) for p in pids)


def group_members(pgid: int) -> list[int]:
    """Live processes (zombies excluded) whose process group is pgid."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


LAUNCHER = """
import sys, time
from pathlib import Path
from trace_rl.policy import load_policy
from trace_rl.rollout.vllm_server import export_policy, launch_servers
folder = export_policy(load_policy("tiny", seed=0), Path(sys.argv[1]))
(server,) = launch_servers(folder, 1, nice=19, max_num_seqs=4, timeout_s=540)
print(server.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_launcher_leaves_no_server_process(tmp_path):  # type: ignore[no-untyped-def]
    vllm_python()
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "tiny")], stdout=subprocess.PIPE, text=True
    )
    pgid = None
    try:
        assert launcher.stdout is not None
        pgid = int(launcher.stdout.readline())  # the server serves: engine core and worker are running
        members = group_members(pgid)
        assert len(members) >= 3, members  # watchdog, API server, engine core (+ worker, resource tracker)
        launcher.kill()  # SIGKILL: no finally, no atexit in the launcher
        launcher.wait()
        deadline = time.monotonic() + 30
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_members(pgid) == [], "server processes outlived their launcher"
    finally:
        launcher.kill()
        launcher.wait()
        if pgid is not None and group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)
