"""The policy's forward through ``torch.compile`` (the settings ``policy.sft_compile`` and ``optim.compile``).

`compiled` wraps a model once (``torch.compile(model, dynamic=True)``: inductor's fused C++ kernels on a CPU, one
graph for the varying batch shapes of the warm start and the policy update) and returns the same wrapper for the
same model object afterwards, so a run compiles once, not once per step. The wrapper shares the model's weights:
training through it trains the model, and everything else (the rollout engine, the probes, checkpoints) keeps
using the eager model. `compile_failure` turns a compile that cannot happen (no C++ compiler, an unsupported
model) into an error naming the setting, since a setting that cannot take effect must not be silently ignored.
"""

from __future__ import annotations

import weakref
from typing import Any

_COMPILED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def compiled(model: Any) -> Any:
    """``torch.compile(model, dynamic=True)``, made once per model object (later calls return the same one)."""
    import torch

    if model not in _COMPILED:
        _COMPILED[model] = torch.compile(model, dynamic=True)
    return _COMPILED[model]


def compile_failure(err: BaseException, setting: str) -> RuntimeError | None:
    """The error to raise for ``err``, raised while running a model compiled under ``setting``: a RuntimeError
    naming the setting and the compiler's own first line when ``err`` comes from torch.compile (dynamo or a
    backend such as inductor), None for any other error (re-raise it as it is)."""
    import torch

    if not isinstance(err, torch._dynamo.exc.TorchDynamoException):
        return None
    cause = getattr(err, "inner_exception", err)  # a backend's failure (inductor) comes wrapped
    first = (str(cause).splitlines() or [""])[0]
    return RuntimeError(
        f"{setting}: torch.compile could not compile the policy's forward ({type(cause).__name__}: {first}); "
        f"set {setting}=false"
    )
