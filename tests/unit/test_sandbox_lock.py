"""The sandbox's per-call uid lock folder (a root caller's): created 0700, and refused when someone else could
have prepared it (a symlink, another owner, a mode open to others); lock files are never followed as symlinks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trace_rl.envs import sandbox, sandbox_uids


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trace-rl-sandbox-uids"
    monkeypatch.setattr(sandbox_uids, "lock_dir", lambda: str(path))
    return path


def test_the_folder_is_created_0700(locks: Path) -> None:
    fd = sandbox_uids.open_lock_dir()
    os.close(fd)
    st = os.lstat(locks)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    os.close(sandbox_uids.open_lock_dir())  # an existing safe folder is reused


def test_a_folder_open_to_others_is_refused(locks: Path) -> None:
    locks.mkdir()
    locks.chmod(0o777)
    with pytest.raises(sandbox.SandboxLockError, match="has mode 0777; it must be 0700") as info:
        sandbox_uids.open_lock_dir()
    assert str(locks) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, PermissionError)  # the CLI prints it as one line, like any OSError


def test_a_symlinked_folder_is_refused(locks: Path, tmp_path: Path) -> None:
    target = tmp_path / "attacker"
    target.mkdir(mode=0o700)
    locks.symlink_to(target)
    with pytest.raises(sandbox.SandboxLockError, match="is a symlink"):
        sandbox_uids.open_lock_dir()
    assert list(target.iterdir()) == []


def test_a_file_in_its_place_is_refused(locks: Path) -> None:
    locks.write_text("")
    with pytest.raises(sandbox.SandboxLockError, match="is not a folder"):
        sandbox_uids.open_lock_dir()


def test_another_owner_is_refused(locks: Path) -> None:
    locks.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(locks, sandbox.NOBODY, sandbox.NOBODY)
        with pytest.raises(sandbox.SandboxLockError, match=f"owned by uid {sandbox.NOBODY}"):
            sandbox_uids.open_lock_dir()
    else:  # a non-root caller cannot give a folder away; the check still compares owners
        st = os.stat(locks)
        assert st.st_uid == os.geteuid()
        os.close(sandbox_uids.open_lock_dir())


def test_a_planted_lock_symlink_is_not_followed(locks: Path, tmp_path: Path, monkeypatch) -> None:
    if os.geteuid() != 0:  # a non-root call runs as nobody in its own user namespace: no lock folder at all
        with sandbox_uids.call_uid() as uid:
            assert uid == sandbox.NOBODY
        assert not locks.exists()
        return
    victim = tmp_path / "victim"
    victim.write_text("keep")
    before = victim.stat()
    locks.mkdir(mode=0o700)
    (locks / "60001").symlink_to(victim)
    monkeypatch.setattr(sandbox_uids, "CALL_UIDS", (60001, 60002))
    for _ in range(5):  # the symlinked uid is never handed out; the other one is
        with sandbox_uids.call_uid() as uid:
            assert uid == 60002
    monkeypatch.setattr(sandbox_uids, "CALL_UIDS", (60001,))
    with pytest.raises(RuntimeError, match="no free sandbox uid"), sandbox_uids.call_uid():
        pass
    after = victim.stat()
    assert victim.read_text() == "keep" and (after.st_mode, after.st_mtime_ns) == (
        before.st_mode,
        before.st_mtime_ns,
    )
    assert (locks / "60001").is_symlink() and not (locks / "60002").exists()


def test_the_default_backend_reports_an_unsafe_folder_not_a_missing_sandbox(locks: Path) -> None:
    # backend="auto" probes the backends; an unsafe lock folder must reach the user as itself, not as "no sandbox
    # backend works here" (the probe used to swallow it as a backend that does not work)
    if os.geteuid() != 0:  # a non-root call uses no lock folder: nothing to refuse
        assert not locks.exists()
        return
    locks.mkdir()
    locks.chmod(0o777)
    sandbox._backend_works.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxLockError, match="it must be 0700"):
            sandbox.run_python("print(1)")
    finally:
        sandbox._backend_works.cache_clear()


def test_no_working_backend_is_an_os_error_not_a_failed_tool_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # an OSError: the CLI prints it as one line, and an env's call_tool (which turns ValueErrors into failed turns)
    # lets it stop the run instead of failing every call silently
    monkeypatch.setattr(sandbox, "available_backends", lambda: [])
    with pytest.raises(sandbox.SandboxUnavailableError, match="no sandbox backend works here") as info:
        sandbox.run_python("print(1)")
    assert isinstance(info.value, OSError) and not isinstance(info.value, ValueError)
