"""Shared fixtures: one tiny policy per test session (random init, seeded) and torch kept to one thread."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from trace_rl.policy import load_policy

    return load_policy("tiny", seed=1)


@pytest.fixture
def float64_norms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3's and Llama's RMSNorm in the input's dtype (at least float32) instead of always float32, so that a
    float64 model is float64 throughout: its gradients then agree to float64 rounding, not to about 1e-7."""
    torch = pytest.importorskip("torch")
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3

    def forward(self, hidden):  # type: ignore[no-untyped-def]
        x = hidden.to(torch.promote_types(hidden.dtype, torch.float32))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden.dtype)

    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", forward)
    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)


@pytest.fixture
def no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.compile`` as it behaves where inductor cannot build: it returns a module whose first call raises
    ``BackendCompilerFailed`` ("no C++ compiler found"), as a missing compiler does."""
    torch = pytest.importorskip("torch")

    class Uncompilable(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.config = getattr(inner, "config", None)  # as torch.compile's wrapper reads the model's

        def forward(self, *_a: object, **_k: object) -> None:
            raise torch._dynamo.exc.BackendCompilerFailed(print, RuntimeError("no C++ compiler found"), None)

    monkeypatch.setattr(torch, "compile", lambda model, **_: Uncompilable(model))
