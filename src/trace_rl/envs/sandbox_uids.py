"""The uid each sandboxed call runs as, and the lock folder that keeps two calls from sharing one.

RLIMIT_NPROC counts processes (threads too) per uid, so a per-call process limit is only a per-call budget when
every call has a uid of its own: a root caller leases one from ``CALL_UIDS`` with an exclusive ``flock`` on a file
named after it in `lock_dir` (any process on the machine sees the lease), a non-root caller runs as ``NOBODY``
inside a user namespace of its own. Used by `trace_rl.envs.sandbox`, which re-exports the public names.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

NOBODY = 65534
CALL_UIDS = range(1_000_000_000, 1_001_000_000)


class SandboxLockError(PermissionError):
    """The folder of the sandbox's per-call uid locks is not safe to use (see `lock_dir`); one line, no bug."""


def lock_dir() -> str:
    """Path of the folder holding the per-call uid locks of a root caller: ``$TMPDIR/trace-rl-sandbox-uids``."""
    return os.path.join(tempfile.gettempdir(), "trace-rl-sandbox-uids")


def open_lock_dir() -> int:
    """Create the lock folder (mode 0700) or open the existing one, and return a descriptor of it.

    The folder lies in a world-writable /tmp, so another local user could create it first and then plant
    symlinks in it or hold every lock. It is opened with ``O_NOFOLLOW | O_DIRECTORY`` and checked on that
    descriptor (no race between the check and the use): it must be a real folder (not a symlink), owned by this
    process's effective uid, with no access for group or others. Lock files are then opened relative to it.

    Raises:
        SandboxLockError: the path is a symlink or not a folder, belongs to another user, or is open to others
            (the message says which, and how to fix it).
    """
    path = lock_dir()
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700, follow_symlinks=False)  # the umask may have removed owner bits
    except FileExistsError:
        pass
    fix = f"remove it (rm -r {path}) so that trace-rl creates it afresh with mode 0700"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        what = "a symlink" if os.path.islink(path) else "not a folder"
        raise SandboxLockError(f"sandbox lock folder {path} is {what} ({exc.strerror}); {fix}") from None
    st = os.fstat(fd)
    problem = None
    if st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by this process (uid {os.geteuid()})"
    elif stat.S_IMODE(st.st_mode) & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700 (no access for group or others)"
    if problem is not None:
        os.close(fd)
        raise SandboxLockError(f"sandbox lock folder {path} {problem}; {fix}")
    return fd


@dataclass
class UidLease:
    """A uid held by one sandboxed call (see `call_uid`): ``fd`` is the locked file in ``dir_fd``'s folder
    (both -1 for a non-root caller, who holds nothing)."""

    uid: int
    fd: int = -1
    dir_fd: int = -1
    name: str = ""

    def release(self) -> None:
        """Unlink the lock file while still locked (a later opener creates a fresh file), then unlock."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.name, dir_fd=self.dir_fd)
        self.forget()

    def forget(self) -> None:
        """Close this process's descriptors without unlinking (a forked child's inherited copies)."""
        for fd in (self.fd, self.dir_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.dir_fd = -1


def lease_uid() -> UidLease:
    """Take a uid for one call; the caller must `UidLease.release` it. See `call_uid`."""
    if os.geteuid() != 0:
        return UidLease(NOBODY)
    dir_fd = open_lock_dir()
    try:
        for _ in range(1000):
            uid = random.choice(CALL_UIDS)
            name = str(uid)
            try:  # O_NOFOLLOW: a symlink planted under this name is refused, never followed
                fd = os.open(
                    name, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
                )
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                here = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                mine = os.fstat(fd).st_ino == here.st_ino  # not unlinked by its last holder meanwhile
            except OSError:  # held by another call (or the file vanished between open and stat)
                mine = False
            if not mine:
                os.close(fd)
                continue
            lease, dir_fd = UidLease(uid, fd, dir_fd, name), -1
            return lease
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
    raise RuntimeError("no free sandbox uid: too many concurrent sandboxed calls")


@contextlib.contextmanager
def call_uid() -> Iterator[int]:
    """The uid one sandboxed call runs as, held for the duration of the call.

    A root caller gets a uid from ``CALL_UIDS`` that no other call on this machine holds (an exclusive
    ``flock`` on a file named after it, in any process): RLIMIT_NPROC counts processes per uid, so this gives
    every call its own process budget. A non-root caller gets ``NOBODY`` inside its own user namespace.

    The locks live in `lock_dir`, checked by `open_lock_dir` (a real folder of this uid with mode 0700); each
    lock file is opened with ``O_NOFOLLOW`` relative to that folder. A started spare sandbox
    (`trace_rl.envs.sandbox._start`) holds its uid from its start to the end of the call that uses it.

    Raises:
        RuntimeError: no free uid after many tries (more concurrent calls than the range allows).
        SandboxLockError: the lock folder is a symlink, not a folder, another user's, or open to others.
    """
    lease = lease_uid()
    try:
        yield lease.uid
    finally:
        lease.release()
