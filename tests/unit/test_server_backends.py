"""Server backends without a server: vLLM and SGLang wire formats (requests built, documented responses
parsed), the asyncio HTTP client against a local fake server, and the replica pool's routing, limits, failover
and versions on fake replicas. The real vLLM checks are in tests/integration/test_vllm_server.py."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from trace_rl.rollout.backends import (
    REQUEST_CONTEXT,
    Completion,
    RequestContext,
    SamplingParams,
    completion_seed,
)
from trace_rl.rollout.http import ServerError, request_json
from trace_rl.rollout.pool import ReplicaPool, backend_metrics, is_replica_failure
from trace_rl.rollout.servers import (
    SGLangBackend,
    parse_sglang_generate,
    parse_vllm_completion,
    sglang_generate_request,
    vllm_completion_request,
)

# --------------------------------------------------------------------------------------------- vLLM format


def test_vllm_request_sets_every_sampling_default_explicitly() -> None:
    body = vllm_completion_request(
        [5, 6, 7],
        SamplingParams(32, 0.7, seed=9),
        4,
        model="m",
        stop_ids=[2, 3],
        policy_version=3,
        max_model_len=20,
    )
    assert body["prompt"] == [5, 6, 7] and body["n"] == 4 and body["model"] == "m"
    assert body["max_tokens"] == 17  # the room left under max_model_len
    assert body["temperature"] == 0.7 and body["seed"] == 9
    assert (body["top_p"], body["top_k"], body["min_p"]) == (1.0, 0, 0.0)
    assert (body["repetition_penalty"], body["presence_penalty"], body["frequency_penalty"]) == (
        1.0,
        0.0,
        0.0,
    )
    assert body["stop_token_ids"] == [2, 3] and body["ignore_eos"] is True
    assert body["logprobs"] == 0 and body["return_token_ids"] is True
    assert body["cache_salt"] == "trace-v3" and body["request_id"].startswith("trace-v3-")
    explicit = vllm_completion_request([1], SamplingParams(4, stop_ids=(7,)), 1, model="m", stop_ids=[2])
    assert explicit["stop_token_ids"] == [7] and "cache_salt" not in explicit


@pytest.mark.parametrize(
    ("prompt", "sampling", "n", "match"),
    [
        ([], SamplingParams(4), 1, "empty"),
        ([1], SamplingParams(4), 0, "n must be"),
        ([1], SamplingParams(4, top_p=0.9), 1, "top_p"),
        (list(range(20)), SamplingParams(4), 1, "max_model_len"),
    ],
)
def test_vllm_request_errors(prompt, sampling, n, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        vllm_completion_request(prompt, sampling, n, model="m", stop_ids=[2], max_model_len=20)


def vllm_choice(index: int, ids: list[int], lps: list[float], reason: str) -> dict:  # type: ignore[type-arg]
    return {
        "index": index,
        "text": "x",
        "token_ids": ids,
        "logprobs": {"token_logprobs": lps, "tokens": ["t"] * len(ids), "top_logprobs": []},
        "finish_reason": reason,
        "stop_reason": None,
    }


def test_parse_vllm_completion_orders_choices_and_reads_cached_tokens() -> None:
    body = {
        "choices": [vllm_choice(1, [4], [-0.5], "length"), vllm_choice(0, [7, 2], [-1.0, -0.25], "stop")],
        "usage": {"prompt_tokens": 64, "prompt_tokens_details": {"cached_tokens": 32}},
    }
    a, b = parse_vllm_completion(body, 2)
    assert a.token_ids.tolist() == [7, 2] and a.finish_reason == "stop" and b.finish_reason == "length"
    assert a.logprobs.dtype == np.float32 and a.logprobs.tolist() == [-1.0, -0.25]
    assert a.cached_prompt_tokens == 32
    assert (
        parse_vllm_completion({"choices": [vllm_choice(0, [1], [-1.0], "stop")]}, 1)[0].cached_prompt_tokens
        is None
    )
    with pytest.raises(ValueError, match="expected 2 choices"):
        parse_vllm_completion(body | {"choices": body["choices"][:1]}, 2)
    with pytest.raises(ValueError, match="token logprobs"):
        parse_vllm_completion({"choices": [vllm_choice(0, [1, 2], [-1.0], "stop")]}, 1)
    with pytest.raises(ValueError, match="finish_reason"):
        parse_vllm_completion({"choices": [vllm_choice(0, [1], [-1.0], "abort")]}, 1)


# ------------------------------------------------------------------------------------------- SGLang format

# The response of SGLang's native /generate with return_logprob (docs.sglang.io, "Sampling parameters" and
# "Native APIs"): one dict per batch element; meta_info.output_token_logprobs are (logprob, token_id, text)
# triples (text None unless return_text_in_logprobs); finish_reason is {"type": "stop", "matched": id} or
# {"type": "length", "length": max_new_tokens}.
SGLANG_RESPONSE = [
    {
        "text": " 4<|im_end|>",
        "output_ids": [604, 2],
        "meta_info": {
            "id": "trace-v0-a",
            "finish_reason": {"type": "stop", "matched": 2},
            "prompt_tokens": 12,
            "completion_tokens": 2,
            "cached_tokens": 8,
            "output_token_logprobs": [[-0.75, 604, None], [-0.125, 2, None]],
        },
    },
    {
        "text": " 5 6 7",
        "output_ids": [605, 606, 607],
        "meta_info": {
            "id": "trace-v0-b",
            "finish_reason": {"type": "length", "length": 3},
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "cached_tokens": 12,
            "output_token_logprobs": [[-1.5, 605, None], [-2.0, 606, None], [-0.5, 607, None]],
        },
    },
]


def test_sglang_request_is_a_seeded_batch_with_explicit_defaults() -> None:
    body = sglang_generate_request(
        [3, 4], SamplingParams(3, 0.9, top_p=0.95, seed=5), 2, stop_ids=[2], policy_version=1
    )
    assert body["input_ids"] == [[3, 4], [3, 4]]
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1
    assert [p["sampling_seed"] for p in body["sampling_params"]] == [
        completion_seed(5, 0),
        completion_seed(5, 1),
    ]
    p = body["sampling_params"][0]
    assert (p["max_new_tokens"], p["temperature"], p["top_p"], p["top_k"], p["min_p"]) == (
        3,
        0.9,
        0.95,
        -1,
        0.0,
    )
    assert p["repetition_penalty"] == 1.0 and p["stop_token_ids"] == [2] and p["ignore_eos"] is True
    assert all(r.startswith("trace-v1-") for r in body["rid"]) and len(set(body["rid"])) == 2


def test_parse_sglang_generate() -> None:
    a, b = parse_sglang_generate(SGLANG_RESPONSE, 2)
    assert a.token_ids.tolist() == [604, 2] and a.finish_reason == "stop" and a.cached_prompt_tokens == 8
    assert b.logprobs.tolist() == [-1.5, -2.0, -0.5] and b.finish_reason == "length"
    (one,) = parse_sglang_generate(SGLANG_RESPONSE[0], 1)  # n = 1: a dict, not a list
    assert one.token_ids.tolist() == [604, 2]
    with pytest.raises(ValueError, match="expected 3 outputs"):
        parse_sglang_generate(SGLANG_RESPONSE, 3)
    with pytest.raises(ValueError, match="output_token_logprobs"):
        parse_sglang_generate({"meta_info": {"finish_reason": {"type": "stop"}}}, 1)


class FakeServer:
    """An asyncio HTTP server that records JSON requests and answers from a route table."""

    def __init__(self, routes: dict[str, object]):
        self.routes = routes
        self.requests: list[tuple[str, object]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split()[1]
        length = next(
            (int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith("content-length")), 0
        )
        body = json.loads(await reader.readexactly(length)) if length else None
        self.requests.append((path, body))
        reply = self.routes.get(path)
        status = 404 if reply is None else 200
        data = json.dumps(reply if reply is not None else {"error": "no route"}).encode()
        chunked = path == "/flush_cache"  # exercise the client's chunked decoding on one route
        if chunked:
            payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
            hdr = f"HTTP/1.1 {status} OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        else:
            payload = data
            hdr = f"HTTP/1.1 {status} OK\r\nContent-Length: {len(data)}\r\n\r\n"
        writer.write(hdr.encode() + payload)
        await writer.drain()
        writer.close()


def test_sglang_backend_over_http_against_documented_payloads() -> None:
    async def go():  # type: ignore[no-untyped-def]
        fake = FakeServer(
            {
                "/generate": SGLANG_RESPONSE,
                "/flush_cache": {"success": True},
                "/update_weights_from_disk": {"success": True},
            }
        )
        server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            backend = SGLangBackend(f"http://127.0.0.1:{port}", stop_ids=[2])
            out = await backend.generate([3, 4], SamplingParams(3, 1.0, seed=1), 2, policy_version=4)
            await backend.load_weights("/w/v5", 5)
            with pytest.raises(ServerError) as err:
                await request_json("GET", f"http://127.0.0.1:{port}/nowhere")
        return fake, out, err.value

    fake, out, err = asyncio.run(go())
    assert [c.token_ids.tolist() for c in out] == [[604, 2], [605, 606, 607]]
    paths = [p for p, _ in fake.requests]
    assert paths == ["/generate", "/update_weights_from_disk", "/flush_cache", "/nowhere"]
    assert fake.requests[0][1]["input_ids"] == [[3, 4], [3, 4]]
    assert fake.requests[1][1] == {"model_path": "/w/v5", "weight_version": "5"}
    assert err.status == 404 and not is_replica_failure(err)


def test_connection_refused_is_a_replica_failure() -> None:
    from trace_rl.rollout.vllm_server import free_port

    port = free_port()
    with pytest.raises(OSError) as err:
        asyncio.run(request_json("GET", f"http://127.0.0.1:{port}/health", timeout_s=5))
    assert is_replica_failure(err.value)
    assert is_replica_failure(ServerError("u", 503, "")) and not is_replica_failure(ValueError("x"))


# ------------------------------------------------------------------------------------------------- the pool


class FakeReplica:
    kind = "fake"

    def __init__(self, name: str, delay: float = 0.0, fail_after: int | None = None, cached: int = 0):
        self.name, self.delay, self.fail_after, self.cached = name, delay, fail_after, cached
        self.calls: list[tuple[list[int], int | None]] = []
        self.active = self.peak = 0
        self.loaded: list[tuple[str, int]] = []

    async def generate(self, prompt, sampling, n=1, *, policy_version=None):  # type: ignore[no-untyped-def]
        self.calls.append((list(prompt), policy_version))
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise ConnectionRefusedError(f"{self.name} is down")
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.active -= 1
        return [
            Completion(np.asarray([1, 2]), np.zeros(2, np.float32), "stop", cached_prompt_tokens=self.cached)
        ] * n

    async def load_weights(self, folder, version):  # type: ignore[no-untyped-def]
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise ConnectionRefusedError(f"{self.name} is down")
        self.loaded.append((folder, version))

    async def reset_prefix_cache(self) -> None:
        pass


async def call(pool: ReplicaPool, key: str | None, replay: bool = False, prefix_version: int | None = None):  # type: ignore[no-untyped-def]
    REQUEST_CONTEXT.set(RequestContext(key, replay, prefix_version))
    return await pool.generate([1, 2, 3, 4], SamplingParams(4))


def test_pool_affinity_least_loaded_and_limits() -> None:
    reps = [FakeReplica("a", delay=0.02, cached=3), FakeReplica("b", delay=0.02, cached=3)]
    pool = ReplicaPool(reps, max_in_flight=3)

    async def go():  # type: ignore[no-untyped-def]
        first = await asyncio.gather(*[call(pool, f"k{i}") for i in range(8)])
        again = await asyncio.gather(*[call(pool, f"k{i}", replay=True) for i in reversed(range(8))])
        return first, again[::-1]

    first, again = asyncio.run(go())
    home = [f[0].replica for f in first]
    assert sorted(home) == [0, 0, 0, 0, 1, 1, 1, 1]  # new prompts spread to the least-loaded replica
    assert [a[0].replica for a in again] == home  # every later request of a prompt goes to its replica
    assert max(r.peak for r in reps) == 3  # the per-replica limit holds
    m = backend_metrics(pool)
    assert m["backend_requests_per_replica"] == [8, 8] and m["backend_affinity_violations"] == 0
    assert m["backend_replay_cache_hit_rate"] == pytest.approx(3 / 4)
    assert np.isnan(m["backend_replay_prefix_hit_rate"])  # no request was a replay's first
    assert backend_metrics(pool)["backend_requests_per_replica"] == [0, 0]  # the window was taken


def test_pool_without_affinity_ignores_keys() -> None:
    pool = ReplicaPool([FakeReplica("a"), FakeReplica("b")], affinity=False)
    out = [asyncio.run(call(pool, "same"))[0].replica for _ in range(4)]
    assert out == [0, 1, 0, 1]


def test_pool_failover_retries_in_flight_requests_and_counts_them() -> None:
    reps = [FakeReplica("a", delay=0.01), FakeReplica("b", delay=0.01, fail_after=2)]
    pool = ReplicaPool(reps)

    async def go():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*[call(pool, f"k{i % 4}") for i in range(12)])

    out = asyncio.run(go())
    assert len(out) == 12 and all(len(o) == 1 for o in out)
    m = backend_metrics(pool)
    assert pool.dead == {1} and m["backend_live_replicas"] == 1
    assert m["backend_retried_requests"] >= 1
    assert m["backend_retried_requests"] + 2 == len(reps[1].calls)  # every failed call was retried once
    assert m["backend_affinity_violations"] >= 1  # keys homed on b now served by a
    assert sum(m["backend_requests_per_replica"]) == 12
    reps[0].fail_after = len(reps[0].calls)
    with pytest.raises(RuntimeError, match="all 2 replicas"):
        asyncio.run(call(pool, "k0"))


def test_pool_bad_requests_are_not_retried() -> None:
    class Bad(FakeReplica):
        async def generate(self, *a, **k):  # type: ignore[no-untyped-def]
            raise ServerError("u", 400, "bad request")

    pool = ReplicaPool([Bad("a"), FakeReplica("b")])
    with pytest.raises(ServerError):
        asyncio.run(call(pool, "k"))
    assert pool.dead == set() and pool.stats.retried_requests == 0


def test_pool_versions_and_stale_prefixes() -> None:
    reps = [FakeReplica("a"), FakeReplica("b")]
    pool = ReplicaPool(reps)
    assert asyncio.run(call(pool, "k"))[0].policy_version == 0
    assert asyncio.run(pool.push_weights("/w/v1")) == 1
    assert [r.loaded for r in reps] == [[("/w/v1", 1)], [("/w/v1", 1)]]
    out = asyncio.run(call(pool, "k", replay=True, prefix_version=0))
    assert out[0].policy_version == 1 and reps[0].calls[-1][1] == 1  # the request is stamped with the version
    asyncio.run(call(pool, "k", replay=True, prefix_version=1))
    asyncio.run(call(pool, "k"))
    m = backend_metrics(pool)
    assert m["policy_version"] == 1 and m["backend_stale_prefixes"] == 1


def test_pool_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        ReplicaPool([])
    with pytest.raises(ValueError, match="max_in_flight"):
        ReplicaPool([FakeReplica("a")], max_in_flight=0)


def test_the_agent_loop_tags_requests_with_task_replay_and_prefix_version() -> None:
    from trace_rl.rollout import toy_env
    from trace_rl.rollout.agent import run_episode

    class Recorder:
        def __init__(self) -> None:
            self.seen: list[RequestContext | None] = []

        async def generate(self, prompt, sampling, n=1):  # type: ignore[no-untyped-def]
            self.seen.append(REQUEST_CONTEXT.get())
            return [Completion(np.asarray([7, 2]), np.zeros(2, np.float32), "stop", policy_version=5)]

    class Codec:
        end_of_turn = 2

        def prompt_ids(self, text, tools):  # type: ignore[no-untyped-def]
            return [1, 3, 4]

        def observation_ids(self, text):  # type: ignore[no-untyped-def]
            return [9, 9]

        def turn_text(self, ids, stop=()):  # type: ignore[no-untyped-def]
            return "no tool call"

    task = toy_env.load_tasks("train", 1, seed=0)[0]
    backend = Recorder()
    root = asyncio.run(
        run_episode(backend, toy_env.make_env(max_turns=3), Codec(), task, SamplingParams(4), max_turns=3)
    )
    assert [c.affinity_key if c else None for c in backend.seen] == [task.id] * len(root.turns)
    assert all(c is not None and not c.replay for c in backend.seen)
    assert [c.prefix_version for c in backend.seen if c] == [None] + [5] * (len(root.turns) - 1)
    assert root.save_points and root.save_points[0].policy_version == 5
    backend.seen.clear()
    asyncio.run(
        run_episode(
            backend,
            toy_env.make_env(max_turns=3),
            Codec(),
            task,
            SamplingParams(4),
            max_turns=3,
            start=root.save_points[0],
        )
    )
    assert backend.seen and all(c is not None and c.replay and c.prefix_version == 5 for c in backend.seen)
    assert [c.resumed for c in backend.seen if c] == [True] + [False] * (len(backend.seen) - 1)
    assert REQUEST_CONTEXT.get() is None  # reset after each request


def test_backend_config_section() -> None:
    from trace_rl.train.config import ConfigError, load_config

    cfg = load_config(preset="smoke", overrides=["backend.kind=vllm", "backend.urls=http://a:1,http://b:2"])
    assert (
        cfg.backend.kind == "vllm"
        and cfg.backend.urls == "http://a:1,http://b:2"
        and cfg.backend.replicas == 1
    )
    assert load_config(preset="smoke").backend.kind == "local"
    for bad, key in [
        ("backend.kind=llama-server", "backend.kind"),
        ("backend.kind=sglang", "backend.urls: must list the running SGLang servers"),
        ("backend.replicas=0", "backend.replicas"),
        ("backend.max_in_flight=0", "backend.max_in_flight"),
        ("backend.dtype=float16", "backend.dtype"),
        ("backend.kv_cache_gib=0", "backend.kv_cache_gib"),
    ]:
        with pytest.raises(ConfigError, match=key):
            load_config(preset="smoke", overrides=[bad])
    with pytest.raises(ConfigError, match=r"sampling.top_p: must be 1 with backend.kind=vllm"):
        load_config(preset="smoke", overrides=["backend.kind=vllm", "sampling.top_p=0.9"])
    assert load_config(preset="smoke", overrides=["sampling.top_p=0.9"]).sampling.top_p == 0.9
    sg = load_config(
        preset="smoke", overrides=["backend.kind=sglang", "backend.urls=http://a:1", "sampling.top_p=0.9"]
    )
    assert (
        sg.backend.kind == "sglang" and sg.sampling.top_p == 0.9
    )  # SGLang's logprobs are taken before top-p


def test_open_backend_sglang_needs_urls_and_builds_a_pool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from trace_rl.train.config import load_config
    from trace_rl.train.serving import open_backend

    cfg = load_config(preset="smoke")
    no_urls = dataclasses.replace(cfg, backend=dataclasses.replace(cfg.backend, kind="sglang"))
    with pytest.raises(ValueError, match=r"backend\.kind=sglang needs backend\.urls"):
        open_backend(no_urls, object(), tmp_path)  # before touching the policy or launching anything
    assert not any(tmp_path.iterdir())
