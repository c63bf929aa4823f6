"""Sandboxes started ahead of the tool calls that will use them (issue 38 item 3).

Starting a sandboxed interpreter (namespaces, mounts, interpreter start-up) takes tens of milliseconds, and a
multi-turn step makes hundreds of calls, each waiting for its own start. `SparePool` keeps up to ``target``
started, unused sandboxes per key (the call's backend and limits), started by one daemon thread while the caller
generates; a call takes one (`SparePool.take`) and the thread starts its replacement. Nothing is shared: each
spare serves exactly one call and is torn down after it, so a call still has its own sandbox, uid and limits.

The pool knows nothing of sandboxes: an item is anything with ``alive()``, ``discard()`` (kill and release
everything it holds) and ``forget()`` (drop this process's handles without touching the process, in a forked
child that inherited it). A failed start is recorded (`SparePool.errors`) and retried at the next `take`; the
calls then start their own sandboxes, which raise the error to the caller as before.

The thread lives as long as the process (a sandbox launched with bubblewrap's ``--die-with-parent`` dies with
the thread that started it, so the thread must outlive every call on a spare it started): `SparePool.close`
and `SparePool.reopen` only change what it keeps ready. A fork waits for a start in flight to finish (one
reentrant lock, taken around each start and by an at-fork hook), so the child sees every item its parent
holds in the pool and forgets it; an item already handed to a call is that call's, as a sandbox started on
demand is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Spare(Protocol):
    def alive(self) -> bool: ...

    def discard(self) -> None: ...

    def forget(self) -> None: ...


S = TypeVar("S", bound=Spare)
_LOG = logging.getLogger(__name__)

MAX_SPARES = 64
"""The most started items kept ready per key (each holds a process and a uid)."""


def check_spares(n: object) -> int:
    """``n`` as a number of spares.

    Raises:
        ValueError: not an int (bools refused) from 0 to ``MAX_SPARES``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SPARES:
        raise ValueError(f"spares must be an int from 0 to {MAX_SPARES}, got {n!r}")
    return n


class SparePool(Generic[S]):
    """Up to ``target`` started items per key, kept ready by one daemon thread; see the module docstring."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(
            before=self._before_fork,
            after_in_parent=self._after_fork_in_parent,
            after_in_child=self._after_fork_in_child,
        )

    def _reset(self) -> None:
        self._fork_lock = threading.RLock()  # held around each start and across a fork
        self._cond = threading.Condition()
        self._ready: dict[Hashable, deque[S]] = {}
        self._starting: dict[Hashable, int] = {}
        self._target: dict[Hashable, int] = {}
        self._start: dict[Hashable, Callable[[], S]] = {}
        self.errors: dict[Hashable, str] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def take(self, key: Hashable, target: int, start: Callable[[], S]) -> S | None:
        """A started, live item for ``key`` (None when none is ready), and from now on keep ``target`` of them
        ready (``start()`` makes one; 0 stops pre-starting for the key and discards the ready ones).

        Raises:
            ValueError: target not an int from 0 to ``MAX_SPARES`` (`check_spares`).
        """
        check_spares(target)
        dead: list[S] = []
        item: S | None = None
        with self._cond:
            if self._closed:
                return None
            ready = self._ready.setdefault(key, deque())
            while ready and item is None:
                candidate = ready.popleft()
                if candidate.alive():
                    item = candidate
                else:
                    dead.append(candidate)
            self._target[key], self._start[key] = target, start
            self.errors.pop(key, None)  # retried from now on
            while len(ready) > target:
                dead.append(ready.pop())
            if target > 0 and self._thread is None:
                self._thread = threading.Thread(
                    target=self._fill, name="trace-rl-sandbox-spares", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        _discard_all(dead)
        return item

    def ready(self, key: Hashable) -> int:
        """How many started items wait for ``key`` now."""
        with self._cond:
            return len(self._ready.get(key, ()))

    def close(self) -> None:
        """Stop pre-starting and discard every ready item (also run at interpreter exit); `take` returns None
        from now on. Calls running on items already taken are not touched."""
        with self._cond:
            self._closed = True
            items = [s for q in self._ready.values() for s in q]
            self._ready.clear()
            self._cond.notify_all()
        _discard_all(items)

    def reopen(self) -> None:
        """Discard every ready item, forget every key's target and recorded error, and take calls again
        (tests; a caller that changed what a key's items need). The thread stays."""
        with self._cond:
            items = [s for q in self._ready.values() for s in q]
            self._ready.clear()
            self._target.clear()
            self._start.clear()
            self.errors.clear()
            self._closed = False
            self._cond.notify_all()
        _discard_all(items)

    def _wanted(self) -> Hashable | None:
        if self._closed:
            return None
        for key, target in self._target.items():
            have = len(self._ready.get(key, ())) + self._starting.get(key, 0)
            if key not in self.errors and have < target:
                return key
        return None

    def _fill(self) -> None:
        while True:  # never returns: see the module docstring
            with self._cond:
                while (key := self._wanted()) is None:
                    self._cond.wait()
                start = self._start[key]
                self._starting[key] = self._starting.get(key, 0) + 1
            with self._fork_lock:  # a fork waits until the new item is in the pool (or gone)
                item: S | None = None
                try:
                    item = start()
                except Exception as exc:  # the calls start their own and raise it; never kill the thread
                    with self._cond:
                        self.errors[key] = f"{type(exc).__name__}: {exc}"
                with self._cond:
                    self._starting[key] -= 1
                    keep = item is not None and not self._closed and self._target.get(key, 0) > 0
                    if keep:
                        self._ready.setdefault(key, deque()).append(item)  # type: ignore[arg-type]
                if item is not None and not keep:
                    _discard_all([item])

    def _before_fork(self) -> None:
        self._fork_lock.acquire()

    def _after_fork_in_parent(self) -> None:
        self._fork_lock.release()

    def _after_fork_in_child(self) -> None:
        # A forked child inherits the handles, not the thread: it must neither use nor kill the parent's items.
        for q in self._ready.values():
            for s in q:
                s.forget()
        self._reset()


def _discard_all(items: list[S]) -> None:
    for item in items:
        try:
            item.discard()
        except Exception as exc:  # one item that cannot be torn down must not keep the others (or the thread)
            _LOG.warning("could not discard a started sandbox: %s: %s", type(exc).__name__, exc)
