"""Run untrusted Python code in a sandbox: the only way the `python` tool executes model-written code.

Three isolating backends, chosen automatically (``backend="auto"``), in this order:

0. ``zygote`` (root callers): one started interpreter per caller process forks each call's sandbox: the same
   namespaces, read-only root, private /tmp, per-call uid, capability drop and limits as ``unshare`` below,
   without exec'ing a launcher chain and a new interpreter per call (a third of the CPU per call; see
   `trace_rl.envs.sandbox_zygote` for how it works and what differs from a fresh interpreter).
1. ``bwrap`` (bubblewrap): ``--unshare-all`` (no network, own pid/ipc/uts/user namespaces), read-only binds
   of /usr and the interpreter's prefix, a private tmpfs /tmp, fresh /proc and a minimal /dev,
   ``--die-with-parent``, ``--new-session``, ``--clearenv``; run as a uid of the call's own (root caller)
   or uid 65534 in the call's own user namespace (non-root caller).
2. ``unshare``: ``unshare --mount --net --pid --ipc --uts --fork --kill-child`` builds the same minimal root
   inside its private mount namespace (tmpfs root, read-only /usr and interpreter prefix, private /tmp, fresh
   /proc), chroots into it and drops to the call's own uid/gid with ``setpriv``. It needs root (or CAP_SYS_ADMIN); it
   is what runs where bubblewrap is not installed.

Both apply ``prlimit`` limits inside the sandbox: address space (``memory_mb``), CPU seconds, processes
(RLIMIT_NPROC, counted per call: see `trace_rl.envs.sandbox_uids.call_uid`), file size and no core dumps. Around them the caller enforces a
wall-clock timeout and an output cap: output past the cap is counted, not kept (the result says how many
bytes were dropped, and a cut never splits a UTF-8 character), and past ``MAX_DRAIN_BYTES`` of it, or at the
timeout, the caller kills the launcher's whole process group; the launcher's death tears down the sandbox's
pid namespace (every process in it, background ones included). Every call has its own process budget
(`trace_rl.envs.sandbox_uids`), so one call's fork bomb cannot make concurrent calls fail to start processes or threads.
The launcher starts with an empty environment so nothing of the caller's environment is visible anywhere.

Only the interpreter's standard library is available inside (``python -I -S``: no site-packages, no project
files). ``backend="none"`` runs the code unsandboxed (limits only) and must be asked for explicitly; it is
never a silent fallback. ``run_python`` raises `SandboxUnavailableError` (an OSError) when no isolating backend
works on this machine.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

from trace_rl.envs import sandbox_zygote
from trace_rl.envs.sandbox_output import MAX_DRAIN_BYTES as MAX_DRAIN_BYTES  # re-exported
from trace_rl.envs.sandbox_output import ExecResult as ExecResult  # re-exported
from trace_rl.envs.sandbox_output import collect, give_code
from trace_rl.envs.sandbox_spares import SparePool, check_spares
from trace_rl.envs.sandbox_uids import CALL_UIDS as CALL_UIDS  # re-exported: the public names stay here too
from trace_rl.envs.sandbox_uids import NOBODY, SandboxLockError, UidLease, lease_uid
from trace_rl.envs.sandbox_uids import lock_dir as lock_dir
from trace_rl.errors import UserError

Backend = Literal["auto", "zygote", "bwrap", "unshare", "none"]

DEFAULT_MAX_PROCS = 64  # processes (RLIMIT_NPROC counts threads too) per call: see trace_rl.envs.sandbox_uids
DEFAULT_MAX_OUTPUT = 64 * 1024  # bytes kept per stream
TMP_SIZE_MB = 64


def _python_paths() -> tuple[str, str]:
    """(interpreter path, its installation prefix) of a real CPython to run inside the sandbox."""
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    prefix = os.path.realpath(sys.base_prefix)
    return exe, prefix


def _system_binds() -> list[tuple[str, str]]:
    """(kind, path) entries for the read-only system: 'bind' real dirs, 'link' merged-/usr symlinks."""
    out: list[tuple[str, str]] = [("bind", "/usr")]
    for name in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(name):
            out.append(("link", name))
        elif os.path.isdir(name):
            out.append(("bind", name))
    return out


def _prlimit_args(timeout_s: float, memory_mb: int, max_procs: int) -> list[str]:
    cpu = max(1, int(timeout_s) + 1)
    return [
        "prlimit",
        f"--as={memory_mb * 1024 * 1024}",
        f"--cpu={cpu}",
        f"--nproc={max_procs}",
        f"--fsize={TMP_SIZE_MB * 1024 * 1024}",
        "--core=0",
        "--",
    ]


def _bwrap_command(python: str, prefix: str, limits: list[str], uid: int) -> list[str]:
    # RLIMIT_NPROC is not enforced for processes that are host uid 0, and bwrap's own user namespace maps
    # the sandbox uid to the caller's uid. So a root caller keeps the initial user namespace and drops to
    # this call's own uid with setpriv inside (the process limit then holds per call, as in the unshare
    # backend); a non-root caller uses a user namespace per call (the kernel counts RLIMIT_NPROC per user
    # namespace, so each call has its own budget; all of them together are bounded by the caller's limit).
    root = os.geteuid() == 0
    cmd = [
        "bwrap",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    cmd += ["--die-with-parent", "--new-session", "--clearenv"]
    if root:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        drop = [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
    else:
        cmd += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
        drop = []
    for kind, path in _system_binds():
        if kind == "link":
            cmd += ["--symlink", os.readlink(path), path]
        else:
            cmd += ["--ro-bind", path, path]
    if not prefix.startswith("/usr/"):
        parts = prefix.strip("/").split("/")
        for i in range(1, len(parts)):  # traversable parents, e.g. /root is 0700 on the host
            cmd += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
        cmd += ["--ro-bind", prefix, prefix]
    cmd += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--remount-ro",
        "/",
    ]
    cmd += ["--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"]
    return [*cmd, "--", *drop, *limits, python, "-I", "-S", "-"]


# Runs as root inside fresh mount/pid/net namespaces: builds a minimal read-only root and enters it.
_UNSHARE_SCRIPT = r"""
set -eu
R="$1"; PREFIX="$2"; PY="$3"; ID="$4"; shift 4
mount -t tmpfs -o size=1m,mode=755 sandbox-root "$R"
mkdir -p "$R/usr" "$R/proc" "$R/dev" "$R/tmp"
mount --bind /usr "$R/usr"; mount -o remount,bind,ro,nosuid,nodev "$R/usr"
for d in /bin /lib /lib64 /sbin; do
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$R$d";
  elif [ -d "$d" ]; then mkdir -p "$R$d"; mount --bind "$d" "$R$d"; mount -o remount,bind,ro,nosuid,nodev "$R$d"; fi
