"""Rollout engine benchmark on the agent workload: multi-turn tool episodes plus replays from save points.

Both systems run the same episodes (policy, environment, tasks, sampling settings, seeds, batch):
  phase 1: `--batch` root rollouts (one per task) of up to `--max-turns` turns;
  phase 2: `--k` replays from the save point at depth max_turns // 2 of every root that has one.
(a) baseline: the straightforward loop: per turn, re-render and re-tokenise every active episode's whole
    history with the chat template and call Hugging Face `generate()` on the left-padded batch, in lockstep.
(b) engine: `trace_rl.rollout.engine.LocalEngine` + the agent loop, all episodes concurrent (asyncio).
Throughput counts sampled tokens per second of wall time (phases 1 + 2).
replay_cost_ratio (engine only): wall time of k replays from each half-trajectory save point / wall time of
k full rollouts of the same tasks, both issued right after the roots ran (their rows still cached, as the
scheduler issues replays); replay_cost_ratio_cold: the same from an empty cache (the save point's prefix is
computed once per anchor inside the replay timing). With the default random-init tiny policy every turn runs to
--max-new-tokens (it almost never samples the end-of-turn token), so the save point holds exactly half of the
trajectory's sampled tokens; `prefix_token_share` reports the measured share for any policy.

Prints one JSON line. Usage: python benchmarks/rollout_engine.py [--quick] [--json] [--policy NAME|PATH]

`--decode-compare` (issue 38) runs only the engine's phases 1 + 2 (no baseline, no replay-cost timing), once
with the fast forward (`LocalEngine(fast_decode=True)`, the default) and once with the original one
(`fast_decode=False`; or `--reference-module PATH`: the LocalEngine of another version's engine.py, e.g. the code
before issue 38), alternating, `--repeats` times in one process, each on a fresh engine: tokens/s of each
(medians and runs), `fast_over_reference` = median of the per-pair ratios of fast / reference tokens/s,
`cpu_ratio` = median of the per-pair ratios of the process CPU seconds of the two (fast / reference; with
`--threads 1` it is the work done, less sensitive than wall time to other processes on a shared machine), and
`max_abs_logprob_diff` = the largest difference of the two engines' log-probabilities over the turns whose tokens
and contexts agree (with the same seeds they sample the same tokens up to floating-point ties; an episode's turns
are compared up to its first differing turn).

`--backend vllm` compares, in one run on the same agent workload, LocalEngine against vLLM servers (from
.venv-vllm, `make vllm`) with 1 and 2 replicas behind `ReplicaPool` (docs/serving.md): tokens/s of roots +
replays (medians over `--repeats` runs), the replay cost ratio (k replays from the half-trajectory save points /
k full rollouts, each timed right after the roots ran), the replays' prefix-cache hit rate with what a cache
could serve at all (`cache_hit_bounds`), and trace-rl's overhead: after each trace-rl run, the same servers
are given the same requests directly (every episode's recorded prompts sent as one chain per episode, all
chains concurrent, to the replica that served them, from a cold cache like the trace-rl run);
`trace_rl_share_of_direct` is the median over these pairs of traced / direct tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from trace_rl.policy import load_policy
from trace_rl.rollout import toy_env
from trace_rl.rollout.agent import ChatCodec, Episode, SavePoint, run_episode
from trace_rl.rollout.backends import REQUEST_CONTEXT, SamplingParams
from trace_rl.rollout.engine import LocalEngine


class Workload(NamedTuple):
    """The agent workload of one benchmark run: policy, tasks, sampling settings and codec, batch, k (a NamedTuple:
    tests load this file without registering it as a module, which dataclasses need)."""

    policy: Any
    tasks: list[Any]
    sampling: SamplingParams
    codec: ChatCodec
    batch: int
    k: int
    max_new_tokens: int


def load_workload(
    args: argparse.Namespace,
    *,
    batch: tuple[int, int] = (16, 64),
    k: tuple[int, int] = (2, 4),
    with_schema: bool = False,
) -> Workload:
    """The workload of the command line: `--batch`, `--k`, `--max-new-tokens` or their (quick, full) defaults,
    `--threads` set before the policy loads, `--batch` tasks of the toy environment's bench split."""
    size = args.batch or (batch[0] if args.quick else batch[1])
    k_ = args.k or (k[0] if args.quick else k[1])
    mnt = args.max_new_tokens or (16 if args.quick else 32)
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = load_policy(args.policy, seed=args.seed)
    tasks = toy_env.load_tasks("bench", size, args.seed, with_schema=with_schema)
    sampling = SamplingParams(max_new_tokens=mnt, temperature=1.0, top_p=1.0, seed=args.seed)
    return Workload(policy, tasks, sampling, ChatCodec(policy.tokenizer), size, k_, mnt)


