"""An SGLang stand-in for the trainer's ``backend.kind=sglang`` tests (no SGLang runs on this CPU).

It speaks the documented native API (docs.sglang.io "Native APIs" / "Sampling parameters"; the payloads of
`tests/unit/test_server_backends.py`) and really generates, with trace-rl's LocalEngine on the tiny policy:

- ``POST /generate``: ``input_ids`` (a batch: list of id lists), ``sampling_params`` (one dict per element:
  max_new_tokens, temperature, top_p, top_k -1, min_p, penalties, stop_token_ids, ignore_eos,
  skip_special_tokens, sampling_seed), ``return_logprob``, ``logprob_start_len: -1``, ``rid`` (one per
  element). Answer: one dict per element with ``text``, ``output_ids`` and ``meta_info`` = ``id``,
  ``finish_reason`` ({"type": "stop", "matched": id} or {"type": "length", "length": n}), ``prompt_tokens``,
  ``completion_tokens``, ``cached_tokens``, ``output_token_logprobs`` ((logprob, id, None) triples) and
  ``weight_version``.
- ``cached_tokens`` as RadixAttention reports them (page size 1): the longest common prefix of the prompt with
  any sequence this server computed since the last flush (prompt + sampled ids but the last), at most the
  prompt length - 1.
- ``POST /update_weights_from_disk`` {"model_path", "weight_version"}: loads ``model.safetensors`` from the
  folder into its model; ``POST /flush_cache``; ``GET /health``.

It runs in a thread of the test process with its own event loop; every request is recorded in `requests`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from trace_rl.rollout.backends import SamplingParams
from trace_rl.rollout.engine import LocalEngine


class SGLangStandIn:
    """One stand-in server on 127.0.0.1 (port chosen by the OS); `start` returns once it listens."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.engine = LocalEngine(policy, max_batch=32)
        self.requests: list[tuple[str, Any]] = []
        self.weight_version = "0"
        self.port = 0
        self._computed: list[list[int]] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SGLangStandIn:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(30)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()

        if self._server is not None:
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def _cached(self, prompt: list[int]) -> int:
        best = 0
        for seq in self._computed:
            m = min(len(seq), len(prompt))
            i = 0
            while i < m and seq[i] == prompt[i]:
                i += 1
            best = max(best, i)
        return min(best, len(prompt) - 1)

    async def _one(self, ids: list[int], params: dict[str, Any], rid: str) -> dict[str, Any]:
        sampling = SamplingParams(
            max_new_tokens=int(params["max_new_tokens"]),
            temperature=float(params["temperature"]),
            top_p=float(params["top_p"]),
            seed=int(params["sampling_seed"]),
            stop_ids=tuple(int(i) for i in params["stop_token_ids"]),
        )
        cached = self._cached(ids)
        (c,) = await self.engine.generate(ids, sampling, 1)
        out = [int(i) for i in c.token_ids]
        self._computed.append(ids + out[:-1])
        if c.finish_reason == "stop":
            finish: dict[str, Any] = {"type": "stop", "matched": out[-1]}
        else:
            finish = {"type": "length", "length": len(out)}
        return {
            "text": self.policy.tokenizer.decode(out),
            "output_ids": out,
            "meta_info": {
                "id": rid,
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "completion_tokens": len(out),
                "cached_tokens": cached,
                "output_token_logprobs": [
                    [float(lp), t, None] for lp, t in zip(c.logprobs.tolist(), out, strict=True)
                ],
                "weight_version": self.weight_version,
            },
        }

    async def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "GET" and path == "/health":
            return 200, {}
        if method == "POST" and path == "/generate":
            batch = body["input_ids"]
            params = body["sampling_params"]
            if not (isinstance(batch, list) and batch and isinstance(batch[0], list)):
                return 400, {"error": "this stand-in takes batched input_ids only"}
            if not body.get("return_logprob") or body.get("logprob_start_len") != -1:
                return 400, {"error": "send return_logprob: true and logprob_start_len: -1"}
            outs = await asyncio.gather(
                *[self._one(ids, p, rid) for ids, p, rid in zip(batch, params, body["rid"], strict=True)]
            )
            return 200, list(outs)
        if method == "POST" and path == "/flush_cache":
            self._computed.clear()
            self.engine.clear_cache()
            return 200, {"success": True}
        if method == "POST" and path == "/update_weights_from_disk":
            from safetensors.torch import load_file

            tensors = load_file(str(Path(body["model_path"]) / "model.safetensors"))
            missing, unexpected = self.policy.model.load_state_dict(tensors, strict=False)
            if missing or unexpected:
                return 400, {"success": False, "message": f"missing {missing}, unexpected {unexpected}"}
            self.weight_version = str(body["weight_version"])
            self.engine.clear_cache()
            return 200, {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": 0,
            }
        return 404, {"error": f"no route {method} {path}"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        method, path = head.split()[:2]
        length = next(
            (int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith("content-length")), 0
        )
        body = json.loads(await reader.readexactly(length)) if length else None
        self.requests.append((path, body))
        try:
            status, reply = await self._route(method, path, body)
        except Exception as exc:  # the stand-in's own failure: a 500, as a server would answer
            status, reply = 500, {"error": repr(exc)}
        data = json.dumps(reply).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()
