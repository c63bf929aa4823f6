"""Hostile-code suite for the python sandbox: every attack is contained and the caller keeps working.

Runs once per isolating backend available here (zygote for a root caller, bwrap, unshare); fails (never skips)
where bwrap does not work, naming what to install (tests/runners.py).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from tests.runners import require

from trace_rl.envs.sandbox import MAX_DRAIN_BYTES, available_backends, run_python

BACKENDS = available_backends()


@pytest.fixture(params=BACKENDS or ["missing"])
def backend(request: pytest.FixtureRequest) -> str:
    # never skips: fails naming what to install. bwrap is required even where the zygote (root, no tools) works:
    # it is what a non-root caller gets, so the suite must cover it wherever it runs
    require("sandbox", "bwrap" in BACKENDS)
    return str(request.param)


def _still_alive() -> None:
    # The caller keeps working: a trivial call still runs after each attack.
    assert os.getpid() > 0


def test_plain_code_runs(backend: str) -> None:
    res = run_python("print(sum(range(10)))", backend=backend)  # type: ignore[arg-type]
    assert (res.stdout, res.returncode, res.timed_out) == ("45\n", 0, False)


def test_infinite_loop_times_out(backend: str) -> None:
    t0 = time.monotonic()
    res = run_python("while True:\n    pass", timeout_s=1.0, backend=backend)  # type: ignore[arg-type]
    assert res.timed_out and res.returncode != 0
    assert time.monotonic() - t0 < 5.0  # killed near the 1 s limit, not left running


_FORK_PROBE = """
import os, time
ok = 0
for i in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1.0)
        os._exit(0)
    ok += 1