def bench_engine(policy: Any, batch: int, k: int, **kwargs: Any) -> LocalEngine:
    """A LocalEngine sized for the workload: every root or every replay decodes in one batch."""
    size = max(batch, k * batch)
    return LocalEngine(policy, max_batch=size, max_rows=2 * size, **kwargs)


def baseline_episodes(
    policy: Any,
    tasks: list[Any],
    sampling: SamplingParams,
    max_turns: int,
    starts: list[tuple[Any, list[dict[str, Any]], object, int]] | None = None,
) -> tuple[int, list[Any]]:
    """Lockstep HF generate() loop. Returns (sampled tokens, per-episode (messages, env snapshots by depth))."""
    tok = policy.tokenizer
    tok.padding_side = "left"
    eps = []
    if starts is None:
        for task in tasks:
            env = toy_env.make_env(max_turns=max_turns)
            eps.append(
                {
                    "task": task,
                    "env": env,
                    "msgs": [{"role": "user", "content": env.reset(task)}],
                    "depth": 0,
                    "done": False,
                    "saves": {},
                }
            )
    else:
        for task, msgs, state, depth in starts:
            env = toy_env.make_env(max_turns=max_turns)
            env.restore(state)
            eps.append(
                {
                    "task": task,
                    "env": env,
                    "msgs": [dict(m) for m in msgs],
                    "depth": depth,
                    "done": False,
                    "saves": {},
                }
            )
    sampled = 0
    torch.manual_seed(sampling.seed)
    while True:
        active = [e for e in eps if not e["done"]]
        if not active:
            break
        texts = [
            tok.apply_chat_template(
                e["msgs"], tools=list(e["task"].tools), add_generation_prompt=True, tokenize=False
            )
            for e in active
        ]
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = policy.model.generate(
                **batch,
                do_sample=sampling.temperature > 0,
                temperature=sampling.temperature or None,
                top_p=sampling.top_p,
                top_k=0,
                max_new_tokens=sampling.max_new_tokens,
                eos_token_id=list(policy.stop_ids),
                pad_token_id=tok.pad_token_id,
            )
        new = out[:, batch["input_ids"].shape[1] :]
        for e, row in zip(active, new, strict=True):
            ids = row.tolist()
            n = len(ids)
            for j, t in enumerate(ids):
                if t in policy.stop_ids:
                    n = j + 1
                    break
            sampled += n
            text = tok.decode([t for t in ids[:n] if t not in policy.stop_ids], skip_special_tokens=False)
            result = e["env"].step(text)
            e["depth"] += 1
            e["msgs"].append({"role": "assistant", "content": text})
            if result.done or e["depth"] >= max_turns:
                e["done"] = True
            else:
                e["msgs"].append({"role": "tool", "content": result.observation})
                e["saves"][e["depth"]] = ([dict(m) for m in e["msgs"]], e["env"].snapshot())
    return sampled, eps


async def engine_phase(
    engine: Any,
    codec: ChatCodec,
    jobs: Sequence[tuple[Any, SavePoint | None, int]],
    sampling: SamplingParams,
    max_turns: int,
) -> list[Episode]:
    return list(
        await asyncio.gather(
            *[
                run_episode(
                    engine,
                    toy_env.make_env(max_turns=max_turns),
                    codec,
                    task,
                    sampling,
                    max_turns=max_turns,
                    seed=seed,
                    start=start,
                )
                for task, start, seed in jobs
            ]
        )
    )


def timed_phase(
    backend: Any,
    reset: Callable[[], None],
    codec: ChatCodec,
    jobs: Sequence[tuple[Any, SavePoint | None, int]],
    sampling: SamplingParams,
    max_turns: int,
    warm_jobs: Sequence[tuple[Any, SavePoint | None, int]] | None = None,
) -> tuple[list[Episode], float]:
    """Empty the backend's prefix cache (`reset`), run `warm_jobs` untimed if given (the roots, whose rows or
    blocks stay cached, as the scheduler issues replays right after them), then run `jobs`: (episodes, wall
    seconds of `jobs`)."""
    reset()
    if warm_jobs is not None:
        asyncio.run(engine_phase(backend, codec, warm_jobs, sampling, max_turns))
    t0 = time.perf_counter()
    done = asyncio.run(engine_phase(backend, codec, jobs, sampling, max_turns))
    return done, time.perf_counter() - t0


