"""What a run draws from: the deterministic order over its training tasks (`DataCursor`) and its environment
factory with the tools' busy time measured (`TimedEnvFactory`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


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
    """Deterministic order over the training tasks: epoch permutations seeded by (seed, epoch)."""

    n: int
    seed: int
    epoch: int = 0
    index: int = 0

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
            take = min(k - len(out), self.n - self.index)
            out.extend(int(i) for i in order[self.index : self.index + take])
            self.index += take
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
        return out
