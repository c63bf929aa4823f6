"""The launcher's watchdog (no preexec_fn): it sets the server's niceness itself and, with an orphan signal,
takes the server's whole process group down when the process that started it dies, even by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from trace_rl.rollout import vllm_server
from trace_rl.rollout.vllm_server import WATCHDOG

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _niceness(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(")")[1].split()[16])


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _wait(check, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_start_passes_no_preexec_fn(monkeypatch, tmp_path) -> None:
    seen: dict = {}

    class FakePopen:
        def __init__(self, args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            seen.update(kwargs, args=args)

    monkeypatch.setattr(vllm_server.subprocess, "Popen", FakePopen)
    server = vllm_server.VLLMServer(tmp_path / "model", port=1234, nice=7, log_path=tmp_path / "log")
    monkeypatch.setattr(server, "command", lambda: ["/py", "-m", "vllm"])
    server.start()
    server._log.close()
    assert "preexec_fn" not in seen and seen["start_new_session"] is True
    assert seen["args"][:2] == ["/py", "-c"] and seen["args"][2] == WATCHDOG
    assert seen["args"][3:6] == ["7", str(int(signal.SIGHUP)), str(os.getpid())]
    assert seen["args"][6:] == ["/py", "-m", "vllm"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_the_watchdog_nices_its_server_and_dies_with_its_parent() -> None:
    launcher = (
        "import os, signal, subprocess, sys\n"
        f"WATCHDOG = {WATCHDOG!r}\n"
        f"p = subprocess.Popen([sys.executable, '-c', WATCHDOG, '5', str(int(signal.SIGHUP)), str(os.getpid()),"
        f" *{SLEEPER!r}], start_new_session=True, stdout=subprocess.PIPE)\n"
        "print(p.pid, flush=True); print(p.stdout.readline().decode().strip(), flush=True)\n"
        "import time; time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        watchdog = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "up"
        (server,) = _children(watchdog)
        assert _niceness(watchdog) == 5 and _niceness(server) == 5
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait(lambda: not _alive(watchdog) and not _alive(server)), "the server outlived its trainer"
    finally:
        parent.kill()
        parent.wait()


def test_the_watchdog_exits_when_its_parent_is_already_gone() -> None:
    dead_parent = 2**22 + 12345  # not this process: the watchdog sees another parent and refuses to start
    res = subprocess.run(
        [sys.executable, "-c", WATCHDOG, "0", str(int(signal.SIGHUP)), str(dead_parent), *SLEEPER],
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert res.returncode == 1 and "up" not in res.stdout
