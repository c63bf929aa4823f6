"""The ``zygote`` sandbox backend: one started interpreter forks each call's sandbox (issue 38 item 3).

A sandboxed call through ``bwrap`` or ``unshare`` execs a launcher chain and a fresh ``python -I -S``: about 20 ms
of CPU per call on the 2-core machine, 9 ms of it the interpreter's start (measured with a cpuacct cgroup around
100 calls; docs/benchmarks.md). A multi-turn step makes hundreds of calls. Here one process, started once per
caller process (`sandbox_zygote_main`, stdlib only, as root), forks per call an init into a fresh pid namespace
that enters fresh mount, network, IPC, UTS and cgroup namespaces, builds the ``unshare`` backend's read-only
root with a private /tmp, and forks the worker that sets the call's limits, drops to the call's own uid with no capabilities and
runs the code in the already started interpreter. Each call still has its own namespaces, root, /tmp, uid and
limits; nothing of one call is visible to the next (the zygote never reads a call's code or output: they go
through the call's own pipes, passed to it as descriptors).

What differs from a fresh interpreter (docs/environments.md lists it all): the modules the zygote imported are
already loaded, every call shares the zygote's string-hash seed and memory layout (``hash('a')`` and the order of
a set of strings are the same in every call, random across zygotes), and stack inspection sees the zygote's
frames below the code's. Root only: a non-root caller cannot build
the namespaces without a user namespace, and gets ``bwrap`` from ``backend="auto"``.

The zygote exits when the caller's process ends (its socket closes) and kills every call still running; a forked
child of the caller drops its handle (`os.register_at_fork`) and starts its own zygote if it makes calls.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

MAIN = Path(__file__).with_name("sandbox_zygote_main.py")
REPLY_TIMEOUT_S = 10.0
"""How long a call waits for the zygote to report its fork; past it the zygote is taken for hung and restarted."""


class ZygoteError(OSError):
    """The zygote could not be started or stopped answering (an OSError: a setup problem, not a failed turn)."""


class Zygote:
    """One zygote process and the caller's end of its socket; thread-safe (each call has its own pipes)."""

    def __init__(self, python: str, tmp_mb: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Each call mounts its root's tmpfs over this existing folder inside its own private mount namespace:
        # nothing is created on the host, so nothing is left behind by a caller that dies.
        root = os.path.realpath(tempfile.gettempdir())
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-S", str(MAIN), str(theirs.fileno()), root, str(tmp_mb)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,  # the calls' streams replace these three; each must exist
                stdout=subprocess.DEVNULL,  # (a caller with a closed stderr would leave sys.stderr None)
                stderr=subprocess.DEVNULL,
                env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"},
                cwd="/",
                start_new_session=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self._ids = itertools.count()  # next() on it is atomic under the GIL

    def alive(self) -> bool:
        """The zygote process has not exited (reaps it if it has)."""
        return self.proc.poll() is None

    def spawn(self, uid: int, limits: dict[str, int]) -> ZygoteCall:
        """Fork one call's sandbox; its stdin waits for the code.

        Raises:
            ZygoteError: the zygote is gone, refused the fork, or did not answer in ``REPLY_TIMEOUT_S``.
        """
        call_id = str(next(self._ids))
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        msg = "run {} {} {as_bytes} {cpu_s} {nproc} {fsize}".format(call_id, uid, **limits)
        try:
            socket.send_fds(self.sock, [msg.encode()], [stdin_r, out_w, err_w, status_w])
        except OSError as exc:
            for fd in (stdin_r, stdin_w, out_r, out_w, err_r, err_w, status_r, status_w):
                os.close(fd)
            raise ZygoteError(f"the sandbox zygote is gone: {exc}") from exc
        for fd in (stdin_r, out_w, err_w, status_w):
            os.close(fd)
        call = ZygoteCall(self, call_id, stdin_w, out_r, err_r, status_r)
        reply = call.read_status(time.monotonic() + REPLY_TIMEOUT_S)
        if reply is None or not reply.startswith("pid "):
            call.close()
            if reply is None:
                stop_zygote(only=self)
            raise ZygoteError(f"the sandbox zygote did not start the call: {reply or 'no answer'}")
        return call

    def kill(self, call_id: str) -> None:
        """Ask the zygote to SIGKILL call ``call_id``'s init (nothing happens if the call has ended or the zygote
        is gone)."""
        with contextlib.suppress(OSError):
            self.sock.send(f"kill {call_id}".encode())

    def stop(self) -> None:
        """Close the socket (the zygote kills its calls and exits) and reap it."""
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def forget(self) -> None:
        """In a forked child: close the inherited socket only (the parent's zygote stays the parent's)."""
        with contextlib.suppress(OSError):
            os.close(self.sock.detach())


class ZygoteCall:
    """One call forked by the zygote: its stdin, stdout, stderr and status pipes (the caller's ends)."""

    def __init__(
        self, zygote: Zygote, call_id: str, stdin: int, stdout: int, stderr: int, status: int
    ) -> None:
        self.zygote, self.call_id = zygote, call_id
        self.stdin, self.stdout, self.stderr, self.status = stdin, stdout, stderr, status
        self._buf = b""

    def read_status(self, deadline: float) -> str | None:
        """The zygote's next line about this call (``pid N``, ``exit STATUS``, ``error ...``); None when it did not
        come by ``deadline`` or the zygote closed the pipe without one."""
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.status], [], [], remaining)[0]:
                return None
            chunk = os.read(self.status, 256)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def running(self) -> bool:
        """Not ended yet: its zygote lives and has written nothing more about it (checked without waiting; a
        call forked ahead by a zygote that has died is not running, even if its init has not died yet)."""
        return self.zygote.alive() and not self._buf and not select.select([self.status], [], [], 0)[0]

    def forget(self) -> None:
        """In a forked child: close the inherited descriptors only (the call stays the parent's)."""
        for fd in (self.stdin, self.stdout, self.stderr, self.status):
            with contextlib.suppress(OSError):
                os.close(fd)

    def kill(self) -> None:
        """SIGKILL the call's init (its namespace, the worker included, dies with it)."""
        self.zygote.kill(self.call_id)

    def close_stdin(self) -> None:
        """End of the code: close the caller's end of the call's stdin (once: a descriptor number closed twice
        could be another thread's by then)."""
        if self.stdin >= 0:
            os.close(self.stdin)
            self.stdin = -1

    def close(self) -> None:
        """Close every descriptor of the call this process holds (once each)."""
        self.close_stdin()
        for fd in (self.stdout, self.stderr, self.status):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.stdout = self.stderr = self.status = -1


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote(python: str, tmp_mb: int) -> Zygote:
    """This process's zygote for ``python``, started on first use and restarted if it died."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and not _ZYGOTE.alive():
            _ZYGOTE.stop()
            _ZYGOTE = None
        if _ZYGOTE is None:
            _ZYGOTE = Zygote(python, tmp_mb)
        return _ZYGOTE


def stop_zygote(only: Zygote | None = None) -> None:
    """Stop this process's zygote (if any; with ``only``, just when it is still that one: a call that found its
    zygote gone must not stop the new one another thread has started since); the next call starts a new one."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and (only is None or _ZYGOTE is only):
            _ZYGOTE.stop()
            _ZYGOTE = None


def _forget_in_child() -> None:
    global _ZYGOTE, _ZYGOTE_LOCK
    _ZYGOTE_LOCK = threading.Lock()  # a lock held by another thread at fork would never be released here
    if _ZYGOTE is not None:
        _ZYGOTE.forget()
        _ZYGOTE = None


os.register_at_fork(after_in_child=_forget_in_child)
