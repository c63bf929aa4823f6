"""Clients of real inference servers behind the token-in/token-out backend protocol: vLLM and SGLang.

Each client talks to ONE server (a replica); `trace_rl.rollout.pool.ReplicaPool` spreads requests over several.
Wire formats (docs/serving.md; ../shared/SCALEOUT.md section C):

- vLLM: ``POST /v1/completions`` with ``prompt`` = a list of token ids, ``return_token_ids``, ``logprobs: 0``
  (the sampled token's logprob), ``n``, ``seed``, ``stop_token_ids`` with ``ignore_eos`` (only our stop ids end
  a turn, as in the local engine), ``cache_salt`` = the policy version, and every sampling default that a server
  or a model's generation_config.json could change set explicitly: top_k 0, min_p 0, repetition / presence /
  frequency penalties neutral. Weight sync in dev mode: ``/collective_rpc`` ``reload_weights`` from a folder,
  then ``/reset_prefix_cache``.
- SGLang: native ``POST /generate`` with ``input_ids`` (a batch of n copies, one seed each), ``return_logprob``
  and ``logprob_start_len: -1``; ids and logprobs from ``meta_info.output_token_logprobs`` (logprob, id, text)
  triples, cache hits from ``meta_info.cached_tokens``. Weight sync: ``/update_weights_from_disk``, then
  ``/flush_cache``. No SGLang runs on this CPU: its format is tested on payloads built from its documented schema.

Logprob convention (what the trainer recomputes, `trace_rl.rollout.backends.Completion`): log softmax(z / T) of
the sampled token, before top-p, T = 1 for greedy. vLLM gives exactly that when the server runs with
``--logprobs-mode processed_logprobs`` (after temperature; top-k/top-p are off here) and ``top_p == 1``, so
`VLLMBackend` refuses top_p < 1 (vLLM would then report the renormalised nucleus distribution). SGLang's
default (``SGLANG_RETURN_ORIGINAL_LOGPROB`` unset) is log softmax(z / T) before top-p.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from trace_rl.rollout.backends import Completion, SamplingParams, completion_seed
from trace_rl.rollout.http import request_json

VLLM_LOGPROBS_MODE = "processed_logprobs"


def _max_tokens(prompt_len: int, sampling: SamplingParams, max_model_len: int | None) -> int:
    if max_model_len is None:
        return sampling.max_new_tokens
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(
            f"prompt of {prompt_len} tokens does not fit the server's max_model_len={max_model_len}"
        )
    return min(sampling.max_new_tokens, room)


def _prepare(
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    n: int,
    stop_ids: Sequence[int],
    max_model_len: int | None,
) -> tuple[list[int], list[int], int]:
    """(prompt ids, stop ids, max new tokens) of a request; ValueError on an empty prompt, n < 1 or no room."""
    ids = [int(i) for i in prompt_token_ids]
    if not ids:
        raise ValueError("prompt_token_ids is empty")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    stop = [int(i) for i in (sampling.stop_ids if sampling.stop_ids is not None else stop_ids)]
    return ids, stop, _max_tokens(len(ids), sampling, max_model_len)


# Sampling defaults both servers get explicitly (a server's or a model's generation_config.json defaults
# could otherwise change the distribution RL samples from): no min-p, neutral penalties, only our stop ids.
NEUTRAL_SAMPLING = {
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "ignore_eos": True,
    "skip_special_tokens": False,
}


def _completion(ids: Sequence[int], logprobs: Sequence[float], reason: Any, cached: Any) -> Completion:
    """One parsed completion; ValueError on a finish reason other than stop/length."""
    if reason not in ("stop", "length"):
        raise ValueError(f"unexpected finish_reason {reason!r}")
    return Completion(
        np.asarray(ids, np.int64),
        np.asarray(logprobs, np.float32),
        str(reason),
        cached_prompt_tokens=None if cached is None else int(cached),
    )


def vllm_completion_request(
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    n: int,
    *,
    model: str,
    stop_ids: Sequence[int],
    policy_version: int | None = None,
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """The JSON body of a vLLM ``/v1/completions`` request (token ids in, ids + sampled-token logprobs out).

    ``stop_ids``: used when ``sampling.stop_ids`` is None (the policy's end-of-turn ids). Raises ValueError on an
    empty prompt, n < 1, top_p < 1 (see the module doc) or a prompt that leaves no room under max_model_len.
    """
    if sampling.top_p < 1.0:
        raise ValueError(
            "VLLMBackend needs top_p == 1: vLLM's processed logprobs after top-p truncation are not the "
            "untruncated softmax(z/T) the trainer recomputes"
        )
    ids, stop, max_tokens = _prepare(prompt_token_ids, sampling, n, stop_ids, max_model_len)
    body: dict[str, Any] = {
        "model": model,
        "prompt": ids,
        "n": n,
        "max_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": 1.0,
        "top_k": 0,
        **NEUTRAL_SAMPLING,
        "seed": int(sampling.seed) % (2**63),
        "stop_token_ids": stop,
        "logprobs": 0,
        "return_token_ids": True,
        "spaces_between_special_tokens": False,
        "stream": False,
    }
    if policy_version is not None:
        body["cache_salt"] = f"trace-v{policy_version}"
        body["request_id"] = f"trace-v{policy_version}-{uuid.uuid4().hex}"
    return body


def parse_vllm_completion(body: dict[str, Any], n: int) -> list[Completion]:
    """Completions (index order) from a ``/v1/completions`` response with ``return_token_ids`` and ``logprobs: 0``.

    ``cached_prompt_tokens`` comes from ``usage.prompt_tokens_details.cached_tokens`` (the server needs
    ``--enable-prompt-tokens-details``; None otherwise). Raises ValueError when the response lacks n choices,
    token ids, or one logprob per token, or has a finish reason other than stop/length.
    """
    choices = sorted(body.get("choices") or [], key=lambda c: int(c.get("index", 0)))
    if len(choices) != n:
        raise ValueError(f"expected {n} choices, the server returned {len(choices)}")
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    out = []
    for c in choices:
        ids = c.get("token_ids")
        if ids is None:
            raise ValueError("response has no token_ids (the server must accept return_token_ids)")
        lps = (c.get("logprobs") or {}).get("token_logprobs")
        if lps is None or len(lps) != len(ids):
            raise ValueError(f"expected {len(ids)} token logprobs, got {None if lps is None else len(lps)}")
        out.append(_completion(ids, lps, c.get("finish_reason"), cached))
    return out


def sglang_generate_request(
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    n: int,
    *,
    stop_ids: Sequence[int],
    policy_version: int | None = None,
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """The JSON body of an SGLang native ``/generate`` request: a batch of n copies of the prompt, copy i seeded
    with `completion_seed(seed, i)` (the local engine's per-completion seeds). Raises ValueError as
    `vllm_completion_request` does (top_p < 1 is allowed: SGLang's logprobs are taken before top-p)."""
    ids, stop, max_tokens = _prepare(prompt_token_ids, sampling, n, stop_ids, max_model_len)
    params = {
        "max_new_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": -1,
        **NEUTRAL_SAMPLING,
        "stop_token_ids": stop,
    }
    tag = f"trace-v{policy_version}-" if policy_version is not None else "trace-"
    return {
        "input_ids": [ids] * n,
        "sampling_params": [{**params, "sampling_seed": completion_seed(sampling.seed, i)} for i in range(n)],
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 0,
        "return_text_in_logprobs": False,
        "rid": [f"{tag}{uuid.uuid4().hex}" for _ in range(n)],
        "stream": False,
    }


def parse_sglang_generate(body: Any, n: int) -> list[Completion]:
    """Completions (batch order) from a native ``/generate`` response: a list of n outputs (a dict for n = 1),
    each with ``meta_info.output_token_logprobs`` = [[logprob, token_id, text|None], ...] and
    ``meta_info.finish_reason.type`` in {"stop", "length"}. Raises ValueError on any other shape."""
    outputs = body if isinstance(body, list) else [body]
    if len(outputs) != n:
        raise ValueError(f"expected {n} outputs, the server returned {len(outputs)}")
    out = []
    for o in outputs:
        meta = o.get("meta_info") or {}
        triples = meta.get("output_token_logprobs")
        if triples is None:
            raise ValueError("response has no meta_info.output_token_logprobs (send return_logprob: true)")
        finish = meta.get("finish_reason") or {}
        reason = finish.get("type") if isinstance(finish, dict) else finish
        out.append(
            _completion(
                [int(t[1]) for t in triples],
                [float(t[0]) for t in triples],
                reason,
                meta.get("cached_tokens"),
            )
        )
    return out


class _ServerClient:
    """What both clients share: base URL, stop ids, timeouts, health, generation over one POST route, cache
    reset and the disk weight reload. Subclasses give the routes and the request/response formats."""

    kind = "server"
    generate_path = ""  # POST: sample completions
    reset_path = ""  # POST: drop the prefix cache
    reload_path = ""  # POST: reload the weights from a folder

    def __init__(
        self, url: str, *, stop_ids: Sequence[int], max_model_len: int | None = None, timeout_s: float = 600.0
    ):
        self.url = url.rstrip("/")
        self.stop_ids = tuple(int(i) for i in stop_ids)
        self.max_model_len = max_model_len
        self.timeout_s = timeout_s

    def _reload_body(self, folder: str, version: int) -> dict[str, Any]:
        raise NotImplementedError

    def _request(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int, policy_version: int | None
    ) -> Any:
        raise NotImplementedError

    def _parse(self, reply: Any, n: int) -> list[Completion]:
        raise NotImplementedError

    async def _describe(self) -> None:
        """Read what the server must tell before the first request (nothing by default)."""

    def _copies(self, sampling: SamplingParams, n: int) -> int:
        """How many copies of each returned completion make the n asked for (1: the server samples all n)."""
        return 1

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        n: int = 1,
        *,
        policy_version: int | None = None,
    ) -> list[Completion]:
        """Sample n completions of the prompt (GenerationBackend protocol), in completion-index order.

        policy_version: stamped on the request (vLLM: ``cache_salt`` and ``request_id``; SGLang: ``rid``).

        Raises:
            ValueError: bad prompt / n / top_p, or a malformed response. ServerError, OSError, TimeoutError:
            the server refused, failed or is unreachable (a pool retries those on another replica).
        """
        await self._describe()
        copies = self._copies(sampling, n)
        body = self._request(prompt_token_ids, sampling, n // copies, policy_version)
        reply = await request_json("POST", self.url + self.generate_path, body, timeout_s=self.timeout_s)
        return self._parse(reply, n // copies) * copies

    async def health(self) -> bool:
        """True when ``GET /health`` answers with a status below 400."""
        try:
            await request_json("GET", self.url + "/health", timeout_s=5)
            return True
        except Exception:
            return False

    async def reset_prefix_cache(self) -> None:
        """Drop every cached prefix (`reset_path`)."""
        await request_json("POST", self.url + self.reset_path, timeout_s=60)

    async def load_weights(self, folder: str, version: int) -> None:
        """Reload the weights in place from an HF folder of the architecture the server runs (`reload_path`),
        then reset the prefix cache. Raises ServerError / OSError / TimeoutError as `generate` does."""
        await request_json(
            "POST", self.url + self.reload_path, self._reload_body(folder, version), timeout_s=self.timeout_s
        )
        await self.reset_prefix_cache()


class VLLMBackend(_ServerClient):
    """One vLLM server (OpenAI-compatible, launched with the flags of `trace_rl.rollout.vllm_server`).

    Args:
        url: the server's base URL, e.g. "http://127.0.0.1:8000".
        stop_ids: the policy's end-of-turn token ids (used when SamplingParams.stop_ids is None).
        model: the served model name (default: the first of ``/v1/models``, read on first use together with
            its max_model_len).
        timeout_s: seconds a request may take before TimeoutError.

    Logprobs follow trace-rl's convention when the server runs with ``--logprobs-mode processed_logprobs``
    (`logprob_convention` says so; `VLLM_LOGPROBS_MODE`). Greedy sampling (temperature 0) asks the server for
    one completion and returns n copies of it (vLLM refuses n > 1 with greedy sampling). Weight reload:
    ``/collective_rpc`` ``reload_weights`` and ``/reset_prefix_cache`` (both need VLLM_SERVER_DEV_MODE=1).
    """

    kind = "vllm"
    logprob_convention = "log softmax(z/T) before top-p (vLLM processed_logprobs, top_p=1, top_k=0)"
    generate_path = "/v1/completions"
    reset_path = "/reset_prefix_cache"
    reload_path = "/collective_rpc"

    def __init__(
        self, url: str, *, stop_ids: Sequence[int], model: str | None = None, timeout_s: float = 600.0
    ):
        super().__init__(url, stop_ids=stop_ids, timeout_s=timeout_s)
        self.model = model

    def _reload_body(self, folder: str, version: int) -> dict[str, Any]:
        return {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}

    async def _describe(self) -> None:
        if self.model is not None and self.max_model_len is not None:
            return
        models = await request_json("GET", self.url + "/v1/models", timeout_s=30)
        first = models["data"][0]
        self.model = self.model or str(first["id"])
        if first.get("max_model_len"):
            self.max_model_len = int(first["max_model_len"])

    def _copies(self, sampling: SamplingParams, n: int) -> int:
        return n if sampling.temperature == 0 else 1

    def _request(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int, policy_version: int | None
    ) -> Any:
        assert self.model is not None
        return vllm_completion_request(
            prompt_token_ids,
            sampling,
            n,
            model=self.model,
            stop_ids=self.stop_ids,
            policy_version=policy_version,
            max_model_len=self.max_model_len,
        )

    def _parse(self, reply: Any, n: int) -> list[Completion]:
        return parse_vllm_completion(reply, n)


class SGLangBackend(_ServerClient):
    """One SGLang server (native API): ``/generate``; weight reload ``/update_weights_from_disk`` with the
    version, then ``/flush_cache`` (the radix cache). Arguments as `VLLMBackend`, plus ``max_model_len``
    (tokens; given, not read from the server: requests are capped to the room it leaves; None = no cap)."""

    kind = "sglang"
    logprob_convention = "log softmax(z/T) before top-p (SGLang default)"
    generate_path = "/generate"
    reset_path = "/flush_cache"
    reload_path = "/update_weights_from_disk"

    def _reload_body(self, folder: str, version: int) -> dict[str, Any]:
        return {"model_path": str(folder), "weight_version": str(version)}

    def _request(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int, policy_version: int | None
    ) -> Any:
        return sglang_generate_request(
            prompt_token_ids,
            sampling,
            n,
            stop_ids=self.stop_ids,
            policy_version=policy_version,
            max_model_len=self.max_model_len,
        )

    def _parse(self, reply: Any, n: int) -> list[Completion]:
        return parse_sglang_generate(reply, n)
