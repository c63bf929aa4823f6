"""The pool of sandboxes started ahead of their calls (`trace_rl.envs.sandbox_spares`), on fake items: it keeps at
most the target ready per key, never hands out a dead or used item, survives failing starts, and a forked child
neither uses nor kills its parent's items."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

import pytest

from trace_rl.envs.sandbox_spares import SparePool


class Item:
    def __init__(self, n: int) -> None:
        self.n, self.live, self.discarded, self.forgotten = n, True, False, False

    def alive(self) -> bool:
        return self.live

    def discard(self) -> None:
        self.discarded = True

    def forget(self) -> None:
        self.forgotten = True


class Starter:
    def __init__(self, fail: bool = False) -> None:
        self.made: list[Item] = []
        self.fail = fail

    def __call__(self) -> Item:
        if self.fail:
            raise OSError("cannot start")
        self.made.append(Item(len(self.made)))
        return self.made[-1]


def wait_for(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def in_a_forked_child(check: Callable[[], bool]) -> bool:
    """``check()`` evaluated in a forked child of this process, its answer sent back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, b"1" if check() else b"0")
        os._exit(0)
    os.close(write)
    try:
        return os.read(read, 1) == b"1"
    finally:
        os.waitpid(pid, 0)
        os.close(read)


@pytest.fixture
def pool():
    p: SparePool[Item] = SparePool()
    yield p
    p.close()


def test_first_take_is_empty_then_the_target_is_kept_ready(pool: SparePool[Item]) -> None:
    start = Starter()
    assert pool.take("k", 3, start) is None
    wait_for(lambda: pool.ready("k") == 3)
    time.sleep(0.05)
    assert len(start.made) == 3  # never more than the target
    got = pool.take("k", 3, start)
    assert got is start.made[0] and not got.discarded
    wait_for(lambda: pool.ready("k") == 3)
    assert len(start.made) == 4  # one replacement per item taken
    handed = [pool.take("k", 3, start) for _ in range(3)]
    assert len({id(h) for h in handed}) == 3 and got not in handed  # each item is handed out once


def test_keys_are_separate(pool: SparePool[Item]) -> None:
    a, b = Starter(), Starter()
    pool.take("a", 1, a)
    pool.take("b", 2, b)
    wait_for(lambda: pool.ready("a") == 1 and pool.ready("b") == 2)
    assert pool.take("a", 1, a) in a.made


def test_a_dead_item_is_discarded_not_handed_out(pool: SparePool[Item]) -> None:
    start = Starter()
    pool.take("k", 2, start)
    wait_for(lambda: pool.ready("k") == 2)
    start.made[0].live = False
    got = pool.take("k", 2, start)
    assert got is start.made[1]
    assert start.made[0].discarded


def test_a_failing_start_is_recorded_and_retried(pool: SparePool[Item]) -> None:
    start = Starter(fail=True)
    assert pool.take("k", 2, start) is None
    wait_for(lambda: "k" in pool.errors)
    assert pool.errors["k"] == "OSError: cannot start" and pool.ready("k") == 0
    start.fail = False
    assert pool.take("k", 2, start) is None  # a new take retries
    wait_for(lambda: pool.ready("k") == 2)
    assert "k" not in pool.errors


def test_target_zero_discards_the_ready_items(pool: SparePool[Item]) -> None:
    start = Starter()
    pool.take("k", 2, start)
    wait_for(lambda: pool.ready("k") == 2)
    got = pool.take("k", 0, start)
    assert got is start.made[0]  # a ready one still serves this call
    assert start.made[1].discarded and pool.ready("k") == 0
    time.sleep(0.05)
    assert len(start.made) == 2


def test_close_discards_everything_and_stops(pool: SparePool[Item]) -> None:
    start = Starter()
    pool.take("k", 2, start)
    wait_for(lambda: pool.ready("k") == 2)
    pool.close()
    assert all(i.discarded for i in start.made)
    assert pool.take("k", 2, start) is None
    time.sleep(0.05)
    assert len(start.made) == 2


@pytest.mark.parametrize("bad", [-1, 65, 1.5, True, "2"])
def test_a_bad_target_is_refused(pool: SparePool[Item], bad: object) -> None:
    with pytest.raises(ValueError, match="spares must be an int from 0 to 64"):
        pool.take("k", bad, Starter())  # type: ignore[arg-type]


def test_a_forked_child_forgets_the_parents_items(pool: SparePool[Item]) -> None:
    start = Starter()
    pool.take("k", 2, start)
    wait_for(lambda: pool.ready("k") == 2)
    # the child must see no ready item and must not discard the parent's
    assert in_a_forked_child(
        lambda: (
            pool.ready("k") == 0
            and all(i.forgotten and not i.discarded for i in start.made)
            and pool.take("k", 0, start) is None
        )
    )
    assert pool.ready("k") == 2 and not any(i.forgotten or i.discarded for i in start.made)


class SlowStarter(Starter):
    """A start that takes ``delay`` seconds, to catch the pool in the middle of one."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.entered = delay, threading.Event()

    def __call__(self) -> Item:
        self.entered.set()
        time.sleep(self.delay)
        return super().__call__()


def test_a_fork_waits_for_a_start_in_flight_and_the_child_forgets_it(pool: SparePool[Item]) -> None:
    start = SlowStarter(0.3)
    pool.take("k", 1, start)
    assert start.entered.wait(5)
    # forked during the start: the fork waits until the item is in the pool, where the child sees it
    assert in_a_forked_child(
        lambda: len(start.made) == 1 and start.made[0].forgotten and not start.made[0].discarded
    )
    assert pool.ready("k") == 1 and not start.made[0].forgotten


def test_close_and_reopen_keep_the_thread_and_drop_a_start_in_flight(pool: SparePool[Item]) -> None:
    # bubblewrap's --die-with-parent kills a sandbox when the thread that started it ends, so the thread must
    # outlive close (a call may still run on a spare it started); a start in flight at reopen is discarded
    start = SlowStarter(0.3)
    pool.take("k", 1, start)
    thread = pool._thread
    assert thread is not None and start.entered.wait(5)
    pool.reopen()
    wait_for(lambda: len(start.made) == 1 and start.made[0].discarded)
    assert pool.ready("k") == 0 and thread.is_alive()
    quick = Starter()
    pool.take("k", 1, quick)  # the pool works again, on the same thread
    wait_for(lambda: pool.ready("k") == 1)
    pool.close()
    time.sleep(0.05)
    assert thread.is_alive() and pool._thread is thread and quick.made[0].discarded


def test_a_failing_discard_does_not_stop_the_others(pool: SparePool[Item]) -> None:
    start = Starter()
    pool.take("k", 2, start)
    wait_for(lambda: pool.ready("k") == 2)

    def broken() -> None:
        raise OSError("cannot kill")

    start.made[0].discard = broken  # type: ignore[method-assign]
    pool.close()
    assert start.made[1].discarded


def test_a_forked_child_leaves_a_started_sandbox_s_root_folder_alone(tmp_path) -> None:
    # the unshare backend's root folder belongs to the parent: a child that forgets the sandbox must not remove it
    from trace_rl.envs.sandbox import _Started

    root = tmp_path / "root"
    root.mkdir()
    proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, start_new_session=True)
    started = _Started(proc, None, str(root))
    pid = os.fork()
    if pid == 0:
        started.forget()
        del started
        import gc

        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    assert root.is_dir() and started.alive()
    started.discard()
    assert not root.exists() and not started.alive()
