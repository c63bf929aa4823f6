"""The torch success predictor: backbone -> pooled features -> linear value head -> sigmoid. Imports torch.

Loss: weighted mean squared error between sigmoid outputs and the bottom-up targets (TRACE, arXiv 2606.11119,
predictor training). The value head starts with zero weights and bias logit(prior), so a fresh predictor
outputs exactly the prior (0.5) for every text: the cold start is a prior, not noise.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from trace_rl.predictor.base import DEFAULT_EPS, DEFAULT_PRIOR, validate_texts, validate_update
from trace_rl.predictor.capabilities import NO_CAPABILITIES
from trace_rl.predictor.serialize import MIN_CHARS, clip_token_ids

FloatArray = npt.NDArray[np.float64]
STATE_FORMAT = 1


@dataclass(frozen=True)
class PredictorConfig:
    """Hyper-parameters of a torch success predictor (defaults per backbone in :data:`PRESETS`).

    Attributes:
        lr: AdamW learning rate of the value head (and of the tiny backbone).
        backbone_lr: learning rate of the backbone (None = ``lr``).
        weight_decay: AdamW weight decay.
        max_tokens: token budget per text; longer texts keep their first ``head_tokens`` and their last
            ``max_tokens - head_tokens`` tokens.
        head_tokens: tokens kept from the start of a clipped text (the prompt).
        max_chars: serialization budget for :func:`serialize_anchor` matched to ``max_tokens``.
        predict_batch_size: texts per forward pass when scoring.
        train_micro_batch: texts per forward/backward pass in ``update`` (gradients are accumulated).
        grad_clip: global gradient-norm clip (0 = none).
        prior: estimate of a predictor that was never updated.
        eps: predictions are clipped to [eps, 1 - eps].
        seed: seed of the initial weights.
        device: torch device ("cpu", "cuda", "cuda:1"; None = cuda when available).
        dtype: backbone weights dtype for Hugging Face models ("float32" or "bfloat16").
    """

    lr: float = 1e-3
    backbone_lr: float | None = None
    weight_decay: float = 0.01
    max_tokens: int = 512
    head_tokens: int = 128
    max_chars: int = 508
    predict_batch_size: int = 64
    train_micro_batch: int = 32
    grad_clip: float = 1.0
    prior: float = DEFAULT_PRIOR
    eps: float = DEFAULT_EPS
    seed: int = 0
    device: str | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        checks = [
            (self.lr > 0, "lr must be > 0"),
            (self.backbone_lr is None or self.backbone_lr >= 0, "backbone_lr must be >= 0"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (self.max_tokens >= 4, "max_tokens must be >= 4"),
            (0 <= self.head_tokens <= self.max_tokens, "head_tokens must be in [0, max_tokens]"),
            (self.max_chars >= MIN_CHARS, f"max_chars must be >= {MIN_CHARS}"),
            (self.predict_batch_size >= 1, "predict_batch_size must be >= 1"),
            (self.train_micro_batch >= 1, "train_micro_batch must be >= 1"),
            (self.grad_clip >= 0, "grad_clip must be >= 0"),
            (0 < self.eps < 0.5, "eps must be in (0, 0.5)"),
            (self.eps <= self.prior <= 1 - self.eps, "prior must be in [eps, 1 - eps]"),
            (self.dtype in ("float32", "bfloat16"), "dtype must be 'float32' or 'bfloat16'"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"PredictorConfig: {message}")


#: Per-backbone defaults. Character budgets: bytes for "tiny" (one token per ASCII character), about four
#: characters per WordPiece/BPE token for the pretrained models.
PRESETS: dict[str, PredictorConfig] = {
    # micro-batches of 8 length-sorted texts: little padding, the cost of an update scales with real bytes
    "tiny": PredictorConfig(lr=1e-3, max_tokens=512, head_tokens=128, max_chars=508, train_micro_batch=8),
    "minilm": PredictorConfig(lr=1e-3, backbone_lr=5e-5, max_tokens=256, head_tokens=96, max_chars=1024),
    "hf": PredictorConfig(
        lr=1e-3,
        backbone_lr=1e-5,
        max_tokens=1024,
        head_tokens=256,
        max_chars=4096,
        predict_batch_size=16,
        train_micro_batch=8,
    ),
}


class TorchSuccessPredictor:
    """A :class:`~trace_rl.predictor.base.SuccessPredictor` over any backbone returning (B, H) features; no
    capability beyond it (`trace_rl.predictor.capabilities`: trained on buffered batches, one weight per node).

    Args:
        name: backbone name, kept in the state dict and checked on load.
        backbone: module ``(input_ids (B, L) int64, attention_mask (B, L) bool) -> (B, H) float32`` with an
            integer attribute ``hidden_size`` = H.
        encode: ``texts -> list of token id lists`` (special tokens included).
        pad_id: id used to pad batches (masked out).
        config: hyper-parameters.
    """

    capabilities = NO_CAPABILITIES

    def __init__(
        self,
        name: str,
        backbone: nn.Module,
        encode: Callable[[Sequence[str]], list[list[int]]],
        pad_id: int,
        config: PredictorConfig,
    ) -> None:
        self.name = name
        self.config = config
        self.prior = float(config.prior)
        self.max_chars = int(config.max_chars)
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._encode = encode
        self._pad_id = int(pad_id)
        hidden = int(backbone.hidden_size)  # type: ignore[arg-type]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.constant_(self.head.bias, math.log(self.prior / (1.0 - self.prior)))
        self.backbone = backbone.to(self.device)
        self.head = self.head.to(self.device)
        backbone_lr = config.lr if config.backbone_lr is None else config.backbone_lr
        groups = [{"params": list(self.head.parameters()), "lr": config.lr}]
        if backbone_lr > 0:
            groups.append(
                {"params": [p for p in backbone.parameters() if p.requires_grad], "lr": backbone_lr}
            )
        else:
            backbone.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay)
        self.num_updates = 0
        self._timing = {"predict_calls": 0.0, "predict_texts": 0.0, "predict_seconds": 0.0}
        self._timing |= {"update_steps": 0.0, "update_texts": 0.0, "update_seconds": 0.0}

    # ------------------------------------------------------------------ state
    @property
    def is_warm(self) -> bool:
        """False until the first :meth:`update`; before it every estimate equals ``prior``."""
        return self.num_updates > 0

    @property
    def timing(self) -> dict[str, float]:
        """Cumulative wall-clock of scoring and updates: calls, texts, seconds (for the trainer's logs)."""
        return dict(self._timing)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.backbone.parameters()) + sum(
            p.numel() for p in self.head.parameters()
        )

    # ------------------------------------------------------------------ batching
    def _batch(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [
            clip_token_ids(x, self.config.max_tokens, self.config.head_tokens) for x in self._encode(texts)
        ]
        length = max(1, max(len(x) for x in ids))
        input_ids = torch.full((len(ids), length), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), length), dtype=torch.bool)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        return input_ids.to(self.device), mask.to(self.device)

    def _probabilities(self, texts: Sequence[str]) -> torch.Tensor:
        input_ids, mask = self._batch(texts)
        features = self.backbone(input_ids, mask)
        return torch.sigmoid(self.head(features.float()).squeeze(-1))

    # ------------------------------------------------------------------ API
    def predict(self, texts: Sequence[str]) -> FloatArray:
        """Success estimates for serialized anchors.

        Args:
            texts: n strings (from :func:`serialize_anchor`).

        Returns:
            float64 (n,) in [eps, 1 - eps], strictly inside (0, 1); ``prior`` everywhere before the first update.

        Raises:
            ValueError: ``texts`` is a single string or holds a non-string.
        """
        items = validate_texts(texts)
        start = time.perf_counter()
        out = np.empty(len(items), dtype=np.float64)
        order = np.argsort(
            [len(t) for t in items], kind="stable"
        )  # similar lengths share a batch: less padding
        bs = self.config.predict_batch_size
        self.backbone.eval()
        with torch.inference_mode():
            for lo in range(0, len(items), bs):
                idx = order[lo : lo + bs]
                probs = self._probabilities([items[i] for i in idx])
                out[idx] = probs.double().cpu().numpy()
        np.clip(out, self.config.eps, 1.0 - self.config.eps, out=out)
        self._timing["predict_calls"] += 1
        self._timing["predict_texts"] += len(items)
        self._timing["predict_seconds"] += time.perf_counter() - start
        return out

    def update(
        self, texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        """One AdamW step on  L = sum_i w_i (sigmoid(f(x_i)) - y_i)^2 / sum_i w_i  (TRACE predictor loss: MSE).

        The batch is split into micro-batches of ``train_micro_batch`` texts with gradient accumulation, so the
        step is the same whatever the micro-batch size.

        Args:
            texts: n serialized anchors.
            targets: (n,) success rates in [0, 1] (mean leaf reward below each node).
            weights: optional (n,) non-negative loss weights with a positive sum (default all 1).

        Returns:
            {"loss": weighted MSE before the step, "grad_norm": gradient norm before clipping, "n": n,
            "seconds": wall-clock of the step}.

        Raises:
            ValueError: see :func:`trace_rl.predictor.base.validate_update`.
        """
        items, y, w = validate_update(texts, targets, weights)
        start = time.perf_counter()
        self.backbone.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_w = float(w.sum())
        loss_sum = 0.0
        mb = self.config.train_micro_batch
        order = np.argsort([len(t) for t in items], kind="stable")
        for lo in range(0, len(items), mb):
            idx = order[lo : lo + mb]
            probs = self._probabilities([items[i] for i in idx])
            yt = torch.as_tensor(y[idx], dtype=torch.float32, device=self.device)
            wt = torch.as_tensor(w[idx], dtype=torch.float32, device=self.device)
            loss = (wt * (probs - yt) ** 2).sum() / total_w
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.detach())
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        self.optimizer.step()
        self.num_updates += 1
        seconds = time.perf_counter() - start
        self._timing["update_steps"] += 1
        self._timing["update_texts"] += len(items)
        self._timing["update_seconds"] += seconds
        return {"loss": loss_sum, "grad_norm": grad_norm, "n": float(len(items)), "seconds": seconds}

    def state_dict(self) -> dict[str, Any]:
        """{"format", "name", "num_updates", "config", "backbone", "head", "optimizer"} (tensors on the CPU)."""
        return {
            "format": STATE_FORMAT,
            "name": self.name,
            "num_updates": self.num_updates,
            "config": asdict(self.config),
            "backbone": {k: v.detach().cpu().clone() for k, v in self.backbone.state_dict().items()},
            "head": {k: v.detach().cpu().clone() for k, v in self.head.state_dict().items()},
            # deep copy: torch's optimizer state_dict shares its moment tensors with the live optimizer
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore weights, optimizer state and update count from :meth:`state_dict`.

        Raises:
            ValueError: missing keys, another format version, or a state from a different backbone.
        """
        missing = {"format", "name", "num_updates", "backbone", "head", "optimizer"} - set(state)
        if missing:
            raise ValueError(f"predictor state lacks {sorted(missing)}")
        if state["format"] != STATE_FORMAT:
            raise ValueError(f"predictor state format {state['format']!r} is not {STATE_FORMAT}")
        if state["name"] != self.name:
            raise ValueError(f"predictor state is for backbone {state['name']!r}, not {self.name!r}")
        try:
            self.backbone.load_state_dict(state["backbone"])
            self.head.load_state_dict(state["head"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError) as exc:
            raise ValueError(f"predictor state does not fit this model: {str(exc).splitlines()[0]}") from None
        self.num_updates = int(state["num_updates"])


def build_torch_predictor(name_or_path: str, **overrides: Any) -> TorchSuccessPredictor:
    """Build a predictor from "tiny", "minilm" or a local Hugging Face folder (see ``build_predictor``)."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"predictor name must be a non-empty string; got {name_or_path!r}")
    from trace_rl.predictor import backbones

    encoder_kwargs = {
        k: overrides.pop(k) for k in ("d_model", "n_layers", "n_heads", "d_ff", "patch") if k in overrides
    }
    pooling = overrides.pop("pooling", None)
    key = name_or_path if name_or_path in ("tiny", "minilm") else "hf"
    try:
        config = replace(PRESETS[key], **overrides)
    except TypeError as exc:
        raise ValueError(f"unknown predictor option: {exc}") from None
    if encoder_kwargs and key != "tiny":
        raise ValueError(f"options {sorted(encoder_kwargs)} only apply to the 'tiny' predictor")
    if pooling is not None and key == "tiny":
        raise ValueError("option pooling only applies to Hugging Face predictors")
    if key == "tiny":
        tokenizer = backbones.ByteTokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            encoder = backbones.TinyEncoder(max_len=config.max_tokens, **encoder_kwargs)
        return TorchSuccessPredictor("tiny", encoder, tokenizer.encode, tokenizer.pad_id, config)
    if key == "minilm":
        backbone, hf_tok = backbones.load_hf(backbones.minilm_path(), pooling=pooling or "mean")
        return TorchSuccessPredictor("minilm", backbone, hf_tok.encode, hf_tok.pad_id, config)
    backbone, hf_tok = backbones.load_hf(name_or_path, pooling=pooling, dtype=config.dtype)
    name = "hf:" + os.path.basename(os.path.normpath(name_or_path))  # stable when the folder moves
    return TorchSuccessPredictor(name, backbone, hf_tok.encode, hf_tok.pad_id, config)