done
case "$PREFIX" in /usr/*) ;; *)
  mkdir -p "$R$PREFIX"; mount --bind "$PREFIX" "$R$PREFIX"; mount -o remount,bind,ro,nosuid,nodev "$R$PREFIX";;
esac
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
for n in null zero urandom random; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
mount -t tmpfs -o size=__TMP_SIZE__m,mode=1777,nosuid,nodev sandbox-tmp "$R/tmp"
mount -o remount,ro,bind "$R"
cd "$R/tmp"
exec chroot "$R" setpriv --reuid="$ID" --regid="$ID" --clear-groups --inh-caps=-all --bounding-set=-all \
  -- /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "$@" "$PY" -I -S -
""".replace("__TMP_SIZE__", str(TMP_SIZE_MB))


def _unshare_command(python: str, prefix: str, limits: list[str], root_dir: str, uid: int) -> list[str]:
    return [
        "unshare",
        "--mount",
        "--net",
        "--pid",
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "sh",
        "-c",
        _UNSHARE_SCRIPT,
        "sandbox",
        root_dir,
        prefix,
        python,
        str(uid),
        *limits,
    ]


class SandboxUnavailableError(OSError):
    """No isolating backend works on this machine (a setup problem, not a bug: the CLI prints it as one line).

    An OSError, not a ValueError: an env's ``call_tool`` turns ValueErrors into failed turns, and a machine without a
    sandbox must stop the run, not fail every tool call silently."""


def _no_core_dumps(cmd: list[str]) -> list[str]:
    """Run the launcher itself without core dumps. A ``prlimit`` prefix, not ``preexec_fn``: tool calls run in
    worker threads, and Python code between fork and exec is unsafe in a threaded process."""
    prlimit = shutil.which("prlimit")
    return [prlimit, "--core=0", "--", *cmd] if prlimit else cmd


def _launch(cmd: list[str]) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a session of its own with pipes and an empty environment; it waits for its code on stdin."""
    return subprocess.Popen(
        _no_core_dumps(cmd),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},  # nothing of the caller's environment leaks
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )


def _run(cmd: list[str], code: str, timeout_s: float, max_output_bytes: int, backend: str) -> ExecResult:
    """Start ``cmd`` with ``code`` on stdin; collect capped output; kill the process group on limits."""
    return _finish(_launch(cmd), code, timeout_s, max_output_bytes, backend)


def _finish(
    proc: subprocess.Popen[bytes], code: str, timeout_s: float, max_output_bytes: int, backend: str
) -> ExecResult:
    """Give a started sandbox ``code`` on stdin; collect capped output; kill the process group on limits.
    The wall-clock limit counts from here, not from the sandbox's start."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    give_code(proc.stdin.fileno(), code)
    proc.stdin.close()
    deadline = time.monotonic() + timeout_s
    out = collect(proc.stdout.fileno(), proc.stderr.fileno(), deadline, max_output_bytes)
    if out.timed_out or out.stopped:
        _kill_group(proc)
    # Wait for the launcher WITHOUT reaping it (WNOWAIT), kill what is left of its process group, then reap:
    # signalling a group after its leader was reaped could hit an unrelated group that reused the pid.
    grace = time.monotonic() + max(0.5, deadline - time.monotonic())
    pause = 0.0002  # the launcher usually exits within a millisecond of closing its pipes: poll fast, then back off
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > grace:
            out.timed_out = True
            _kill_group(proc)
            grace = float("inf")
        time.sleep(pause)
        pause = min(2 * pause, 0.005)
    _kill_group(proc)
    returncode = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return out.result(returncode, backend)


def _finish_zygote(
    call: sandbox_zygote.ZygoteCall, code: str, timeout_s: float, max_output_bytes: int
) -> ExecResult:
    """`_finish` for a call forked by the zygote (`trace_rl.envs.sandbox_zygote`): the zygote kills and reaps it,
    and reports its wait status on the call's status pipe."""
    give_code(call.stdin, code)
    call.close_stdin()
    deadline = time.monotonic() + timeout_s
    out = collect(call.stdout, call.stderr, deadline, max_output_bytes)
    if out.timed_out or out.stopped:
        call.kill()
    line = call.read_status(time.monotonic() + max(0.5, deadline - time.monotonic()))
    if line is None:  # output closed but the call goes on (a daemon holding no pipe): the time is up
        out.timed_out = True
        call.kill()
        line = call.read_status(time.monotonic() + sandbox_zygote.REPLY_TIMEOUT_S)
    if line is None or not line.startswith("exit "):
        sandbox_zygote.stop_zygote(only=call.zygote)  # gone or hung: the next call starts a new one
        note = "\nsandbox: the zygote stopped during the call; the call was killed\n"
        return out.result(-signal.SIGKILL, "zygote", note)
    return out.result(os.waitstatus_to_exitcode(int(line.split()[1])), "zygote")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@functools.cache
def _backend_works(backend: str) -> bool:
    """Probe a backend once per process: run ``print(6*7)`` and expect ``42``."""
    try:
        result = _run_with(backend, "print(6*7)", 10.0, 256, DEFAULT_MAX_PROCS, 1024)
    except SandboxLockError:
        raise  # an unsafe lock folder is the user's to fix, not a backend that does not work
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0 and result.stdout.strip() == "42"


def available_backends() -> list[str]:
    """Isolating backends that work on this machine, in preference order (may be empty)."""
    out = []
    if os.geteuid() == 0 and _backend_works("zygote"):
        out.append("zygote")
    if shutil.which("bwrap") and _backend_works("bwrap"):
        out.append("bwrap")
    if all(shutil.which(t) for t in ("unshare", "setpriv", "prlimit", "chroot")) and _backend_works(
        "unshare"
    ):
        out.append("unshare")
    return out


@dataclass
class _Started:
    """A sandbox started and waiting for its code on stdin, with what it holds until its call ends: its uid
    lease and (unshare backend) its root folder. A `trace_rl.envs.sandbox_spares.Spare`."""

    proc: subprocess.Popen[bytes]
    lease: UidLease | None = None
    root: str | None = None  # a folder this process made and removes (`release`)

    def alive(self) -> bool:
        """Still running (checked without reaping it, so its pid cannot be reused before `discard`)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def finish(self, code: str, timeout_s: float, max_output_bytes: int, backend: str) -> ExecResult:
        return _finish(self.proc, code, timeout_s, max_output_bytes, backend)

    def release(self) -> None:
        """Release the uid and root folder (after the process was reaped)."""
        if self.lease is not None:
            self.lease.release()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def discard(self) -> None:
        """Kill the unused sandbox's process group, reap it, and release what it holds."""
        _kill_group(self.proc)
        with contextlib.suppress(ChildProcessError):
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self.release()

    def forget(self) -> None:
        """In a forked child: close the inherited descriptors only; the parent's sandbox and uid stay its own."""
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    os.close(f.fileno())
        if self.lease is not None:
            self.lease.forget()
        self.root = None  # the parent removes it


@dataclass
class _ZygoteStarted:
    """A call forked by the zygote, waiting for its code on stdin, with its uid lease: a
    `trace_rl.envs.sandbox_spares.Spare`, as `_Started` is for the other backends."""

    call: sandbox_zygote.ZygoteCall
    lease: UidLease

    def alive(self) -> bool:
        return self.call.running()

    def finish(self, code: str, timeout_s: float, max_output_bytes: int, backend: str) -> ExecResult:
        return _finish_zygote(self.call, code, timeout_s, max_output_bytes)

    def release(self) -> None:
        """Close the call's pipes and release the uid (after the zygote reported the call's end)."""
        self.call.close()
        self.lease.release()

    def discard(self) -> None:
        """Kill the unused call, wait for the zygote to report it, release what it holds."""
        self.call.kill()
        self.call.read_status(time.monotonic() + sandbox_zygote.REPLY_TIMEOUT_S)
        self.release()

    def forget(self) -> None:
        """In a forked child: close the inherited descriptors only; the parent's call and uid stay its own."""
        self.call.forget()
        self.lease.forget()


DEFAULT_SPARES = 4
"""Started sandboxes `run_python` keeps ready per backend and limits (`trace_rl.envs.sandbox_spares`)."""

_SPARES: SparePool[_Started | _ZygoteStarted] = SparePool()
atexit.register(_SPARES.close)


def _start(backend: str, timeout_s: float, memory_mb: int, max_procs: int) -> _Started | _ZygoteStarted:
    """Start one sandbox for ``backend`` under the given limits; it waits for its code on stdin.

    Raises:
        UserError: an unknown backend.
        SandboxLockError / RuntimeError: no safe lock folder, or no free uid (`trace_rl.envs.sandbox_uids.call_uid`).
        OSError: the launcher could not be started (`trace_rl.envs.sandbox_zygote.ZygoteError`: the zygote).
    """
    if backend not in ("zygote", "bwrap", "unshare", "none"):
        raise UserError(f"unknown sandbox backend {backend!r}; expected zygote, bwrap, unshare or none")
    python, prefix = _python_paths()
    if backend == "zygote":
        zygote_limits = {
            "as_bytes": memory_mb * 1024 * 1024,
            "cpu_s": max(1, int(timeout_s) + 1),
            "nproc": max_procs,
            "fsize": TMP_SIZE_MB * 1024 * 1024,
        }
        lease = lease_uid()
        try:
            try:
                call = sandbox_zygote.zygote(python, TMP_SIZE_MB).spawn(lease.uid, zygote_limits)
            except sandbox_zygote.ZygoteError:  # found dead (killed, or stopped by another thread): once more
                call = sandbox_zygote.zygote(python, TMP_SIZE_MB).spawn(lease.uid, zygote_limits)
        except BaseException:
            lease.release()
            raise
        return _ZygoteStarted(call, lease)
    limits = _prlimit_args(timeout_s, memory_mb, max_procs)
    if backend == "none":
        # Limits and an empty environment only; no isolation (explicit opt-in by the caller).
        return _Started(_launch([*limits, python, "-I", "-S", "-"]))
    lease = lease_uid()
    root: str | None = None
    try:
        if backend == "bwrap":
            cmd = _bwrap_command(python, prefix, limits, lease.uid)
        else:
            # a plain folder, not a TemporaryDirectory: a forked child's copy of one would delete it on collection
            root = tempfile.mkdtemp(prefix="trace-rl-sandbox-")
            os.chmod(root, 0o755)
            cmd = _unshare_command(python, prefix, limits, root, lease.uid)
        return _Started(_launch(cmd), lease, root)
    except BaseException:
        lease.release()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        raise


def _run_with(
    backend: str,
    code: str,
    timeout_s: float,
    memory_mb: int,
    max_procs: int,
    max_output_bytes: int,
    spares: int = 0,
) -> ExecResult:
    if backend not in ("zygote", "bwrap", "unshare", "none"):
        raise UserError(f"unknown sandbox backend {backend!r}; expected auto, zygote, bwrap, unshare or none")
    key = (backend, float(timeout_s), int(memory_mb), int(max_procs), _python_paths())
    started = _SPARES.take(key, spares, functools.partial(_start, backend, timeout_s, memory_mb, max_procs))
    if started is None:
        started = _start(backend, timeout_s, memory_mb, max_procs)
    try:
        return started.finish(code, timeout_s, max_output_bytes, backend)
    finally:
        started.release()


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    backend: Backend = "auto",
    max_procs: int = DEFAULT_MAX_PROCS,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    spares: int = DEFAULT_SPARES,
) -> ExecResult:
    """Run ``code`` with ``python -I -S`` in a sandbox and return its output.

    Args:
        code: Python source, passed on standard input.
        timeout_s: wall-clock limit in seconds (CPU limit is ``int(timeout_s) + 1`` seconds); on expiry the
            whole process tree is killed and ``timed_out`` is True.
        memory_mb: address-space limit (RLIMIT_AS) in MiB.
        backend: "auto" (zygote for a root caller, else bwrap, else unshare: the first that works here),
            "zygote", "bwrap", "unshare", or "none" (NO isolation, only limits and an empty environment: must be
            asked for explicitly).
        max_procs: RLIMIT_NPROC for the sandbox user.
        max_output_bytes: bytes kept per stream. Output beyond it is counted (``stdout_dropped`` /
            ``stderr_dropped``, ``truncated``) while the run goes on; past ``MAX_DRAIN_BYTES`` of dropped
            output the run is killed (``output_stopped``).
        spares: sandboxes with this backend and these limits to keep started ahead of later calls, by a
            background thread (`trace_rl.envs.sandbox_spares`): a call takes a started one when there is one, so
            it does not wait for the namespaces and the interpreter to start. Each serves one call only and is
            torn down after it (its own namespaces, uid, /tmp and limits, as a call started on demand); the
            wall-clock limit counts from the moment the code is handed over, and the CPU limit includes the
            interpreter's start (about 20 ms). 0: every call starts its own sandbox, as before. At most
            ``MAX_SPARES`` (64). With the zygote backend a spare is a call forked ahead (its namespaces, root,
            uid and limits set up, its interpreter waiting for the code).

    Returns:
        ExecResult. Errors of the code itself (exceptions, limits hit) show in returncode and stderr.

    Raises:
        ValueError: bad limits or backend name.
        SandboxUnavailableError: ``backend="auto"`` and no isolating backend works here (bwrap missing and unshare
            not permitted); the message says how to fix it.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if memory_mb < 64:
        raise ValueError(f"memory_mb must be >= 64 (the interpreter needs it), got {memory_mb}")
    if max_procs < 1 or max_output_bytes < 1:
        raise ValueError("max_procs and max_output_bytes must be >= 1")
    check_spares(spares)
    if backend == "auto":
        backends = available_backends()
        if not backends:
            raise SandboxUnavailableError(
                "no sandbox backend works here: install bubblewrap (apt-get install bubblewrap) or run as "
                "root so `unshare` can create namespaces; pass backend='none' to run unsandboxed on purpose"
            )
        backend = backends[0]  # type: ignore[assignment]
    return _run_with(backend, code, timeout_s, memory_mb, max_procs, max_output_bytes, spares)
