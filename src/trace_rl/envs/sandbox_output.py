"""A sandboxed call's output: what `trace_rl.envs.sandbox.run_python` returns and how it reads the call's streams.

Shared by every backend (`trace_rl.envs.sandbox` for bwrap, unshare and none, `trace_rl.envs.sandbox_zygote` for the
zygote): the code goes in on the call's stdin (`give_code`), both output streams are read until they close, capped
and counted (`collect`), and decoded without splitting a UTF-8 character (`Output.result`). `trace_rl.envs.sandbox`
re-exports `ExecResult` and `MAX_DRAIN_BYTES`.
"""

from __future__ import annotations

import codecs
import os
import select
import time
from dataclasses import dataclass

MAX_DRAIN_BYTES = 16 * 1024 * 1024
"""Output beyond the cap is read and counted, not kept, up to this many bytes (both streams); more kills the run."""


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one sandboxed run.

    Attributes:
        stdout: decoded standard output (UTF-8, errors replaced), at most ``max_output_bytes`` bytes; a cut
            never splits a multi-byte character (the partial character counts as dropped).
        stderr: decoded standard error, same cap.
        returncode: exit status; negative = killed by that signal (for example -9 after a timeout).
        timed_out: True when the wall-clock timeout killed the run.
        truncated: True when output beyond the cap was produced (``stdout_dropped + stderr_dropped > 0``).
        backend: the sandbox backend that ran the code ("zygote", "bwrap", "unshare" or "none").
        stdout_dropped: bytes of standard output produced but not kept (0 when nothing was cut).
        stderr_dropped: the same for standard error.
        output_stopped: True when the dropped output passed ``MAX_DRAIN_BYTES`` and the run was killed for
            it; the dropped counts are then lower bounds.
    """

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    truncated: bool = False
    backend: str = ""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    output_stopped: bool = False


def give_code(fd: int, code: str) -> None:
    """Write ``code`` to the sandbox's stdin (a sandbox that died first just gets nothing)."""
    data = code.encode("utf-8", errors="replace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        pass


@dataclass
class Output:
    """What `_collect` read from a call's stdout and stderr, and why it stopped reading."""

    out_fd: int
    err_fd: int
    bufs: dict[int, bytearray]
    dropped: dict[int, int]
    timed_out: bool = False
    stopped: bool = False

    def result(self, returncode: int, backend: str, note: str = "") -> ExecResult:
        (stdout, out_cut), (stderr, err_cut) = (
            decode(self.bufs[fd], cut=self.dropped[fd] > 0) for fd in (self.out_fd, self.err_fd)
        )
        return ExecResult(
            stdout=stdout,
            stderr=stderr + note,
            returncode=returncode,
            timed_out=self.timed_out,
            truncated=self.dropped[self.out_fd] + self.dropped[self.err_fd] > 0,
            backend=backend,
            stdout_dropped=self.dropped[self.out_fd] + out_cut,
            stderr_dropped=self.dropped[self.err_fd] + err_cut,
            output_stopped=self.stopped,
        )


def collect(out_fd: int, err_fd: int, deadline: float, max_output_bytes: int) -> Output:
    """Read both streams until they close, keeping ``max_output_bytes`` of each and counting the rest; stop at
    ``deadline`` (``timed_out``) or past ``MAX_DRAIN_BYTES`` dropped (``stopped``)."""
    out = Output(out_fd, err_fd, {out_fd: bytearray(), err_fd: bytearray()}, {out_fd: 0, err_fd: 0})
    open_fds = {out_fd, err_fd}
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            out.timed_out = True
            break
        ready, _, _ = select.select(list(open_fds), [], [], remaining)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            buf = out.bufs[fd]
            room = max(max_output_bytes - len(buf), 0)
            buf += chunk[:room]
            out.dropped[fd] += max(len(chunk) - room, 0)  # counted, not kept
        if sum(out.dropped.values()) > MAX_DRAIN_BYTES:
            out.stopped = True
            break
    return out


def decode(data: bytes | bytearray, *, cut: bool) -> tuple[str, int]:
    """UTF-8 text of a stream (invalid bytes replaced) and the bytes of a partial last character dropped
    because the stream was cut there (0 when it was not cut: the program's own partial bytes are replaced)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(bytes(data), final=not cut)
    return text, len(decoder.getstate()[0])