def roots_then_replays(
    backend: Any,
    codec: ChatCodec,
    tasks: list[Any],
    sampling: SamplingParams,
    max_turns: int,
    k: int,
    seed: int,
) -> tuple[list[Episode], list[tuple[Any, SavePoint]], list[Any], list[Episode], float]:
    """Phase 1 (one root rollout per task) then phase 2 (k replays from each root's save point at depth
    max_turns // 2): (roots, anchors, replay jobs, replays, wall seconds)."""
    half = max(1, max_turns // 2)
    t0 = time.perf_counter()
    roots = asyncio.run(
        engine_phase(backend, codec, [(t, None, seed + i) for i, t in enumerate(tasks)], sampling, max_turns)
    )
    anchors = [(e.task, e.save_points[half - 1]) for e in roots if len(e.save_points) >= half]
    jobs = [(task, sp, seed + 10_000 + 100 * i + j) for i, (task, sp) in enumerate(anchors) for j in range(k)]
    replays = asyncio.run(engine_phase(backend, codec, jobs, sampling, max_turns))
    return roots, anchors, jobs, replays, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--policy", default="tiny")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=None, help="replay-cost repeats (median); 1 quick, 3 full")
    ap.add_argument(
        "--backend", choices=["local", "vllm"], default="local", help="vllm: servers vs LocalEngine"
    )
    ap.add_argument(
        "--decode-compare",
        action="store_true",
        help="engine only: the fast forward against the original one (fast_decode=False), alternating",
    )
    ap.add_argument(
        "--reference-module",
        default=None,
        help="--decode-compare: take the reference LocalEngine from this engine.py (another version of the engine, "
        "e.g. `git show REV:src/trace_rl/rollout/engine.py > /tmp/engine_rev.py`) instead of fast_decode=False",
    )
    ap.add_argument("--replicas", default="1,2", help="--backend vllm: replica counts to run")
    ap.add_argument("--nice", type=int, default=0, help="--backend vllm: niceness of the servers")
    ap.add_argument("--no-local", action="store_true", help="--backend vllm: skip the LocalEngine runs")
    ap.add_argument(
        "--with-schema",
        action="store_true",
        help="--backend vllm: render the python tool's JSON schema in the system turn (a pretrained policy "
        "needs it to know the tool; the prompt grows from ~165 to ~310 tokens on SmolLM2)",
    )
    args = ap.parse_args(argv)
    if args.backend == "vllm":
        return server_comparison(args)
    if args.decode_compare:
        return decode_compare(args)
    args.repeats = args.repeats or (1 if args.quick else 3)
    w = load_workload(args)
    policy, tasks, sampling, codec = w.policy, w.tasks, w.sampling, w.codec
    batch, k, mnt = w.batch, w.k, w.max_new_tokens
    half = max(1, args.max_turns // 2)
    log = (lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr))

    # (a) baseline: lockstep generate() on re-tokenised histories, roots then replays
    t0 = time.perf_counter()
    base_root_tokens, base_eps = baseline_episodes(policy, tasks, sampling, args.max_turns)
    starts = [(e["task"], *e["saves"][half], half) for e in base_eps if half in e["saves"]]
    starts = [s for s in starts for _ in range(k)]
    base_replay_tokens, _ = baseline_episodes(policy, tasks, sampling, args.max_turns, starts)
    base_time = time.perf_counter() - t0
    base_tokens = base_root_tokens + base_replay_tokens
    log(f"baseline: {base_tokens} tokens in {base_time:.1f}s ({len(starts)} replays)")

    # (b) engine: same phases
    engine = bench_engine(policy, batch, k)
    roots, anchors, jobs, replays, eng_time = roots_then_replays(
        engine, codec, tasks, sampling, args.max_turns, k, args.seed
    )
    eng_tokens = sum(e.sampled_tokens for e in roots) + sum(e.sampled_tokens for e in replays)
    log(f"engine: {eng_tokens} tokens in {eng_time:.1f}s ({len(jobs)} replays) stats={engine.stats}")

    # replay cost: k replays from the half-trajectory save points vs k full rollouts of the same tasks.
    # cold: from an empty cache (each save point's prefix is computed once, inside the replay timing).
    # warm: right after the roots ran, with their rows still cached, as the scheduler issues replays; the full
    #       rollouts are timed the same way (after the same roots, prompt cached). Medians over --repeats.
    times: dict[str, list[float]] = {"full_cold": [], "rep_cold": [], "full_warm": [], "rep_warm": []}
    anchor_tasks = [task for task, _ in anchors]
    for rep_i in range(args.repeats):
        fresh = [
            (t, None, args.seed + 20_000 + 100 * i + j + rep_i)
            for i, t in enumerate(anchor_tasks)
            for j in range(k)
        ]
        again = [
            (t, sp, args.seed + 30_000 + 100 * i + j + rep_i)
            for i, (t, sp) in enumerate(anchors)
            for j in range(k)
        ]
        root_jobs = [(t, None, args.seed + i) for i, t in enumerate(tasks)]
        for warm in (False, True):
            for name, jobs_i in (("full", fresh), ("rep", again)):
                # warm: same seeds as phase 1, the same roots, whose rows stay parked
                done, seconds = timed_phase(
                    engine,
                    engine.clear_cache,
                    codec,
                    jobs_i,
                    sampling,
                    args.max_turns,
                    root_jobs if warm else None,
                )
                times[f"{name}_{'warm' if warm else 'cold'}"].append(seconds)
                if name == "rep":
                    rep = done
                else:
                    full = done
    med = {key: float(np.median(v)) for key, v in times.items()}
    full_time, rep_time = med["full_warm"], med["rep_warm"]
    prefix_tokens = [
        sum(int(t.loss_mask.sum()) for t in e.turns[:half]) for e in roots if len(e.save_points) >= half
    ]
    total_tokens = [e.sampled_tokens for e in roots if len(e.save_points) >= half]
    out = {
        "policy": args.policy,
        "quick": args.quick,
        "batch": batch,
        "k": k,
        "max_turns": args.max_turns,
        "max_new_tokens": mnt,
        "threads": torch.get_num_threads(),
        "baseline_tok_s": round(base_tokens / base_time, 1),
        "engine_tok_s": round(eng_tokens / eng_time, 1),
        "speedup": round((eng_tokens / eng_time) / (base_tokens / base_time), 3),
        "replay_cost_ratio": round(rep_time / full_time, 3) if anchors else None,
        "replay_cost_ratio_cold": round(med["rep_cold"] / med["full_cold"], 3) if anchors else None,
        "prefix_token_share": round(float(np.sum(prefix_tokens) / max(1, np.sum(total_tokens))), 3),
        "baseline_tokens": base_tokens,
        "engine_tokens": eng_tokens,
        "baseline_s": round(base_time, 2),
        "engine_s": round(eng_time, 2),
        "full_rollouts_s": round(full_time, 2),
        "replays_s": round(rep_time, 2),
        "full_rollouts_cold_s": round(med["full_cold"], 2),
        "replays_cold_s": round(med["rep_cold"], 2),
        "replay_tokens": sum(e.sampled_tokens for e in rep),
        "full_rollout_tokens": sum(e.sampled_tokens for e in full),
        "anchors": len(anchors),
        "repeats": args.repeats,
    }
    print(json.dumps(out))
    return 0


def decode_compare(args: argparse.Namespace) -> int:
    """The fast engine forward against the original one on the agent workload (phases 1 + 2), alternating."""
    repeats = args.repeats or (2 if args.quick else 5)
    w = load_workload(args)
    policy, tasks, sampling, codec = w.policy, w.tasks, w.sampling, w.codec
    batch, k, mnt = w.batch, w.k, w.max_new_tokens
    reference_cls: Any = None
    if args.reference_module:
        import importlib.util

        spec = importlib.util.spec_from_file_location("reference_engine", args.reference_module)
        if spec is None or spec.loader is None:
            raise SystemExit(f"--reference-module: cannot load {args.reference_module}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["reference_engine"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        reference_cls = module.LocalEngine
    runs: dict[bool, list[float]] = {True: [], False: []}
    forward_s: dict[bool, list[float]] = {True: [], False: []}
    cpu_s: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    outputs: dict[bool, list[Episode]] = {}
    for rep_i in range(repeats):
        order = (True, False) if rep_i % 2 == 0 else (False, True)  # alternate which goes first
        for fast in order:
            if fast or reference_cls is None:
                engine = bench_engine(policy, batch, k, fast_decode=fast)
            else:
                size = max(batch, k * batch)
                engine = reference_cls(policy, max_batch=size, max_rows=2 * size)
            cpu0 = time.process_time()
            roots, _, _, replays, wall = roots_then_replays(
                engine, codec, tasks, sampling, args.max_turns, k, args.seed
            )
            cpu_s[fast].append(time.process_time() - cpu0)
            runs[fast].append(sum(e.sampled_tokens for e in roots + replays) / wall)
            forward_s[fast].append(engine.stats.forward_seconds)
            outputs[fast] = roots + replays
        ratios.append(runs[True][-1] / runs[False][-1])
        cpu_ratios.append(cpu_s[True][-1] / cpu_s[False][-1])
    diffs, agree, total = [0.0], 0, 0
    for a, b in zip(outputs[True], outputs[False], strict=True):
        for ta, tb in zip(a.turns, b.turns, strict=False):
            total += 1
            if not np.array_equal(ta.token_ids, tb.token_ids):
                break  # later turns of this episode have different contexts
            agree += 1
            diffs.append(float(np.abs(ta.logprobs - tb.logprobs).max(initial=0.0)))
    out = {
        "policy": args.policy,
        "batch": batch,
        "k": k,
        "max_turns": args.max_turns,
        "max_new_tokens": mnt,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "reference": args.reference_module or "fast_decode=False",
        "fast_tok_s": round(float(np.median(runs[True])), 1),
        "reference_tok_s": round(float(np.median(runs[False])), 1),
        "fast_over_reference": round(float(np.median(ratios)), 3),
        "ratio_runs": [round(r, 3) for r in ratios],
        "fast_tok_s_runs": [round(r, 1) for r in runs[True]],
        "reference_tok_s_runs": [round(r, 1) for r in runs[False]],
        "cpu_ratio": round(float(np.median(cpu_ratios)), 3),
        "cpu_ratio_runs": [round(r, 3) for r in cpu_ratios],
        "fast_cpu_s": round(float(np.median(cpu_s[True])), 2),
        "reference_cpu_s": round(float(np.median(cpu_s[False])), 2),
        "fast_forward_s": round(float(np.median(forward_s[True])), 2),
        "reference_forward_s": round(float(np.median(forward_s[False])), 2),
        "turns_same_tokens": f"{agree}/{total}",
        "max_abs_logprob_diff": float(f"{max(diffs):.3g}"),
    }
    print(json.dumps(out))
    return 0


class Recorder:
    """A backend wrapper recording each request per episode (asyncio task), in order: prompt, sampling, replica,
    sampled ids, replay flags, cached prompt tokens, and how many requests had completed on the pool when it
    was issued (for `cache_hit_bounds`)."""

    def __init__(self, inner: Any):
        self.inner = inner
        # keyed by the episode's task object itself (kept alive here): ids of finished tasks are reused
        self.chains: dict[Any, list[tuple[list[int], SamplingParams, int | None]]] = {}
        self.requests: list[dict[str, Any]] = []  # in completion order
        self._done = 0

    async def generate(self, prompt: Any, sampling: SamplingParams, n: int = 1) -> Any:
        ctx = REQUEST_CONTEXT.get()
        issued_after = self._done
        out = await self.inner.generate(prompt, sampling, n)
        self._done += 1
        ids = [int(i) for i in prompt]
        chain = self.chains.setdefault(asyncio.current_task(), [])
        chain.append((ids, sampling, out[0].replica))
        self.requests.append(
            {
                "prompt": ids,
                "output": [int(i) for i in out[0].token_ids],
                "replica": out[0].replica,
                "replay": bool(ctx is not None and ctx.replay),
                "cached": int(out[0].cached_prompt_tokens or 0),
                "issued_after": issued_after,
            }
        )
        return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    m = min(len(a), len(b))
    i = 0
    while i < m and a[i] == b[i]:
        i += 1
    return i


def cache_hit_bounds(requests: list[dict[str, Any]], block: int) -> dict[str, float]:
    """What a prefix cache could serve of the replays' prompt tokens, from the recorded requests: a request's
    reusable tokens are its longest common prefix with any sequence its replica computed before it was issued
    (an earlier request's prompt + sampled ids but the last, whose KV is never computed), at most its length
    - 1 (the last prompt token is always recomputed). `token_bound`: reusable / prompt tokens (a cache at
    token granularity, never evicting); `block_bound`: the same in whole KV blocks of `block` tokens (vLLM
    caches full blocks only); `measured`: the server's cached tokens; `mismatched_requests`: replay requests
    whose cached count differs from their block bound (a re-tokenised prefix or an eviction would show here);
    `new_tokens_per_request`: prompt tokens no earlier request had computed (observations, chat template)."""
    prompt = reusable = whole = cached = mismatched = n = 0
    for r in requests:
        if not r["replay"]:
            continue
        earlier = [q for q in requests[: r["issued_after"]] if q["replica"] == r["replica"]]
        reuse = max((_common_prefix(r["prompt"], q["prompt"] + q["output"][:-1]) for q in earlier), default=0)
        reuse = min(reuse, len(r["prompt"]) - 1)
        n += 1
        prompt += len(r["prompt"])
        reusable += reuse
        whole += reuse // block * block
        cached += r["cached"]
        mismatched += int(r["cached"] != reuse // block * block)
    return {
        "measured": round(cached / prompt, 3) if prompt else float("nan"),
        "block_bound": round(whole / prompt, 3) if prompt else float("nan"),
        "token_bound": round(reusable / prompt, 3) if prompt else float("nan"),
        "mismatched_requests": mismatched,
        "replay_requests": n,
        "mean_replay_prompt_tokens": round(prompt / n, 1) if n else float("nan"),
        "new_tokens_per_request": round((prompt - reusable) / n, 1) if n else float("nan"),
    }


def replay_cost(
    backend: Any,
    reset: Any,
    codec: ChatCodec,
    tasks: list[Any],
    anchors: list[Any],
    sampling: SamplingParams,
    args: argparse.Namespace,
    k: int,
) -> float | None:
    """k replays from the save points / k full rollouts of the same tasks, each timed right after the roots
    ran (None without anchors)."""
    root_jobs = [(t, None, args.seed + i) for i, t in enumerate(tasks)]
    timed: dict[str, float] = {}
    for name in ("full", "rep"):
        phase = [
            (t, None if name == "full" else sp, args.seed + 20_000 + 100 * i + j)
            for i, (t, sp) in enumerate(anchors)
            for j in range(k)
        ]
        _, timed[name] = timed_phase(backend, reset, codec, phase, sampling, args.max_turns, root_jobs)
    return round(timed["rep"] / timed["full"], 3) if anchors else None


def local_runs(
    policy: Any,
    codec: ChatCodec,
    tasks: list[Any],
    sampling: SamplingParams,
    args: argparse.Namespace,
    k: int,
    repeats: int,
) -> dict[str, Any]:
    """LocalEngine on the workload: tokens/s of roots + replays (median of `repeats` runs), replay cost."""
    engine = bench_engine(policy, len(tasks), k)
    rates: list[float] = []
    for _ in range(repeats):
        engine.clear_cache()
        roots, anchors, jobs, replays, wall = roots_then_replays(
            engine, codec, tasks, sampling, args.max_turns, k, args.seed
        )
        rates.append(sum(e.sampled_tokens for e in roots + replays) / wall)
    return {
        "tok_s": round(float(np.median(rates)), 1),
        "tok_s_runs": [round(r, 1) for r in rates],
        "tokens": sum(e.sampled_tokens for e in roots + replays),
        "replays": len(jobs),
        "replay_cost_ratio": replay_cost(
            engine, engine.clear_cache, codec, tasks, anchors, sampling, args, k
        ),
        "threads": torch.get_num_threads(),
    }


def server_comparison(args: argparse.Namespace) -> int:
    """LocalEngine vs vLLM with 1 and 2 replicas on the same agent workload (see the module doc)."""
    from trace_rl.rollout.pool import ReplicaPool, backend_metrics
    from trace_rl.rollout.servers import VLLMBackend
    from trace_rl.rollout.vllm_server import VLLMServer, export_policy, launch_servers, stop_servers

    repeats = args.repeats or (1 if args.quick else 3)
    block = VLLMServer.block_size
    w = load_workload(args, batch=(8, 16), k=(2, 2), with_schema=args.with_schema)
    policy, tasks, sampling, codec = w.policy, w.tasks, w.sampling, w.codec
    batch, k, mnt = w.batch, w.k, w.max_new_tokens
    log = (lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr))
    root_jobs = [(t, None, args.seed + i) for i, t in enumerate(tasks)]
    n_root = len(root_jobs)

    out: dict[str, Any] = {"policy": args.policy, "batch": batch, "k": k, "max_turns": args.max_turns}
    out.update(max_new_tokens=mnt, with_schema=args.with_schema, repeats=repeats, block_size=block)
    out["local"] = None if args.no_local else local_runs(policy, codec, tasks, sampling, args, k, repeats)
    log(f"local: {out['local']}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_policy(policy, Path(tmp) / "policy")
        for replicas in [int(r) for r in args.replicas.split(",")]:
            servers = launch_servers(
                folder,
                replicas,
                nice=args.nice,
                threads=1,
                max_model_len=2048,
                max_num_seqs=32,
                timeout_s=900,
            )
            try:
                clients = [VLLMBackend(s.url, stop_ids=policy.stop_ids) for s in servers]

                def reset(clients: list[Any] = clients) -> None:
                    async def go() -> None:
                        await asyncio.gather(*[c.reset_prefix_cache() for c in clients])

                    asyncio.run(go())

                async def direct(group: list[Any], clients: list[Any] = clients) -> int:
                    async def chain(c: list[Any]) -> int:
                        got = 0
                        for prompt, sp_, replica in c:
                            got += len((await clients[replica or 0].generate(prompt, sp_))[0].token_ids)
                        return got

                    return sum(await asyncio.gather(*[chain(c) for c in group]))

                asyncio.run(engine_phase(ReplicaPool(clients), codec, root_jobs, sampling, args.max_turns))

                def direct_run(chains: list[Any]) -> float:
                    """tokens/s of the recorded requests sent straight to their replicas, from cold caches."""
                    reset()
                    t0 = time.perf_counter()
                    got = asyncio.run(direct(chains[:n_root])) + asyncio.run(direct(chains[n_root:]))
                    return got / (time.perf_counter() - t0)

                traced_runs, direct_runs, shares, hits = [], [], [], []
                chains: list[Any] = []
                metrics: dict[str, Any] = {}
                # pairs of (trace-rl run, its requests sent directly), in alternating order (T D, D T, T D,
                # ...; a D before its T replays the previous T's requests, the same workload) so that a
                # drifting machine load does not favour either side
                for rep_i in range(repeats):
                    d_first = rep_i % 2 == 1
                    if d_first:
                        direct_runs.append(direct_run(chains))
                    rec = Recorder(ReplicaPool(clients))  # fresh pool, cold caches
                    reset()
                    roots, anchors, _, replays, traced = roots_then_replays(
                        rec, codec, tasks, sampling, args.max_turns, k, args.seed
                    )
                    tokens = sum(e.sampled_tokens for e in roots + replays)
                    metrics = backend_metrics(rec.inner)
                    hits.append(cache_hit_bounds(rec.requests, block))
                    # one chain of requests per episode, roots' chains first, then replays'
                    chains = list(rec.chains.values())
                    if len(chains) != len(roots) + len(replays):
                        raise RuntimeError(
                            f"{len(chains)} request chains for {len(roots) + len(replays)} episodes"
                        )
                    traced_runs.append(tokens / traced)
                    if not d_first:
                        direct_runs.append(direct_run(chains))
                    shares.append(traced_runs[-1] / direct_runs[-1])
                pool = ReplicaPool(clients)
                res = {
                    "tok_s": round(float(np.median(traced_runs)), 1),
                    "tok_s_runs": [round(r, 1) for r in traced_runs],
                    "direct_tok_s": round(float(np.median(direct_runs)), 1),
                    "direct_tok_s_runs": [round(r, 1) for r in direct_runs],
                    "trace_rl_share_of_direct": round(float(np.median(shares)), 3),
                    "share_runs": [round(r, 3) for r in shares],
                    "tokens": tokens,
                    "replays": len(replays),
                    "replay_cost_ratio": replay_cost(pool, reset, codec, tasks, anchors, sampling, args, k),
                    "replay_cache_hit_rate": round(metrics["backend_replay_cache_hit_rate"], 3),
                    "replay_prefix_hit_rate": round(metrics["backend_replay_prefix_hit_rate"], 3),
                    "replay_hit_bounds": hits[-1],
                    "affinity_violations": metrics["backend_affinity_violations"],
                }
                out[f"vllm_{replicas}"] = res
                log(f"vllm x{replicas}: {res}")
            finally:
                stop_servers(servers)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
