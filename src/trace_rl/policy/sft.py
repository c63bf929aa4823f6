"""Supervised warm start on gold trajectories (loss on model tokens only), step-based.

RESOURCES.md records that a from-scratch tiny policy sits at zero success until a sudden copy-learning jump
after roughly 1,000-1,500 optimizer steps, which depends on the step count (batch 8, peak LR 2e-3, about 1,900
steps), and that squeezing the learning-rate schedule so the rate is already low there keeps it stuck. The
schedule here is therefore warmup, a long constant plateau, and a decay over the last `decay_frac` of steps
only; `train_sft` calls an evaluation callback every `eval_every` steps so that the caller can verify the jump.

Because the jump's step moves with the thread count, the floating-point path and the task mix, a caller can pass
a ``stop`` rule: `train_sft` then ends at the first evaluation (at or after ``min_steps``) whose metrics satisfy
it, and ``steps`` is only a cap (`SFTResult.stopped` tells which happened).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.policy.chat import CHAT, IM_END
from trace_rl.policy.compiled import compile_failure, compiled, strict
from trace_rl.policy.logprobs import logprob_strategy
from trace_rl.policy.segments import segment_forward
from trace_rl.types import Task

_log = logging.getLogger(__name__)

PACKINGS = ("tree", "none")
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class SFTExample:
    """One tokenised gold trajectory: ids int64 (T,), loss_mask int8 (T,) (1 on assistant turn tokens)."""

    ids: npt.NDArray[np.int64]
    loss_mask: npt.NDArray[np.int8]


@dataclass(frozen=True)
class SFTConfig:
    """Warm-start schedule: optimizer steps, sequences per step, peak lr (warmup, constant, linear decay at the end),
    max tokens per sequence, evaluation period (steps) and seed. Raises ValueError on out-of-range values.
    """

    steps: int = 1900
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 50
    decay_frac: float = 0.15  # linear decay to min_lr_ratio * lr over the last 15% of steps
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    max_len: int = 1024
    eval_every: int = 250
    seed: int = 0
    min_steps: int = 0  # no evaluation (so no stop) before this step, except after the last one
    # "tree": a batch's examples go through the model as one row without padding, each attending to its own
    # tokens only (trace_rl.policy.segments); "none": one row per example, padded to the longest
    packing: str = "tree"
    # "bfloat16": the forward and backward under torch.autocast to bfloat16 (mixed precision: float32 weights,
    # optimizer state, loss and gradients); "float32": none
    dtype: str = "float32"
    # True: the forward and backward run through `torch.compile(model, dynamic=True)` (inductor: fused C++
    # kernels, symbolic shapes); the same loss up to rounding, a one-off compile of one to two minutes
    compile: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.packing not in PACKINGS:
            raise ValueError(f"packing must be one of {', '.join(PACKINGS)}, got {self.packing!r}")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if self.eval_every < 1 or self.min_steps < 0:
            raise ValueError("eval_every must be >= 1 and min_steps >= 0")
        if not (self.lr > 0 and 0 <= self.decay_frac <= 1 and 0 <= self.min_lr_ratio <= 1):
            raise ValueError("lr must be > 0, decay_frac and min_lr_ratio in [0, 1]")


@dataclass
class SFTResult:
    """Outcome of `train_sft`: steps run, final smoothed loss (nats/token), seconds (wall, all of it), the
    evaluation history (each entry with its ``eval_s``), the smoothed loss curve as [step, loss] pairs every 10
    steps (plotted by `trace-rl report`), whether a ``stop`` rule ended it before the step cap, and
    ``eval_seconds``: the wall seconds of ``seconds`` spent in the evaluation callback (the probes), so that
    ``seconds - eval_seconds`` is the optimizer steps' share."""

    steps: int
    final_loss: float
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    loss_curve: list[list[float]] = field(default_factory=list)
    stopped: bool = False
    eval_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_sft_examples(
    tasks: Sequence[Task],
    gold: Sequence[Sequence[str]],
    env_factory: Callable[[], Any],
    tokenizer: Any,
    system: str | None = None,
    *,
    render_tools: bool = True,
) -> list[SFTExample]:
    """Tokenise gold trajectories exactly as the agent loop lays out a rollout.

    For each task: the prompt (loss 0), then per gold turn its text + `<|im_end|>` (loss 1) and, unless the
    env ended the episode, the observation the env returns for that turn (loss 0). ``render_tools=False`` leaves
    the tool schemas out of the prompt (it must match the rollouts' `ChatCodec(render_tools=...)`). The observations come from
    running the env on the gold turns, so any env following the Env protocol works; the episodes run in up
    to 8 worker threads, so `env_factory` must return independent environments.

    Raises:
        ValueError: tasks and gold differ in length, or a gold trajectory is empty.
    """
    if len(tasks) != len(gold):
        raise ValueError(f"{len(tasks)} tasks but {len(gold)} gold trajectories")
    for task, turns in zip(tasks, gold, strict=True):
        if not turns:
            raise ValueError(f"task {task.id!r} has an empty gold trajectory")

    def replay(i: int) -> tuple[str, list[tuple[str, str | None]]]:
        """Run task i's gold turns through a fresh env: (first prompt, [(turn, observation or None)])."""
        env = env_factory()
        first = env.reset(tasks[i])
        steps: list[tuple[str, str | None]] = []
        for text in gold[i]:
            result = env.step(text)
            steps.append((text, None if result.done else result.observation))
            if result.done:
                break
        return first, steps

    # Tool calls (a sandboxed interpreter for math_python) dominate; they overlap well in threads. One env is
    # made here first so that lazily built shared resources (multihop_qa's BM25 index) are built once.
    if tasks:
        env_factory()
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(tasks)))) as pool:
        replays = list(pool.map(replay, range(len(tasks))))
    end = int(tokenizer.convert_tokens_to_ids(IM_END))
    out = []
    for task, (first, steps) in zip(tasks, replays, strict=True):
        tools = task.tools if render_tools else ()
        ids = list(tokenizer.encode(CHAT.prompt(first, tools, system), add_special_tokens=False))
        mask = [0] * len(ids)
        for text, observation in steps:
            model = [*list(tokenizer.encode(text, add_special_tokens=False)), end]
            ids += model
            mask += [1] * len(model)
            if observation is None:
                break
            obs = list(tokenizer.encode(CHAT.observation(observation), add_special_tokens=False))
            ids += obs
            mask += [0] * len(obs)
        out.append(SFTExample(np.asarray(ids, np.int64), np.asarray(mask, np.int8)))
    return out


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Learning rate at optimizer step `step` (0-based): linear warmup, constant, linear decay at the end."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    decay_start = cfg.steps - math.ceil(cfg.decay_frac * cfg.steps)
    if step < decay_start or cfg.steps == decay_start:
        return cfg.lr
    frac = (step - decay_start) / max(1, cfg.steps - decay_start)
    return cfg.lr * (1.0 - (1.0 - cfg.min_lr_ratio) * frac)


