"""The zygote of the ``zygote`` sandbox backend: a started interpreter that forks one sandbox per call.

Not imported by the package: `trace_rl.envs.sandbox_zygote` runs this file as ``python -I -S <this file> FD ROOT
TMP_MB`` as root, with an empty environment but for PATH, HOME and LANG (the sandbox's own). It imports only the
standard library and never sees a call's code: the code arrives on the call's own stdin pipe, read by the call's
own process after it has been isolated.

Protocol, on the SOCK_SEQPACKET socket FD (one message per request; the caller's process owns the other end):

- ``run ID UID AS_BYTES CPU_S NPROC FSIZE_BYTES`` with four descriptors (the call's stdin read end, stdout and
  stderr write ends, a status pipe's write end). The zygote forks the call's init and writes ``pid PID\\n`` to
  the status pipe (``error MESSAGE\\n`` if it could not); the init writes ``exit STATUS\\n`` (the worker's raw
  wait status) when the worker has ended. If the init itself ends otherwise (killed, or 125: it could not
  isolate the call), the zygote writes ``exit STATUS`` with the init's status once it has reaped it.
- ``kill ID``: SIGKILL to the call's init, if it is still running (its namespace, the worker and anything the
  worker started, goes with it).
- end of file (the caller died or closed): every running call's init is killed and the zygote exits.

Per call, two processes (the layout of ``bwrap --unshare-pid``, whose init is pid 1 and the command pid 2):

1. the init, forked by the zygote into a new pid namespace (``unshare(CLONE_NEWPID)`` before the fork, ``setns``
   back after it) as its pid 1: a new session, dies with the zygote (PR_SET_PDEATHSIG, and a pidfd of the zygote
   checked after it, for a zygote that died first), keeps only the call's stdio and status pipe, enters new
   mount, network, IPC, UTS and cgroup namespaces, makes its mounts private, builds the read-only root of the
   ``unshare`` backend on a tmpfs at ROOT (/usr, the interpreter's prefix, /proc, four /dev nodes, a private
   TMP_MB MiB /tmp), chroots into it and forks the worker; when the worker exits it reports the worker's wait
   status and exits, which kills whatever is left in the namespace;
2. the worker, pid 2: sets the call's limits (address space, CPU seconds, processes, file size, no core dumps),
   empties the capability bounding set, sets no_new_privs, refuses the kernel keyring calls (a seccomp filter,
   `_refuse_keyrings`), drops to the call's own uid and gid with no
   supplementary groups, checks that no capability is left, empties the environment but for PATH, HOME and
   LANG, then runs the code from stdin as ``python -I -S -`` would: compiled as ``<stdin>``, run as a fresh
   ``__main__``, tracebacks and ``SystemExit`` as the interpreter prints and returns them, non-daemon threads
   joined and atexit handlers run before exit.

A failure to isolate exits 125 with the reason on stderr; the worker never runs then.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import resource
import select
import signal
import socket
import sys
import types

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
LAUNCH_FAILED = 125
DEVICES = ("null", "zero", "urandom", "random")
SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_KEYRING = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}
"""Per machine: (AUDIT_ARCH, the numbers of add_key, request_key, keyctl): calls the worker's seccomp filter refuses."""

