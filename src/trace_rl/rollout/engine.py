"""The local generation engine: continuous batching over a row-wise KV cache with prefix reuse (CPU or GPU).

Design (docs/rollout.md):
- The engine owns a KV cache of `rows x positions` per layer. A row holds one sequence: its token ids, how
  many of them have keys/values in the cache (`cached`), and its state (free, active = decoding, parked =
  finished but its cache kept for reuse).
- A request (prompt ids, sampling, n) is admitted between decode steps. The engine looks for the row whose
  cached tokens share the longest prefix with the prompt (numpy, all rows at once). A parked row whose whole
  cache is a prefix of the prompt is taken over in place: that is a multi-turn episode coming back with its
  observation, and only the observation is computed. Otherwise the shared prefix is copied into a free row.
  Only the rest of the prompt is run through the model; the other n-1 completions copy the finished prompt
  cache, so k replays from one save point compute the prefix at most once and their cost follows their new
  tokens.
- Each decode step runs every active row at once (one token each) and samples; a row that samples a stop id
  or reaches its limit leaves the batch at once and its request resolves when all its n rows are done, so
  episodes that finish a turn early re-enter with their next turn while the others still decode (no lockstep).
  The prompts admitted before a step are prefilled in that step's forward (`forward_groups`: one pass of the
  weights for the decode rows and every prefill group), so an episode returning with its observation costs
  its tokens, not a forward of its own.
- Sampling: temperature, top-p, per-completion generators seeded from (seed, completion index), so a
  completion does not depend on what else is in the batch (up to floating-point differences of batched
  matrix products).

Modules: the batched forward over the cache is `rollout/engine_forward.py` (`forward_groups`, issue 38: only
the rows it is given, attention on cache views; `fast_decode=False` keeps the original forward and schedule as
a reference), the sampler `rollout/sampling.py`; this module schedules requests and manages the cache rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trace_rl.rollout.backends import Completion, SamplingParams, completion_seed
from trace_rl.rollout.engine_forward import Group, Span, cache_spans, forward_groups, forward_reference
from trace_rl.rollout.sampling import sample_tokens

SUPPORTED = ("llama", "qwen2", "qwen3")
FREE, ACTIVE, PARKED = 0, 1, 2
DEFER_TOKENS = 8
DEFER_SHARE = 0.9
PREFILL_FORWARD_TOKENS = 32
"""What one more prefill group costs beyond its tokens, in padded tokens (`length_groups`). Measured when each
group was a forward of its own (on the 2-core CPU with the tiny policy a forward's fixed work, weights streamed
once and Python per layer, is about 4 ms, a prefill token about 0.2-0.3 ms; docs/notebook/benchmarks_history.md,
"Prefill grouped by length, decode spans by cost"); since the groups share one forward (`forward_groups`) a group costs only its
attention calls, so this overstates it and errs toward fewer, more padded groups."""


@dataclass
class EngineStats:
    """Token accounting of an engine since its creation (or the last `reset_stats`)."""

    sampled_tokens: int = 0  # tokens sampled (all completions)
    prefill_tokens: int = 0  # prompt tokens run through the model
    reused_tokens: int = 0  # prompt tokens whose keys/values came from the cache (not recomputed)
    decode_steps: int = 0  # batched decode forwards
    requests: int = 0
    forward_seconds: float = 0.0


@dataclass
class _Request:
    prompt: np.ndarray
    sampling: SamplingParams
    n: int
    future: asyncio.Future[list[Completion]]
    stop: frozenset[int]
    outputs: list[tuple[list[int], list[float], str] | None] = field(default_factory=list)
    remaining: int = 0


@dataclass
class _Row:
    request: _Request
    index: int  # completion index within its request
    generator: torch.Generator
    pending: int  # last sampled token (its keys/values are not cached yet)
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)


class LocalEngine:
    """Continuous-batching sampler with a shared-prefix KV cache over a transformers causal LM.

    Args:
        policy: a `trace_rl.policy.Policy` (model of type llama, qwen2 or qwen3, plus tokenizer and stop ids).
        max_batch: at most this many rows decode at once (a request with n > max_batch still runs, alone).
        max_rows: rows kept in the cache (active + parked); parked rows are evicted least recently used first.
        max_context: longest sequence (prompt + completion) in tokens; longer prompts raise ValueError.
        fast_decode: every forward computes only its own rows, with attention over views of the cache, and
            runs a decode step and the prefill of the prompts admitted before it in one pass of the weights
            (`forward_groups`); False runs the engine's original forward and schedule (a prefill forward, then
            a decode step over the slice 0..max active row; prefill on gathered copies of its rows), kept as
            the reference the fast one is tested against. Same tokens and log-probabilities up to
            floating-point rounding (about 1e-6).

    Raises:
        ValueError: unsupported model type or bad arguments.
    """

    def __init__(
        self,
        policy: Any,
        *,
        max_batch: int = 64,
        max_rows: int | None = None,
        max_context: int = 4096,
        fast_decode: bool = True,
    ):
        model = policy.model
        cfg = model.config
        if cfg.model_type not in SUPPORTED:
            raise ValueError(f"local engine supports {', '.join(SUPPORTED)} models, not {cfg.model_type!r}")
        if getattr(cfg, "use_sliding_window", False):
            raise ValueError("local engine does not implement sliding-window attention")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model.eval()
        self.policy = policy
        self.stop_ids = frozenset(int(i) for i in policy.stop_ids)
        self.max_batch = max_batch
        self.fast_decode = fast_decode
        self.max_rows = max_rows if max_rows is not None else 2 * max_batch
        if self.max_rows < max_batch:
            raise ValueError("max_rows must be >= max_batch")
        self.max_context = min(max_context, int(getattr(cfg, "max_position_embeddings", max_context)))
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.n_layers = cfg.num_hidden_layers
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.stats = EngineStats()
        self._rows_cap = 0
        self._pos_cap = 0
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._tok = np.zeros((0, 0), np.int64)  # token ids whose keys/values are cached, per row
        self._cached = np.zeros(0, np.int64)
        self._state = np.zeros(0, np.int8)
        self._last_use = np.zeros(0, np.int64)
        self._clock = 0
        self._rows: dict[int, _Row] = {}
        self._pending: list[_Request] = []
        self._worker: asyncio.Task[None] | None = None
        self._grow(min(8, self.max_rows), 256)

    # ----------------------------------------------------------------------------------------- public API
    async def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """Sample n completions of the prompt (GenerationBackend protocol).

        Raises:
            ValueError: empty prompt, n < 1, or a prompt longer than max_context - 1.
        """
        prompt = np.asarray(prompt_token_ids, dtype=np.int64).reshape(-1)
        if prompt.size == 0:
            raise ValueError("prompt_token_ids is empty")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if prompt.size >= self.max_context:
            raise ValueError(f"prompt of {prompt.size} tokens does not fit max_context={self.max_context}")
        vocab = int(self.model.config.vocab_size)
        if prompt.min() < 0 or prompt.max() >= vocab:
            raise ValueError(f"prompt_token_ids must lie in [0, {vocab})")
        stop = frozenset(sampling.stop_ids) if sampling.stop_ids is not None else self.stop_ids
        loop = asyncio.get_running_loop()
        req = _Request(prompt, sampling, n, loop.create_future(), stop, [None] * n, n)
        self._pending.append(req)
        self.stats.requests += 1
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        return await req.future

    def generate_sync(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """`generate` for callers without an event loop."""
        return asyncio.run(self.generate(prompt_token_ids, sampling, n))

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def clear_cache(self) -> None:
        """Forget every parked row (active rows are untouched)."""
        self._state[self._state == PARKED] = FREE

    # ----------------------------------------------------------------------------------------- scheduling
    async def _run(self) -> None:
        batch: list[tuple[_Request, int, int]] = []  # admitted, not yet in self._rows: failed with the others
        try:
            while self._pending or self._rows:
                batch = self._admit()
                if self.fast_decode:  # one forward: the active rows' next tokens and the admitted prompts
                    self._step(batch)
                else:  # the original schedule: prefill, then a decode step that includes the new rows
                    if batch:
                        self._prefill(batch)
                    if self._rows:
                        self._decode_step()
                await asyncio.sleep(0)  # let finished episodes step their envs and submit their next turn
        except BaseException as exc:  # resolve every waiter: a dead worker must not hang its callers
            admitted = [req for req, _, _ in batch]
            for req in self._pending + [r.request for r in self._rows.values()] + admitted:
                if not req.future.done():
                    req.future.set_exception(exc)
            self._pending.clear()
            self._rows.clear()
            self._state[self._state == ACTIVE] = FREE
            raise

    def _admit(self) -> list[tuple[_Request, int, int]]:
        """Admit pending requests (FIFO) up to max_batch rows: give each a cache row (copying the longest cached
        prefix of its prompt) and return them as (request, row, cached prefix length), to be prefilled.

        A request whose uncached tail is mostly (>= DEFER_SHARE) a prefix it shares with a prompt of this
        admission round waits one round, so that k requests for one uncached prefix compute it once (the
        first one's cache is then copied) instead of k times side by side. Rows are assigned after selection:
        returning episodes take over their parked rows first, so that no other request evicts them.
        """
        chosen: list[tuple[_Request, int, int]] = []
        prompts = _PromptSet()
        waiting: list[_Request] = []
        busy = len(self._rows)
        while self._pending:
            req = self._pending[0]
            if busy and busy + req.n > self.max_batch:
                break
            self._pending.pop(0)
            src, lcp = self._longest_prefix(req.prompt)
            if chosen:
                shared = prompts.longest_common_prefix(req.prompt)
                if shared - lcp >= max(DEFER_TOKENS, DEFER_SHARE * (req.prompt.size - lcp)):
                    waiting.append(req)  # next round; later requests may still be admitted now
                    continue
            chosen.append((req, src, lcp))
            prompts.add(req.prompt)
            busy += req.n
        self._pending[:0] = waiting
        if not chosen:
            return []
        rows: list[int] = [-1] * len(chosen)
        taken: set[int] = set()
        for i, (_, src, lcp) in enumerate(chosen):
            if src >= 0 and src not in taken and self._state[src] == PARKED and lcp == self._cached[src]:
                rows[i] = src  # a returning episode: extend its row in place
                taken.add(src)
        # A parked row that some request of this round copies its prefix from must not be handed to another
        # request of the round before that copy: the earlier request would overwrite its keys/values (with
        # its own prefix copy) and the later one would copy someone else's cache.
        sources = {src for _, src, lcp in chosen if lcp > 0}
        for i, (req, src, lcp) in enumerate(chosen):
            if rows[i] < 0:
                rows[i] = self._alloc(exclude=taken | sources)
                if lcp > 0:
                    self._copy_prefix(src, rows[i], lcp)
                taken.add(rows[i])
            self._ensure_positions(req.prompt.size + 1)
            self._cached[rows[i]] = lcp
            self._state[rows[i]] = ACTIVE
            self._tok[rows[i], : req.prompt.size] = req.prompt
        return [(req, rows[i], lcp) for i, (req, _, lcp) in enumerate(chosen)]

    def _step(self, batch: list[tuple[_Request, int, int]]) -> None:
        """One forward of the fast path (`forward_groups`): the active rows' next tokens (one decode step) and the
        uncached tails of the admitted prompts, grouped by similar tail length (`length_groups`, each group
        padded to its own longest); then sample both. A returning episode's observation is computed in the same
        pass of the weights as everyone else's next token, instead of a forward of its own; the new rows join
        the decode batch at the next step."""
        groups: list[Group] = []
        decode = self._decode_inputs() if self._rows else None
        if decode is not None:
            active, _, pending = decode
            ids = torch.from_numpy(pending[:, None]).to(self.device)
            cached = self._cached[active]
            groups.append((active, ids, cached, self._spans(active, cached, 1), None))
        order = np.zeros(0, np.int64)
        if batch:
            ids, rows, start, lengths = self._prefill_inputs(batch)
            orders = []
            for group in length_groups(lengths.tolist(), PREFILL_FORWARD_TOKENS):
                o = group[np.argsort(rows[group])]
                width = int(lengths[o].max())
                spans = self._spans(rows[o], start[o], width)
                groups.append((rows[o], ids[o, :width].to(self.device), start[o], spans, lengths[o] - 1))
                orders.append(o)
            order = np.concatenate(orders)
        if not groups:
            return
        t0 = time.perf_counter()
        logits = forward_groups(self.model, self._k, self._v, groups)
        self.stats.forward_seconds += time.perf_counter() - t0
        n_decode = 0 if decode is None else decode[0].size
        if batch:
            prefill = torch.empty_like(logits[n_decode:])
            prefill[torch.from_numpy(order).to(self.device)] = logits[n_decode:]
            self._start_rows(batch, prefill)
        if decode is not None:
            self._decode_finish(decode[0], decode[1], logits[:n_decode])

    def _prefill_inputs(
        self, batch: list[tuple[_Request, int, int]]
    ) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
        """The admitted prompts' uncached tails: right-padded ids (B, W) on the CPU, cache rows (B,), cached prefix
        lengths (B,) and tail lengths (B,); counts prefill and reused tokens and makes room for the tails."""
        lengths = np.asarray([req.prompt.size - lcp for req, _, lcp in batch], np.int64)
        ids = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
        for i, (req, _, lcp) in enumerate(batch):
            ids[i, : lengths[i]] = torch.as_tensor(req.prompt[lcp:])
            self.stats.prefill_tokens += int(lengths[i])
            self.stats.reused_tokens += lcp
        rows = np.asarray([row for _, row, _ in batch], np.int64)
        start = np.asarray([lcp for _, _, lcp in batch], np.int64)
        # every row of a forward writes keys at start + 0..width-1, padding included (groups are padded to
        # their own longest tail, at most the longest of all)
        self._ensure_positions(int(start.max()) + int(lengths.max()) + 1)
        return ids, rows, start, lengths

    def _prefill(self, batch: list[tuple[_Request, int, int]]) -> None:
        """The original prefill (`fast_decode=False`): every admitted tail in one right-padded forward, then
        `_start_rows`."""
        ids, rows, start, lengths = self._prefill_inputs(batch)
        logits = self._forward(
            rows, ids.to(self.device), torch.from_numpy(start).to(self.device), last=lengths - 1
        )
        self._start_rows(batch, logits)

    def _start_rows(self, batch: list[tuple[_Request, int, int]], logits: torch.Tensor) -> None:
        """After the prefill: each request's prompt is cached in its row, n-1 forks copy it, every completion
        samples its first token from ``logits`` (B, V), the prompt's last-position logits."""
        for i, (req, row, _) in enumerate(batch):
            self._cached[row] = req.prompt.size
            forks = [row]
            for _ in range(1, req.n):
                other = self._alloc(exclude={row})
                self._copy_prefix(row, other, req.prompt.size)
                self._cached[other] = req.prompt.size
                self._state[other] = ACTIVE
                forks.append(other)
            gens = [
                torch.Generator(device="cpu").manual_seed(completion_seed(req.sampling.seed, j))
                for j in range(req.n)
            ]
            toks, lps = sample_tokens(logits[i : i + 1].expand(req.n, -1), [req.sampling] * req.n, gens)
            for j, r in enumerate(forks):
                self._rows[r] = _Row(req, j, gens[j], int(toks[j]))
                self._record(r, int(toks[j]), float(lps[j]))

    def _record(self, r: int, tok: int, logprob: float) -> None:
        """Append a sampled token to row r and finish the row if it stops."""
        row = self._rows[r]
        row.out_ids.append(tok)
        row.out_logprobs.append(logprob)
        row.pending = tok
        self.stats.sampled_tokens += 1
        req = row.request
        reason = None
        if tok in req.stop:
            reason = "stop"
        elif len(row.out_ids) >= req.sampling.max_new_tokens or self._cached[r] + 1 >= self.max_context:
            reason = "length"
        if reason is None:
            return
        del self._rows[r]
        self._state[r] = PARKED
        self._clock += 1
        self._last_use[r] = self._clock
        req.outputs[row.index] = (row.out_ids, row.out_logprobs, reason)
        req.remaining -= 1
        if req.remaining == 0 and not req.future.done():
            req.future.set_result(
                [
                    Completion(np.asarray(ids, np.int64), np.asarray(lp, np.float32), why)
                    for ids, lp, why in (o for o in req.outputs if o is not None)
                ]
            )

    def _decode_inputs(self) -> tuple[np.ndarray, list[_Row], np.ndarray]:
        """The active rows (ascending), their states and their pending tokens, which are written to the rows'
        token ids (their keys/values are computed by the coming decode step)."""
        active = np.fromiter(self._rows.keys(), dtype=np.int64)
        active.sort()
        rows = [self._rows[int(r)] for r in active]
        pending = np.fromiter((r.pending for r in rows), dtype=np.int64, count=len(rows))
        self._ensure_positions(int(self._cached[active].max()) + 2)
        self._tok[active, self._cached[active]] = pending
        return active, rows, pending

    def _decode_step(self) -> None:
        """The original decode step (`fast_decode=False`): rows 0..max active through `forward_reference`."""
        active, rows, pending = self._decode_inputs()
        hi = int(active[-1]) + 1
        ids = torch.zeros(hi, 1, dtype=torch.long)
        start = torch.zeros(hi, dtype=torch.long)
        ids[active, 0] = torch.from_numpy(pending)
        start[active] = torch.as_tensor(self._cached[active])
        logits = self._forward(slice(0, hi), ids.to(self.device), start.to(self.device), write=active)
        self._decode_finish(active, rows, logits[torch.as_tensor(active, device=logits.device)])

    def _decode_finish(self, active: np.ndarray, rows: list[_Row], logits: torch.Tensor) -> None:
        """After a decode step: the pending tokens are cached; each row samples its next token from ``logits``."""
        self._cached[active] += 1
        self.stats.decode_steps += 1
        toks, lps = sample_tokens(logits, [r.request.sampling for r in rows], [r.generator for r in rows])
        for j, r in enumerate(active):
            self._record(int(r), int(toks[j]), float(lps[j]))

    # ----------------------------------------------------------------------------------------- cache rows
    def _longest_prefix(self, prompt: np.ndarray) -> tuple[int, int]:
        """(row, length) of the longest cached prefix of prompt[:-1] over all non-free rows; (-1, 0) if none."""
        cand = np.flatnonzero(self._state != FREE)
        if cand.size == 0:
            return -1, 0
        m = min(prompt.size - 1, self._pos_cap)
        if m <= 0:
            return -1, 0
        eq = self._tok[cand, :m] == prompt[None, :m]
        eq &= np.arange(m)[None, :] < self._cached[cand][:, None]
        lcp = np.cumprod(eq, axis=1).sum(axis=1)
        best = int(np.argmax(lcp))
        return int(cand[best]), int(lcp[best])

    def _alloc(self, exclude: set[int] | frozenset[int] = frozenset()) -> int:
        """A row to write into, keeping active rows packed at low indices (the decode batch is rows
        0..max active): a free row below the highest active one, else the least recently used parked row
        below it, else the lowest free row, else the least recently used parked row; grow when none."""
        active = np.flatnonzero(self._state == ACTIVE)
        hi = int(active[-1]) + 1 if active.size else 0
        free = np.flatnonzero(self._state == FREE)
        parked = np.flatnonzero(self._state == PARKED)
        parked = parked[~np.isin(parked, list(exclude))]
        if free.size and free[0] < hi:
            return int(free[0])
        low = parked[parked < hi]
        if low.size:
            return int(low[np.argmin(self._last_use[low])])
        if free.size:
            return int(free[0])
        if self._rows_cap < self.max_rows:
            r0 = self._rows_cap
            self._grow(min(self.max_rows, 2 * self._rows_cap), self._pos_cap)
            return r0
        if parked.size:
            return int(parked[np.argmin(self._last_use[parked])])
        # every row is active (an oversized request) or a prefix source of this admission round: grow
        # beyond max_rows
        r0 = self._rows_cap
        self._grow(self._rows_cap + 8, self._pos_cap)
        return r0

    def _copy_prefix(self, src: int, dst: int, length: int) -> None:
        for k, v in zip(self._k, self._v, strict=True):
            k[dst, :, :length] = k[src, :, :length]
            v[dst, :, :length] = v[src, :, :length]
        self._tok[dst, :length] = self._tok[src, :length]

    def _ensure_positions(self, needed: int) -> None:
        if needed > self._pos_cap:
            self._grow(self._rows_cap, max(needed, min(2 * self._pos_cap, self.max_context + 1)))

    def _grow(self, rows: int, positions: int) -> None:
        # every entry is zero or a computed key/value (masked-out ones must stay finite): each new tensor is
        # written once, the old block copied and the rest zeroed
        shape = (rows, self.n_kv, positions, self.head_dim)
        new_k = [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in range(self.n_layers)]
        new_v = [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in range(self.n_layers)]
        r0, p0 = self._rows_cap, self._pos_cap
        for i, new in enumerate(new_k + new_v):
            if self._k:
                new[:r0, :, :p0] = (self._k + self._v)[i]
            new[:r0, :, p0:].zero_()
            new[r0:].zero_()
        tok = np.zeros((rows, positions), np.int64)
        tok[:r0, :p0] = self._tok
        self._k, self._v, self._tok = new_k, new_v, tok
        self._cached = np.concatenate([self._cached, np.zeros(rows - r0, np.int64)])
        self._state = np.concatenate([self._state, np.zeros(rows - r0, np.int8)])
        self._last_use = np.concatenate([self._last_use, np.zeros(rows - r0, np.int64)])
        self._rows_cap, self._pos_cap = rows, positions

    # ----------------------------------------------------------------------------------------- model
    def _forward(
        self,
        rows: slice | np.ndarray,
        ids: torch.Tensor,
        start: torch.Tensor,
        write: np.ndarray | None = None,
        last: np.ndarray | None = None,
    ) -> torch.Tensor:
        """`forward_reference` over this engine's cache (the original forward, `fast_decode=False`), timed."""
        t0 = time.perf_counter()
        logits = forward_reference(self.model, self._k, self._v, rows, ids, start, write, last)
        self.stats.forward_seconds += time.perf_counter() - t0
        return logits

    def _forward_rows(
        self, rows: np.ndarray, ids: torch.Tensor, start: np.ndarray, last: np.ndarray | None = None
    ) -> torch.Tensor:
        """`forward_rows` over this engine's cache (only the given rows, attention on cache views), timed."""
        t0 = time.perf_counter()
        spans = self._spans(rows, start, ids.shape[1])
        logits = forward_groups(self.model, self._k, self._v, [(rows, ids, start, spans, last)])
        self.stats.forward_seconds += time.perf_counter() - t0
        return logits

    def _spans(self, rows: np.ndarray, start: np.ndarray, length: int) -> list[Span]:
        """`cache_spans` on this engine's device."""
        return cache_spans(rows, start, length, self.device)


def length_groups(lengths: Sequence[int], forward_tokens: int) -> list[np.ndarray]:
    """Split prefill rows into groups that each run right-padded to their own longest tail (groups of one
    `forward_groups` call), minimising the padded tokens computed plus ``forward_tokens`` per group (what one
    more group costs beyond its tokens, in tokens).

    A returning episode's tail (its observation, a few tokens) and a fresh prompt (hundreds) in one forward
    would pad the short tail to the long one's width; grouping by length avoids most of that padding. Exact
    dynamic programme over the rows sorted by length (a group is a run of that order). Returns index arrays
    into ``lengths`` covering every row once, in descending length.
    """
    order = np.argsort(-np.asarray(lengths, np.int64), kind="stable")
    sizes = np.asarray(lengths, np.int64)[order]
    n = sizes.size
    best = np.zeros(n + 1)  # best[j]: cost of the first j rows (longest first)
    cut = np.zeros(n + 1, np.int64)
    for j in range(1, n + 1):
        # a group rows i..j-1 costs its width (sizes[i], the longest) x its rows, plus one forward
        costs = best[:j] + sizes[:j] * (j - np.arange(j)) + forward_tokens
        cut[j] = int(np.argmin(costs))
        best[j] = costs[cut[j]]
    groups: list[np.ndarray] = []
    j = n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = int(cut[j])
    return groups[::-1]


class _PromptSet:
    """Token-id prompts (int64 >= 0) as rows of one -1-padded matrix: the longest common prefix of a prompt with
    any of them in one numpy pass (the admission round's deferral test; `_common_prefix` pairwise, vectorised)."""

    def __init__(self) -> None:
        self._mat = np.full((8, 64), -1, np.int64)
        self._n = 0

    def add(self, prompt: np.ndarray) -> None:
        rows, width = self._mat.shape
        if self._n == rows or prompt.size > width:
            grown = np.full((2 * rows if self._n == rows else rows, max(width, prompt.size)), -1, np.int64)
            grown[: self._n, :width] = self._mat[: self._n]
            self._mat = grown
        self._mat[self._n, : prompt.size] = prompt
        self._mat[self._n, prompt.size :] = -1
        self._n += 1

    def longest_common_prefix(self, prompt: np.ndarray) -> int:
        """max over the set of the common prefix length with `prompt` (0 for an empty set)."""
        if self._n == 0:
            return 0
        m = min(prompt.size, self._mat.shape[1])
        eq = self._mat[: self._n, :m] == prompt[None, :m]
        return int(np.cumprod(eq, axis=1).sum(axis=1).max()) if m else 0


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two int arrays."""
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n