def batch_loss(
    model: Any,
    batch: Sequence[SFTExample],
    max_len: int,
    pad_id: int,
    *,
    packed: bool,
    dtype: str = "float32",
) -> Any:
    """Mean token cross-entropy (a scalar tensor, nats/token) of ``model`` over the loss-mask-1 tokens of
    ``batch``, each example cut to its first ``max_len`` tokens.

    ``packed=False``: one row per example, padded with ``pad_id`` to the longest. ``packed=True``: the examples as one
    row without padding, each attending to its own earlier tokens only (`trace_rl.policy.segments.segment_forward`;
    ``model``'s log-prob strategy must be "chains", `trace_rl.policy.logprobs`), so the matrix products compute the
    batch's real tokens and attention each example's own square; the same loss up to floating-point rounding.

    ``dtype="bfloat16"``: the model's forward runs under `torch.autocast` to bfloat16 on the model's device (its
    matrix products in bfloat16, float32 weights; the logits are upcast before the loss), so ``backward`` of
    the returned loss runs in the same mixed precision.

    Raises:
        ValueError: no loss-mask-1 token in the batch, or an unknown ``dtype``.
    """
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        return _batch_loss(model, batch, max_len, pad_id, packed=packed)


def _batch_loss(model: Any, batch: Sequence[SFTExample], max_len: int, pad_id: int, *, packed: bool) -> Any:
    import torch

    device = next(model.parameters()).device
    cut = [(e.ids[:max_len], e.loss_mask[:max_len]) for e in batch]
    if not any(m[1:].any() for _, m in cut):
        raise ValueError("no loss-mask-1 token to predict in the batch")
    if packed:
        logits, starts = segment_forward(model, [ids for ids, _ in cut])
        src, tgt = [], []
        for (ids, mask), start in zip(cut, starts, strict=True):
            at = np.flatnonzero(mask[1:] == 1)  # target token at+1 is predicted from position at
            src.append(start + at)
            tgt.append(ids[at + 1])
        picked = logits[torch.as_tensor(np.concatenate(src), device=device)]
        return torch.nn.functional.cross_entropy(
            _upcast(picked), torch.as_tensor(np.concatenate(tgt), device=device)
        )
    width = max(ids.size for ids, _ in cut)
    ids_t = torch.full((len(cut), width), pad_id, dtype=torch.long)
    mask_t = torch.zeros((len(cut), width), dtype=torch.bool)
    att = torch.zeros((len(cut), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(cut):
        ids_t[i, : ids.size] = torch.as_tensor(ids)
        mask_t[i, : ids.size] = torch.as_tensor(mask == 1)
        att[i, : ids.size] = 1
    ids_t, mask_t, att = ids_t.to(device), mask_t.to(device), att.to(device)
    logits = model(input_ids=ids_t, attention_mask=att).logits[:, :-1]
    target_mask = mask_t[:, 1:]
    return torch.nn.functional.cross_entropy(_upcast(logits[target_mask]), ids_t[:, 1:][target_mask])


def _upcast(logits: Any) -> Any:
    """Logits in float32 at least (a float64 model's stay float64)."""
    import torch

    return logits if logits.dtype == torch.float64 else logits.float()


def train_sft(
    model: Any,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    *,
    pad_id: int,
    evaluate: Callable[[int], dict[str, float]] | None = None,
    log: Callable[[str], None] | None = None,
    stop: Callable[[dict[str, float]], bool] | None = None,
) -> SFTResult:
    """Train `model` in place with AdamW on batches of examples (shuffled per epoch, seeded).

    Loss: mean token cross-entropy over loss-mask-1 tokens of the batch. `evaluate(step)` runs every
    `cfg.eval_every` steps from ``cfg.min_steps`` on and after the last one; its metrics go into the history. With ``stop``, training
    ends at the first evaluation at or after ``cfg.min_steps`` whose metrics (``step``, ``loss`` and
    evaluate's) satisfy ``stop(metrics)``.

    ``cfg.compile``: the SFT forward and backward run through ``torch.compile(model, dynamic=True)``
    (`trace_rl.policy.compiled`; the evaluation callback still sees ``model`` itself, eager); the module's weights
    are shared, so nothing else changes. docs/benchmarks.md measures it: with ``cfg.dtype="bfloat16"`` 0.428x the
    CPU time of an eager float32 step on the `multistep` warm start, one thread.

    Raises:
        ValueError: no examples, or no example with a model token within max_len.
        RuntimeError: ``cfg.compile`` and torch.compile cannot compile (no C++ compiler, an unsupported model,
            its recompile limit: `trace_rl.policy.compiled`): the message names ``policy.sft_compile``. Usually
            on the first step; a recompile for a new batch shape can fail after earlier steps trained the model.
    """
    import torch

    if not examples:
        raise ValueError("no SFT examples")
    data = [e for e in examples if e.loss_mask[1 : cfg.max_len].any()]
    if not data:
        raise ValueError(f"no example has a model token within max_len={cfg.max_len}")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    order: list[int] = []
    history: list[dict[str, float]] = []
    curve: list[list[float]] = []
    t0 = time.perf_counter()
    eval_seconds = 0.0
    loss_ema = float("nan")
    packed = cfg.packing == "tree"
    if packed and (strategy := logprob_strategy(model)).name != "chains":
        packed = False
        (log or _log.warning)(f"SFT packing=tree: {strategy.reason}; using padded batches")
    net = compiled(model) if cfg.compile else model
    model.train()
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            order += [int(i) for i in rng.permutation(len(data))]
        batch = [data[order.pop()] for _ in range(cfg.batch_size)]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        try:  # the backward too: inductor compiles it on its first call
            with strict() if cfg.compile else contextlib.nullcontext():
                loss = batch_loss(net, batch, cfg.max_len, pad_id, packed=packed, dtype=cfg.dtype)
                loss.backward()
        except Exception as err:
            if cfg.compile and (failure := compile_failure(err, "policy.sft_compile")):
                raise failure from err
            raise
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        loss_ema = value if math.isnan(loss_ema) else 0.95 * loss_ema + 0.05 * value
        last = step + 1 == cfg.steps
        if (step + 1) % 10 == 0 or last:
            curve.append([float(step + 1), loss_ema])
        due = (step + 1) % cfg.eval_every == 0 and step + 1 >= cfg.min_steps
        if evaluate is not None and (due or last):
            model.eval()
            t_eval = time.perf_counter()
            metrics = {"step": float(step + 1), "loss": loss_ema, **evaluate(step + 1)}
            metrics["eval_s"] = time.perf_counter() - t_eval
            eval_seconds += metrics["eval_s"]
            model.train()
            history.append(metrics)
            if log is not None:
                log(" ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
            if stop is not None and step + 1 >= cfg.min_steps and stop(metrics):
                model.eval()
                seconds = time.perf_counter() - t0
                return SFTResult(
                    step + 1, loss_ema, seconds, history, curve, stopped=True, eval_seconds=eval_seconds
                )
        elif log is not None and (step + 1) % 50 == 0:
            log(
                f"step={step + 1} loss={loss_ema:.4g} lr={lr_at(step, cfg):.3g} t={time.perf_counter() - t0:.0f}s"
            )
    model.eval()
    seconds = time.perf_counter() - t0
    return SFTResult(cfg.steps, loss_ema, seconds, history, curve, eval_seconds=eval_seconds)