_libc = ctypes.CDLL(None, use_errno=True)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _refuse_keyrings(machine: str) -> None:
    """A seccomp filter: the kernel keyring calls fail with EPERM (keys a call adds to its uid's keyrings would
    outlive it, found in review), so do calls of another ABI (x32, or another architecture's numbers); anything
    else is allowed. No filter on a machine `SECCOMP_KEYRING` does not know."""
    if machine not in SECCOMP_KEYRING:
        return
    arch, (add_key, request_key, keyctl) = SECCOMP_KEYRING[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    program = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, deny),
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jge, 4, 0, 0x40000000),  # x32
        (jeq, 3, 0, add_key),
        (jeq, 2, 0, request_key),
        (jeq, 1, 0, keyctl),
        (ret, 0, 0, allow),
        (ret, 0, 0, deny),
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    prog = _SockFprog(len(program), filters)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _ro_bind(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _build_root(root: str, prefix: str, tmp_mb: int) -> None:
    """The ``unshare`` backend's minimal read-only root on a tmpfs at ``root``, then chroot into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    _mount("sandbox-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for name in ("usr", "proc", "dev", "tmp"):
        os.mkdir(f"{root}/{name}")
    _ro_bind("/usr", f"{root}/usr")
    for path in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            os.mkdir(root + path)
            _ro_bind(path, root + path)
    if not prefix.startswith("/usr/"):
        os.makedirs(root + prefix, mode=0o755)
        _ro_bind(prefix, root + prefix)
    _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        _mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    _mount("sandbox-tmp", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,mode=1777")
    _mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.chroot(root)
    os.chdir("/tmp")


def _drop_privileges(uid: int, limits: list[tuple[int, int]], last_cap: int) -> None:
    for kind, value in limits:
        resource.setrlimit(kind, (value, value))
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _refuse_keyrings(os.uname().machine)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    with open("/proc/self/status") as f:
        caps = [line.split()[1] for line in f if line.startswith("Cap")]
    if os.getresuid() != (uid, uid, uid) or any(int(c, 16) for c in caps):
        raise OSError(f"privileges not dropped: uids {os.getresuid()}, capabilities {caps}")
    _prctl(PR_SET_DUMPABLE, 1)  # what an exec after the uid change would reset: its own /proc/self is its own
    os.environ.clear()
    os.environ.update(SANDBOX_ENV)


def _run_code(argv0_path: list[str]) -> int:
    """Run stdin's code as ``python -I -S -`` does; return its exit code (or die of SIGINT, as the interpreter
    does after an uncaught KeyboardInterrupt)."""
    sys.argv = ["-"]
    sys.path[:] = argv0_path
    main = types.ModuleType("__main__")
    frozen = sys.modules["_frozen_importlib"]
    main.__dict__.update(
        __file__="<stdin>", __cached__=None, __annotations__={}, __loader__=frozen.BuiltinImporter
    )
    sys.modules["__main__"] = main
    # the frames below the code (this function and its callers) do not count against its recursion limit
    depth = 0
    frames: types.FrameType | None = sys._getframe()
    while frames is not None:
        depth, frames = depth + 1, frames.f_back
    sys.setrecursionlimit(sys.getrecursionlimit() + depth)
    rc, interrupted = 0, False
    try:
        source = sys.stdin.buffer.read().decode(
            "utf-8"
        )  # `run_python` sends UTF-8; the interpreter reads only that
        # dont_inherit: the zygote's own ``from __future__`` imports must not reach the code
        code = compile(source, "<stdin>", "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit as exc:
        rc = _exit_code(exc)
    except BaseException as exc:  # what the interpreter would report through sys.excepthook, exit 1
        exc.__traceback__ = (
            exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        )  # not this frame
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except Exception:  # a closed stderr: nothing can be printed, as with the interpreter
            pass
        rc, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as interpreter exit does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:  # closed by the code: nothing left to flush
            continue
        try:
            stream.flush()
        except Exception:  # a closed pipe: the interpreter reports it and exits 120
            rc = rc or 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return rc


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _worker(uid: int, limits: list[tuple[int, int]], last_cap: int, path: list[str]) -> None:
    try:
        _drop_privileges(uid, limits, last_cap)
    except BaseException as exc:
        os.write(2, f"sandbox: {exc}\n".encode())
        os._exit(LAUNCH_FAILED)
    os._exit(_run_code(path))


def _init(zygote: int, fds: list[int], root: str, prefix: str, tmp_mb: int, worker_args: tuple) -> None:  # type: ignore[type-arg]
    """pid 1 of the call's pid namespace: isolate, build the root, fork the worker, report its wait status."""
    try:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([zygote], [], [], 0)[0]:  # the zygote (a pidfd) died before the line above
            os._exit(LAUNCH_FAILED)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):  # stdin, stdout, stderr, status (3)
            os.dup2(fd, target)
        for name in os.listdir("/proc/self/fd"):  # the zygote's socket, other calls' pipes: none stays open
            if int(name) > 3:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        _check(_libc.unshare(NAMESPACES & ~CLONE_NEWPID), "unshare")  # the pid namespace is already new
        _build_root(root, prefix, tmp_mb)
        worker = os.fork()
        if worker == 0:
            os.close(3)
            _worker(*worker_args)
        while True:
            pid, status = os.waitpid(-1, 0)  # reap orphans until the worker is done
            if pid == worker:
                break
        os.write(3, f"exit {status}\n".encode())
    except BaseException as exc:
        try:
            os.write(2, f"sandbox: {exc}\n".encode())
        finally:
            os._exit(LAUNCH_FAILED)
    os._exit(0)  # pid 1 exits: the kernel kills what is left in the namespace


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    root, tmp_mb = sys.argv[2], int(sys.argv[3])
    prefix = os.path.realpath(sys.base_prefix)
    path = list(sys.path)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    zygote = os.pidfd_open(os.getpid())  # its calls' inits poll it: readable once the zygote has exited
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    gc.freeze()  # what the zygote holds now stays out of the calls' collections: fewer copied pages per fork
    calls: dict[int, tuple[str, int]] = {}  # init pid -> (call id, status pipe)
    by_id: dict[str, int] = {}
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            while calls:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                call_id, status_fd = calls.pop(pid)
                by_id.pop(call_id, None)
                if not (
                    os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
                ):  # else the init reported the worker
                    try:
                        os.write(status_fd, f"exit {status}\n".encode())
                    except OSError:
                        pass
                os.close(status_fd)
        if sock.fileno() in ready:
            msg, fds, _, _ = socket.recv_fds(sock, 512, 4)
            if not msg:
                break
            words = msg.decode().split()
            if words[0] == "kill" and words[1] in by_id:
                os.kill(by_id[words[1]], signal.SIGKILL)  # not reaped yet, so the pid is still the init's
            elif words[0] == "run" and len(fds) == 4:
                call_id = words[1]
                uid, mem, cpu, nproc, fsize = (int(w) for w in words[2:7])
                limits = [
                    (resource.RLIMIT_AS, mem),
                    (resource.RLIMIT_CPU, cpu),
                    (resource.RLIMIT_NPROC, nproc),
                    (resource.RLIMIT_FSIZE, fsize),
                    (resource.RLIMIT_CORE, 0),
                ]
                try:
                    _check(
                        _libc.unshare(CLONE_NEWPID), "unshare(pid)"
                    )  # the next child is pid 1 of a new one
                    pid = os.fork()
                except OSError as exc:
                    os.write(fds[3], f"error {exc}\n".encode())
                    pid = -1
                if pid == 0:
                    _init(zygote, fds, root, prefix, tmp_mb, (uid, limits, last_cap, path))
                _check(_libc.setns(own_pid_ns, CLONE_NEWPID), "setns")  # later children: a new one each
                for fd in fds[:3]:
                    os.close(fd)
                if pid > 0:
                    os.write(fds[3], f"pid {pid}\n".encode())
                    calls[pid] = (call_id, fds[3])
                    by_id[call_id] = pid
                else:
                    os.close(fds[3])
            else:
                for fd in fds:
                    os.close(fd)
    for pid in calls:
        os.kill(pid, signal.SIGKILL)  # an init: its namespace goes with it


if __name__ == "__main__":
    main()
