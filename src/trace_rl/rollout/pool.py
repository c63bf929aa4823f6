"""A pool of server replicas behind one GenerationBackend: prompt affinity, load balancing, failover, versions.

Routing (DESIGN.md section 5: a prompt's replays stay where its rollouts and KV cache are):
- Every request carries the agent loop's `RequestContext` (a context variable): its affinity key is the task
  id. The first request of a key goes to the least-loaded live replica (fewest requests in flight or waiting;
  ties: fewest served, then lowest index); every later request of that key goes to the same replica (its
  "home"), so the replica's prefix cache serves the prompt's later turns and replays.
- Each replica has a concurrency limit (`max_in_flight`): requests beyond it wait on the client side.
- A replica that fails (connection refused or reset, timeout, HTTP 5xx) is marked dead; the request is retried
  on another live replica and counted in `retried_requests`, and the key's home moves there (later requests of
  that key on the new home count as `affinity_violations`: their prefix cache is elsewhere). A 4xx answer or a
  ValueError is the request's fault and is raised, not retried.

Versions: the pool holds `policy_version` (0 at start). `push_weights(folder)` reloads every live replica from
the folder and resets its prefix cache, then increments the version. Every request is stamped with the version
(vLLM: ``cache_salt`` and ``request_id``), and every returned `Completion` carries it and the replica index. A
request whose prompt continues model tokens sampled under an older version (`RequestContext.prefix_version`)
counts as a stale prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trace_rl.rollout.backends import REQUEST_CONTEXT, Completion, RequestContext, SamplingParams
from trace_rl.rollout.http import ServerError

MAX_KEYS = 100_000  # affinity keys remembered (least recently used forgotten first)


class Replica(Protocol):
    """One server client (`VLLMBackend`, `SGLangBackend`)."""

    kind: str

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        n: int = 1,
        *,
        policy_version: int | None = None,
    ) -> list[Completion]: ...

    async def load_weights(self, folder: str, version: int) -> None: ...

    async def reset_prefix_cache(self) -> None: ...


@dataclass
class PoolStats:
    """Counters of a pool since its creation or the last `ReplicaPool.take_stats`.

    Attributes:
        requests: (K,) requests served per replica. prompt_tokens / cached_tokens: (K,) prompt tokens sent and
            reported as served from the prefix cache (n = 1 requests count their prompt once).
        replay_prompt_tokens / replay_cached_tokens: the same over requests of replays only.
        resumed_prompt_tokens / resumed_cached_tokens: the same over replays' first requests only (prompt = the
            save point's prefix, which affinity routes to the replica that generated it).
        affinity_violations: requests served away from their key's first replica.
        retried_requests: requests retried on another replica after a failure.
        stale_prefixes: requests continuing model tokens sampled under an older policy version.
    """

    requests: list[int]
    prompt_tokens: list[int]
    cached_tokens: list[int]
    replay_prompt_tokens: int = 0
    replay_cached_tokens: int = 0
    resumed_prompt_tokens: int = 0
    resumed_cached_tokens: int = 0
    affinity_violations: int = 0
    retried_requests: int = 0
    stale_prefixes: int = 0

    @classmethod
    def empty(cls, k: int) -> PoolStats:
        return cls([0] * k, [0] * k, [0] * k)

    def record(self, replica: int, prompt_tokens: int, cached: int, ctx: RequestContext | None) -> None:
        """Count one served request: its replica, prompt tokens and cached prompt tokens, and under replays /
        resumed replays when its context says so."""
        self.requests[replica] += 1
        self.prompt_tokens[replica] += prompt_tokens
        self.cached_tokens[replica] += cached
        if ctx is not None and ctx.replay:
            self.replay_prompt_tokens += prompt_tokens
            self.replay_cached_tokens += cached
        if ctx is not None and ctx.resumed:
            self.resumed_prompt_tokens += prompt_tokens
            self.resumed_cached_tokens += cached


def is_replica_failure(exc: BaseException) -> bool:
    """True for errors that mean the server (not the request) failed: connection errors, timeouts, HTTP 5xx."""
    if isinstance(exc, ServerError):
        return exc.status >= 500
    return isinstance(exc, OSError | EOFError | TimeoutError | asyncio.IncompleteReadError)


@dataclass
class _Home:
    first: int  # the replica that served the key's first request
    current: int  # where its requests go now (differs after a failover)


@dataclass
class ReplicaPool:
    """GenerationBackend over K replicas (see the module doc).

    Args:
        replicas: the server clients, index = replica id.
        max_in_flight: requests in flight per replica (>= 1).
        affinity: route by affinity key (False: every request to the least-loaded replica; for comparisons).

    Raises:
        ValueError: no replicas or max_in_flight < 1.
    """

    replicas: Sequence[Replica]
    max_in_flight: int = 64
    affinity: bool = True
    policy_version: int = 0
    dead: set[int] = field(default_factory=set)
    stats: PoolStats = field(init=False)
    _homes: OrderedDict[str, _Home] = field(default_factory=OrderedDict, init=False)
    _load: list[int] = field(init=False)
    _served: list[int] = field(init=False)
    _sems: list[asyncio.Semaphore] = field(default_factory=list, init=False)
    _loop: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError("a ReplicaPool needs at least one replica")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        k = len(self.replicas)
        self.stats = PoolStats.empty(k)
        self._load = [0] * k
        self._served = [0] * k

    @property
    def kind(self) -> str:
        return str(getattr(self.replicas[0], "kind", "server"))

    def live(self) -> list[int]:
        """Indices of the replicas not marked dead."""
        return [i for i in range(len(self.replicas)) if i not in self.dead]

    def in_flight(self) -> list[int]:
        """(K,) requests in flight or waiting for a slot, per replica."""
        return list(self._load)

    def _semaphores(self) -> list[asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # asyncio primitives bind to one event loop; the trainer runs one per step
            self._loop = loop
            self._sems = [asyncio.Semaphore(self.max_in_flight) for _ in self.replicas]
        return self._sems

    def _least_loaded(self) -> int:
        live = self.live()
        if not live:
            raise RuntimeError(f"all {len(self.replicas)} replicas have failed")
        return min(live, key=lambda i: (self._load[i], self._served[i], i))

    def _route(self, key: str | None) -> int:
        if key is None or not self.affinity:
            return self._least_loaded()
        home = self._homes.get(key)
        if home is not None:
            self._homes.move_to_end(key)
            if home.current not in self.dead:
                return home.current
            home.current = self._least_loaded()
            return home.current
        i = self._least_loaded()
        self._homes[key] = _Home(i, i)
        if len(self._homes) > MAX_KEYS:
            self._homes.popitem(last=False)
        return i

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """Sample n completions on a replica chosen as in the module doc; completions carry `replica` and
        `policy_version`.

        Raises:
            RuntimeError: every replica has failed. ValueError / ServerError (4xx): a bad request.
        """
        ctx = REQUEST_CONTEXT.get()
        key = ctx.affinity_key if ctx is not None else None
        sems = self._semaphores()
        version = self.policy_version
        if ctx is not None and ctx.prefix_version is not None and ctx.prefix_version < version:
            self.stats.stale_prefixes += 1
        while True:
            i = self._route(key)
            self._load[i] += 1
            try:
                async with sems[i]:
                    out = await self.replicas[i].generate(
                        prompt_token_ids, sampling, n, policy_version=version
                    )
            except Exception as exc:
                if not is_replica_failure(exc):
                    raise
                self.dead.add(i)
                self.stats.retried_requests += 1
                continue
            finally:
                self._load[i] -= 1
            break
        self._served[i] += 1
        home = self._homes.get(key) if key is not None and self.affinity else None
        if home is not None and home.first != i:
            self.stats.affinity_violations += 1
        cached = (out[0].cached_prompt_tokens or 0) if out else 0
        self.stats.record(i, len(prompt_token_ids), cached, ctx)
        return [dataclasses.replace(c, replica=i, policy_version=version) for c in out]

    async def push_weights(self, folder: str) -> int:
        """Reload every live replica's weights from `folder` (an HF folder of the same architecture) and reset
        its prefix cache; then bump and return `policy_version`. A replica that fails is marked dead.

        Raises:
            RuntimeError: requests are in flight (push between steps), or no replica took the new weights.
        """
        if any(self._load):
            raise RuntimeError(f"push_weights with requests in flight {self._load}: push between steps")
        version = self.policy_version + 1
        live = self.live()
        results = await asyncio.gather(
            *[self.replicas[i].load_weights(str(folder), version) for i in live], return_exceptions=True
        )
        for i, r in zip(live, results, strict=True):
            if isinstance(r, BaseException):
                if not is_replica_failure(r):
                    raise r
                self.dead.add(i)
        if all(i in self.dead for i in live):
            raise RuntimeError("no replica took the new weights")
        self.policy_version = version
        return version

    def take_stats(self) -> PoolStats:
        """The counters since the last call (and reset them)."""
        out, self.stats = self.stats, PoolStats.empty(len(self.replicas))
        return out


def backend_metrics(backend: Any, stats: PoolStats | None = None) -> dict[str, Any]:
    """Per-step backend metrics (docs/serving.md): ``backend`` (kind), ``policy_version``, and for a pool
    ``backend_replay_cache_hit_rate`` (cached / prompt tokens over the replays' requests; NaN without replays),
    ``backend_replay_prefix_hit_rate`` (the same over replays' first requests: the save-point prefix alone),
    ``backend_requests_per_replica`` (list), ``backend_affinity_violations``, ``backend_retried_requests``,
    ``backend_stale_prefixes``, ``backend_live_replicas``. ``stats``: the window to report (default: take the
    pool's counters since the last call)."""
    if not isinstance(backend, ReplicaPool):
        return {"backend": str(getattr(backend, "kind", "local")), "policy_version": 0}
    s = stats if stats is not None else backend.take_stats()

    def rate(cached: int, prompt: int) -> float:
        return cached / prompt if prompt else float("nan")

    return {
        "backend": backend.kind,
        "policy_version": backend.policy_version,
        "backend_replay_cache_hit_rate": rate(s.replay_cached_tokens, s.replay_prompt_tokens),
        "backend_replay_prefix_hit_rate": rate(s.resumed_cached_tokens, s.resumed_prompt_tokens),
        "backend_requests_per_replica": list(s.requests),
        "backend_affinity_violations": s.affinity_violations,
        "backend_retried_requests": s.retried_requests,
        "backend_stale_prefixes": s.stale_prefixes,
        "backend_live_replicas": len(backend.replicas) - len(backend.dead),
    }