print(ok)
"""


def _process_limit_holds(backend: str, max_procs: int) -> bool:
    # Linear probe (at most 40 sleeping children): the process limit must stop forks below max_procs.
    res = run_python(_FORK_PROBE, timeout_s=3.0, max_procs=max_procs, backend=backend)  # type: ignore[arg-type]
    return res.stdout.strip().isdigit() and int(res.stdout) < max_procs


def test_process_limit_enforced(backend: str) -> None:
    assert _process_limit_holds(backend, 16)


def test_fork_bomb_contained(backend: str) -> None:
    if not _process_limit_holds(backend, 16):  # never unleash a real fork bomb on a shared machine unguarded
        pytest.fail("process limit not enforced; refusing to run the fork bomb")
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    res = run_python(code, timeout_s=1.0, max_procs=16, backend=backend)  # type: ignore[arg-type]
    assert res.returncode != 0
    assert run_python("print('ok')", backend=backend).stdout == "ok\n"  # type: ignore[arg-type]


def test_memory_bomb_hits_limit(backend: str) -> None:
    res = run_python("x = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=256, backend=backend)  # type: ignore[arg-type]
    assert res.returncode != 0 and "allocated" not in res.stdout
    assert "MemoryError" in res.stderr


def test_project_files_invisible(backend: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    secret.chmod(0o644)
    here = Path(__file__).resolve()
    code = f"for p in [{str(secret)!r}, {str(here)!r}]:\n    try:\n        print(open(p).read()[:20])\n    except OSError as e:\n        print('denied', type(e).__name__)"
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    assert "TOP-SECRET" not in res.stdout and "from __future__" not in res.stdout
    assert res.stdout.count("denied") == 2


def test_writes_outside_tmp_fail_and_tmp_is_private(backend: str) -> None:
    marker = f"/tmp/trace-rl-escape-{uuid.uuid4().hex}"
    code = (
        "import os\n"
        "for p in ['/usr/evil', '/evil', '/root/evil']:\n"
        "    try:\n        open(p, 'w').write('x'); print('wrote', p)\n"
        "    except OSError as e:\n        print('denied', p)\n"
        f"open({marker!r}, 'w').write('inside'); print('tmp ok')"
    )
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    assert "wrote" not in res.stdout and res.stdout.count("denied") == 3
    assert "tmp ok" in res.stdout
    assert not os.path.exists(marker)  # the sandbox's /tmp is its own tmpfs, gone after the call


def test_no_network_to_loopback_server(backend: str) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\nexcept OSError as e:\n    print('blocked')"
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    server.setblocking(False)
    try:
        conn, _ = server.accept()  # a completed handshake would sit in the backlog
        conn.close()
        reached = True
    except BlockingIOError:
        reached = False
    server.close()
    assert res.stdout.strip() == "blocked" and not reached


def test_cannot_kill_parent(backend: str) -> None:
    pid = os.getpid()
    code = f"import os, signal\nfor p in [{pid}, os.getppid()]:\n    try:\n        os.kill(p, signal.SIGKILL)\n    except OSError as e:\n        print('failed', type(e).__name__)"
    run_python(code, backend=backend)  # type: ignore[arg-type]
    _still_alive()  # had the kill reached us, this test process would be gone


def test_background_process_does_not_outlive_call(backend: str) -> None:
    tag = f"orph{uuid.uuid4().hex[:10]}"  # becomes the orphan's comm (15 chars max), visible in host /proc
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open('/proc/self/comm', 'w').write({tag!r})\n"
        "        time.sleep(30)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent done')"
    )
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    assert "parent done" in res.stdout

    def survivors() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if (entry / "comm").read_text().strip() == tag:
                        found.append(entry.name)
                except OSError:
                    continue
        return found

    deadline = time.monotonic() + 3.0
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors() == []


def test_huge_output_is_capped(backend: str) -> None:
    res = run_python(
        "while True:\n    print('x' * 4096)", timeout_s=5.0, max_output_bytes=10_000, backend=backend
    )  # type: ignore[arg-type]
    assert res.truncated and len(res.stdout) <= 10_000 and not res.timed_out
    assert res.output_stopped and res.stdout_dropped + res.stderr_dropped > MAX_DRAIN_BYTES


def test_output_cap_counts_dropped_bytes_and_keeps_whole_characters(backend: str) -> None:
    # 3,001 bytes: "a" then 1,000 three-byte characters; a 1,001-byte cap falls inside the 334th character
    res = run_python(
        "import sys\nsys.stdout.write('a' + '\u20ac' * 1000)\nsys.stderr.write('e' * 50)",
        max_output_bytes=1_001,
        backend=backend,  # type: ignore[arg-type]
    )
    assert res.returncode == 0 and res.truncated and not res.output_stopped  # the run finished normally
    assert res.stdout == "a" + "\u20ac" * 333 and "\ufffd" not in res.stdout
    assert res.stdout_dropped == 2_001  # 2,000 bytes past the cap and the 1 byte of the cut character
    assert (res.stderr, res.stderr_dropped) == ("e" * 50, 0)


def test_fork_bomb_leaves_concurrent_threaded_calls_intact(backend: str) -> None:
    # Issue 16: all calls used to share one uid's process budget, so a fork bomb made concurrent benign
    # calls fail to start threads ("can't start new thread"): false zero rewards in training.
    if not _process_limit_holds(backend, 16):  # never unleash a real fork bomb on a shared machine unguarded
        pytest.fail("process limit not enforced; refusing to run the fork bomb")
    import concurrent.futures as cf

    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    benign = (
        "import threading, time\nout = [0] * 12\n"
        "def work(i):\n    time.sleep(0.2)\n    out[i] = i * i + {seed}\n"
        "ts = [threading.Thread(target=work, args=(i,)) for i in range(12)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(sum(out))"
    )
    with cf.ThreadPoolExecutor(9) as pool:
        bombing = pool.submit(run_python, bomb, timeout_s=4.0, backend=backend)
        time.sleep(0.5)  # the bomb has filled its budget
        calls = {
            seed: pool.submit(run_python, benign.format(seed=seed), timeout_s=15.0, backend=backend)
            for seed in range(8)
        }
        results = {seed: f.result() for seed, f in calls.items()}
        assert bombing.result().returncode != 0
    for seed, res in results.items():
        assert res.stdout.strip() == str(506 + 12 * seed), (seed, res.stderr[-300:])


def test_each_call_holds_its_own_uid() -> None:
    from trace_rl.envs import sandbox_uids

    with sandbox_uids.call_uid() as a, sandbox_uids.call_uid() as b:
        assert a != b
        if os.geteuid() == 0:
            assert a in sandbox_uids.CALL_UIDS and b in sandbox_uids.CALL_UIDS
    if os.geteuid() == 0:  # the lock files go away with the calls
        lock_dir = Path(sandbox_uids.lock_dir())
        assert not (lock_dir / str(a)).exists() and not (lock_dir / str(b)).exists()


def test_caller_environment_invisible(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACE_RL_SECRET_TOKEN", "hunter2")
    code = (
        "import os\nprint(sorted(os.environ))\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try:\n            print(open(f'/proc/{p}/environ', 'rb').read())\n"
        "        except OSError:\n            pass"
    )
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    assert "hunter2" not in res.stdout and "TRACE_RL_SECRET_TOKEN" not in res.stdout


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("print(1)", timeout_s=0)
    with pytest.raises(ValueError, match="backend"):
        run_python("print(1)", backend="docker")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spares must be an int from 0 to 64"):
        run_python("print(1)", spares=-1)


def test_started_spares_serve_one_call_each(backend: str) -> None:
    # Sandboxes started ahead of their calls (the default): every call still gets a fresh one, so nothing one
    # call leaves in /tmp, its pid namespace or its process table reaches the next; same results with none kept.
    from trace_rl.envs import sandbox

    code = (
        "import os\n"
        "seen = os.path.exists('/tmp/mark')\n"
        "open('/tmp/mark', 'w').write('x')\n"
        "print(seen, len([p for p in os.listdir('/proc') if p.isdigit()]))"
    )
    run_python("print(1)", backend=backend, spares=2)  # type: ignore[arg-type]
    key = (backend, 5.0, 512, sandbox.DEFAULT_MAX_PROCS, sandbox._python_paths())
    deadline = time.monotonic() + 10
    while sandbox._SPARES.ready(key) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox._SPARES.ready(key) == 2
    outs = [run_python(code, backend=backend, spares=2).stdout for _ in range(4)]  # type: ignore[arg-type]
    outs.append(run_python(code, backend=backend, spares=0).stdout)  # type: ignore[arg-type]
    assert outs[0].startswith("False ") and outs == [outs[-1]] * 5, outs  # no mark seen, same process count


def test_limits_hold_on_a_sandbox_started_ahead(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attacks above mostly start their own sandbox (their limits are a key of their own, used once). Here each
    # runs on a spare that waited idle first: the wall limit counts from the code's handover, the address-space
    # and process limits are the spare's own.
    import threading

    from trace_rl.envs import sandbox

    limits = {"timeout_s": 1.0, "memory_mb": 256, "max_procs": 16}
    key = (backend, 1.0, 256, 16, sandbox._python_paths())
    starts: list[str] = []  # the thread of every sandbox start: the caller's when a call starts its own
    real_start = sandbox._start

    def counted(*args: object) -> sandbox._Started:
        starts.append(threading.current_thread().name)
        return real_start(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(sandbox, "_start", counted)

    def on_a_spare(code: str) -> tuple[sandbox.ExecResult, float]:
        deadline = time.monotonic() + 10
        while sandbox._SPARES.ready(key) < 1 and time.monotonic() < deadline:
            run_python("pass", backend=backend, spares=1, **limits)  # type: ignore[arg-type]
            time.sleep(0.2)
        time.sleep(1.5)  # idle longer than the wall limit
        assert sandbox._SPARES.ready(key) == 1
        starts.clear()
        t0 = time.monotonic()
        res = run_python(code, backend=backend, spares=1, **limits)  # type: ignore[arg-type]
        assert threading.current_thread().name not in starts  # served by the spare, not started on demand
        return res, time.monotonic() - t0

    try:
        res, took = on_a_spare("print('started', flush=True)\nwhile True:\n    pass")
        assert res.timed_out and res.stdout == "started\n" and 0.9 < took < 5.0  # killed near its 1 s limit
        res, _ = on_a_spare("x = bytearray(2 * 1024**3)\nprint('allocated')")
        assert "MemoryError" in res.stderr and "allocated" not in res.stdout
        res, _ = on_a_spare(_FORK_PROBE)
        assert res.stdout.strip().isdigit() and int(res.stdout) < 16
    finally:
        run_python("pass", backend=backend, spares=0, **limits)  # type: ignore[arg-type]  # stop keeping spares


def test_no_capability_and_own_uid_left(backend: str) -> None:
    # Whatever the backend, the code runs as a non-root uid and gid, no supplementary group, every capability
    # set (inheritable, permitted, effective, bounding, ambient) empty.
    code = (
        "import os\n"
        "caps = {l.split()[0]: int(l.split()[1], 16) for l in open('/proc/self/status') if l.startswith('Cap')}\n"
        "print(os.getuid() != 0, os.getgid() != 0, os.getgroups(), sorted(k for k, v in caps.items() if v))"
    )
    res = run_python(code, backend=backend)  # type: ignore[arg-type]
    assert res.stdout == "True True [] []\n", res


def _zygote_required() -> None:
    require("sandbox", "zygote" in BACKENDS or os.geteuid() != 0)  # root callers must have it
    if os.geteuid() != 0:
        pytest.skip("the zygote backend is for root callers; non-root callers use bwrap")


def test_zygote_calls_share_nothing_but_the_started_interpreter() -> None:
    # One zygote forks every call: files in /tmp, processes and uids of one call never reach the next, also
    # when the calls run at the same time; each call's code is read by the call itself, never by the zygote.
    _zygote_required()
    from concurrent.futures import ThreadPoolExecutor

    code = (
        "import os, time\n"
        "seen = os.path.exists('/tmp/mark')\n"
        "open('/tmp/mark', 'w').write('x')\n"
        "time.sleep(0.3)\n"
        "print(seen, len([p for p in os.listdir('/proc') if p.isdigit()]), os.getuid())"
    )
    with ThreadPoolExecutor(4) as pool:
        outs = [
            f.result().stdout.split()
            for f in [pool.submit(run_python, code, backend="zygote") for _ in range(6)]
        ]
    assert all(o[:2] == ["False", "2"] for o in outs), outs  # its init and itself: nothing of another call
    assert len({o[2] for o in outs[:4]}) == 4  # the 4 concurrent calls held 4 different uids


def test_zygote_restarts_after_it_dies_and_the_call_it_ran_fails_visibly() -> None:
    _zygote_required()
    import signal
    import threading

    from trace_rl.envs import sandbox_zygote

    assert run_python("print(1)", backend="zygote").stdout == "1\n"
    zyg = sandbox_zygote._ZYGOTE
    assert zyg is not None
    killer = threading.Timer(0.5, lambda: os.kill(zyg.proc.pid, signal.SIGKILL))
    killer.start()
    res = run_python(
        "import time\nprint('started', flush=True)\ntime.sleep(3)\nprint('done')", backend="zygote"
    )
    killer.join()
    assert res.returncode == -signal.SIGKILL and "zygote stopped during the call" in res.stderr, res
    assert "done" not in res.stdout  # the call died with the zygote, it was not left running
    assert run_python("print(2)", backend="zygote").stdout == "2\n"  # a new zygote
    assert sandbox_zygote._ZYGOTE is not None and sandbox_zygote._ZYGOTE is not zyg


def test_zygote_dies_with_its_caller() -> None:
    # The zygote outlives no caller: SIGKILL the process that started it and the zygote and its running call go.
    _zygote_required()
    import signal
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from trace_rl.envs import sandbox, sandbox_zygote\n"
        "import threading\n"
        "threading.Thread(target=sandbox.run_python, args=('import time\\ntime.sleep(30)',),"
        " kwargs={'backend': 'zygote', 'timeout_s': 60}, daemon=True).start()\n"
        "while sandbox_zygote._ZYGOTE is None: time.sleep(0.05)\n"
        "print(sandbox_zygote._ZYGOTE.proc.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    caller = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": src}
    )
    try:
        assert caller.stdout is not None
        zygote_pid = int(caller.stdout.readline())
        time.sleep(0.5)  # the call is running by now
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{zygote_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{zygote_pid}").exists()
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()


def test_code_runs_as_in_a_fresh_interpreter(backend: str) -> None:
    # The zygote runs the code in an interpreter it started earlier: nothing of its own may show. Its
    # `from __future__ import annotations` must not reach the code, sys.excepthook is the one that reports, the
    # traceback holds only the code's frames, and __main__ has the names `python -I -S -` gives it.
    res = run_python("def f(x: UndefinedName): pass\nprint('ran')", backend=backend)  # type: ignore[arg-type]
    assert "NameError" in res.stderr and res.stdout == "" and res.returncode == 1
    res = run_python(
        "import sys\nsys.excepthook = lambda *a: print('HOOKED', a[0].__name__)\n1/0", backend=backend
    )  # type: ignore[arg-type]
    assert (res.stdout, res.returncode) == ("HOOKED ZeroDivisionError\n", 1)
    res = run_python("def g():\n    raise ValueError('x')\ng()", backend=backend)  # type: ignore[arg-type]
    assert res.stderr == (
        'Traceback (most recent call last):\n  File "<stdin>", line 3, in <module>\n'
        '  File "<stdin>", line 2, in g\nValueError: x\n'
    )
    res = run_python("print(sorted(k for k in globals() if k != 'k'), __file__, __name__)", backend=backend)  # type: ignore[arg-type]
    names = (
        "['__annotations__', '__builtins__', '__cached__', '__doc__', '__file__', '__loader__', '__name__', "
    )
    assert res.stdout == names + "'__package__', '__spec__'] <stdin> __main__\n"
    res = run_python("def r(n):\n    return 0 if n == 0 else 1 + r(n - 1)\nprint(r(980))", backend=backend)  # type: ignore[arg-type]
    assert res.stdout == "980\n"  # the zygote's own frames do not eat into the recursion limit


def test_zygote_killed_under_concurrent_calls_fails_only_the_calls_it_ran() -> None:
    # A dead zygote fails the calls it was running (visibly); the other threads' calls start on a new zygote,
    # and no call raises (a first version stopped the new zygote from every failed call, found in review).
    _zygote_required()
    import signal
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from trace_rl.envs import sandbox_zygote

    assert run_python("print(1)", backend="zygote").stdout == "1\n"
    zyg = sandbox_zygote._ZYGOTE
    assert zyg is not None
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(zyg.proc.pid, signal.SIGKILL)

    def loop() -> list[tuple[float, int]]:
        out = []
        for _ in range(8):
            t0 = time.monotonic()
            res = run_python("import time\ntime.sleep(0.2)\nprint('ok')", backend="zygote")
            out.append((t0, 0 if res.stdout == "ok\n" else res.returncode))
        return out

    timer = threading.Timer(0.5, kill)
    timer.start()
    with ThreadPoolExecutor(6) as pool:
        results = [
            r for f in [pool.submit(loop) for _ in range(6)] for r in f.result()
        ]  # raises if a call raised
    timer.join()
    late = [rc for t0, rc in results if t0 > killed_at[0] + 0.5]
    assert late and all(rc == 0 for rc in late), results
    assert sum(rc != 0 for _, rc in results) <= 6 + 4  # the calls running, and spares forked, when it died


def test_zygote_leaves_no_folder_on_the_host() -> None:
    _zygote_required()
    import glob
    import subprocess
    import sys
    import tempfile

    pattern = os.path.join(tempfile.gettempdir(), "trace-rl-*")
    before = set(glob.glob(pattern))
    src = str(Path(__file__).resolve().parents[2] / "src")
    code = (
        "from trace_rl.envs.sandbox import run_python\nprint(run_python('print(1)', backend='zygote').stdout)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True
    )
    assert done.stdout == "1\n\n", done.stderr
    assert set(glob.glob(pattern)) <= before


def test_zygote_refuses_kernel_keyrings() -> None:
    # Keys added to a uid's keyrings outlive the call (found in review): the zygote's worker refuses the keyring
    # calls with EPERM (a seccomp filter); other calls go on, and so does the code.
    _zygote_required()
    from trace_rl.envs.sandbox_zygote_main import SECCOMP_KEYRING

    machine = os.uname().machine
    assert machine in SECCOMP_KEYRING, f"no keyring filter for {machine}: add its syscall numbers"
    _, (add_key, request_key, keyctl) = SECCOMP_KEYRING[machine]
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"r = libc.syscall({add_key}, b'user', b'k', b'S' * 10, 10, -4)\nprint(r, ctypes.get_errno())\n"
        f"r = libc.syscall({keyctl}, 0, -4, 0)\nprint(r, ctypes.get_errno())\n"
        f"r = libc.syscall({request_key}, b'user', b'k', None, 0)\nprint(r, ctypes.get_errno())\n"
        "print(os.getpid(), sum(range(10)))"
    )
    res = run_python(code, backend="zygote")
    assert res.stdout == "-1 1\n-1 1\n-1 1\n2 45\n", res
