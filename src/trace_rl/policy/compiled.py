"""The policy's forward through ``torch.compile`` (the settings ``policy.sft_compile`` and ``optim.compile``).

`compiled` wraps a model in ``torch.compile(model, dynamic=True)`` (inductor's fused C++ kernels on a CPU, shapes
symbolic so the varying batches of the warm start and the policy update share a few graphs). The wrapper shares
the model's parameters: training through it trains the model, and everything else (the rollout engine, the probes,
the reference model, checkpoints) keeps using the eager model. Dynamo keeps the compiled code in its own cache,
guarded on the module, so a new wrapper of the same model (one per update) reuses it; no wrapper is cached here
(a cache would keep every compiled model alive).

`strict` and `compile_failure` make a compile that cannot happen an error naming the setting (a setting that cannot
take effect must not be silently ignored): a backend that fails (no C++ compiler, an unsupported model), in the
forward or in the backward that inductor compiles on first use, and dynamo's recompile limit, past which it would
quietly run the model eager. Errors of the input or the model itself (eager fails too) pass through unchanged.
"""

from __future__ import annotations

from typing import Any

RECOMPILE_LIMIT = 64
"""Graphs dynamo may build per model under `strict` (its default is 8): new batch shapes and the packed/padded
forwards each may need one; past the limit a compiled run fails instead of running eager."""


def compiled(model: Any) -> Any:
    """``torch.compile(model, dynamic=True)``: a module sharing ``model``'s parameters. Nothing compiles here:
    dynamo compiles on the first call (run it under `strict`)."""
    import torch

    return torch.compile(model, dynamic=True)


def strict() -> Any:
    """A context for calls of a `compiled` model (forward and backward): dynamo may build up to `RECOMPILE_LIMIT`
    graphs and raises past them (``FailOnRecompileLimitHit``) instead of falling back to eager."""
    import torch

    return torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True)


def compile_failure(err: BaseException, setting: str) -> RuntimeError | None:
    """The error to raise for ``err``, raised while running a model compiled under ``setting``: a RuntimeError
    naming the setting and the compiler's own first line when torch.compile could not compile (a backend such as
    inductor failed, dynamo failed internally, or the recompile limit was hit); None for any other error, e.g. a
    wrong input shape, which eager raises too (re-raise it as it is)."""
    import torch

    exc = torch._dynamo.exc
    if isinstance(err, exc.FailOnRecompileLimitHit):
        return RuntimeError(
            f"{setting}: torch.compile hit its recompile limit ({RECOMPILE_LIMIT} graphs; the forward would "
            f"run eager from here); set {setting}=false"
        )
    if not isinstance(err, exc.BackendCompilerFailed | exc.InternalTorchDynamoError):
        return None
    cause = getattr(err, "inner_exception", err)  # a backend's failure (inductor) comes wrapped
    first = (str(cause).splitlines() or [""])[0]
    return RuntimeError(
        f"{setting}: torch.compile could not compile the policy's forward or backward ({type(cause).__name__}: "
        f"{first}); set {setting}=false"
    )
