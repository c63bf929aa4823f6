"""What a run draws from: the deterministic order over its training tasks (`DataCursor`) and its environment
factory with the tools' busy time measured (`TimedEnvFactory`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_rl.errors import DataError


class TimedEnvFactory:
    """Makes environments whose step() calls are timed (the "tools" share of the wall-clock).

    Steps of concurrent episodes run in worker threads and overlap, so the factory accumulates the busy
    wall-clock time: seconds during which at least one env.step of any of its environments was running.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._seconds = 0.0
        self._active = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1

    def _exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._seconds += time.perf_counter() - self._since

    def __call__(self) -> Any:
        env = self._make()
        factory = self

        class _Timed:
            def reset(self, task: Any) -> Any:
                return env.reset(task)

            def step(self, text: str) -> Any:
                factory._enter()
                try:
                    return env.step(text)
                finally:
                    factory._exit()

            def snapshot(self) -> Any:
                return env.snapshot()

            def restore(self, state: Any) -> None:
                env.restore(state)

        return _Timed()

    @property
    def seconds(self) -> float:
        """Busy seconds so far: wall-clock time with at least one env.step running (overlaps counted once)."""
        with self._lock:
            return self._seconds


@dataclass
class DataCursor:
    """Deterministic order over the training tasks: epoch permutations seeded by (seed, epoch).

    One `take` never returns a task twice: when a pool crosses an epoch boundary, the new epoch's tasks that the
    pool already holds (drawn at the end of the previous epoch) are passed over in the new epoch, so a candidate
    pool holds distinct tasks (each with its own per-prompt generator in the step) and the order stays a pure
    function of (seed, pool sizes).
    """

    n: int
    seed: int
    epoch: int = 0
    index: int = 0

    def take(self, k: int) -> list[int]:
        """The next ``k`` distinct task indices.

        Raises:
            ValueError: ``k`` exceeds the number of tasks (a pool of distinct tasks cannot be drawn).
        """
        if k > self.n:
            raise DataError(
                f"a candidate pool of {k} distinct tasks needs at least {k} training tasks, got {self.n}"
            )
        out: list[int] = []
        seen: set[int] = set()
        while len(out) < k:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
            while len(out) < k and self.index < self.n:
                i = int(order[self.index])
                self.index += 1
                if i not in seen:
                    out.append(i)
                    seen.add(i)
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
        return out
