"""The training run: set-up of a run's parts, the step loop, and `train` (new run, resume or overwrite).

The run's other jobs live next to it: the supervised warm start in `trace_rl.train.warm_start`, the held-out
evaluation in `trace_rl.train.evaluation`, checkpoints in `trace_rl.train.checkpoint`, and the run folder (its
layout, metrics.jsonl, config.json, the CLI's helpers) in `trace_rl.train.rundir`, the data order and the timed env
factory in `trace_rl.train.data`, loading the policy (checked against the config), its device and optimizer in
`trace_rl.train.run_policy`.
Names they own that were importable from here before the split still are (`read_metrics`, `summarize`,
`resume_config`, `save_probe_outcomes`, ...), but are not this module's `__all__`.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_rl.errors import UserError
from trace_rl.train.checkpoint import KEEP_CHECKPOINTS as KEEP_CHECKPOINTS
from trace_rl.train.checkpoint import latest_checkpoint as latest_checkpoint
from trace_rl.train.checkpoint import load_checkpoint, resumable_checkpoint, save_checkpoint
from trace_rl.train.config import ConfigError, TrainConfig, budget_shape
from trace_rl.train.data import DataCursor, TimedEnvFactory
from trace_rl.train.evaluation import evaluate_held_out
from trace_rl.train.provenance import PROVENANCE_KEY, resolved_block, run_provenance
from trace_rl.train.run_policy import policy_device as policy_device
from trace_rl.train.run_policy import policy_optimizer
from trace_rl.train.rundir import (
    RUN_DIRS,
    RUN_FILES,
    append_jsonl,
    clear_run,
    progress_bar,
    tb_write,
    tensorboard,
)
from trace_rl.train.rundir import check_same_config as check_same_config
from trace_rl.train.rundir import read_metrics as read_metrics
from trace_rl.train.rundir import resume_config as resume_config
from trace_rl.train.rundir import summarize as summarize
from trace_rl.train.warm_start import PROBE_FILE, probe_charge, warm_start_policy, warm_start_predictor
from trace_rl.train.warm_start import WarmStartError as WarmStartError
from trace_rl.train.warm_start import save_probe_outcomes as save_probe_outcomes

if TYPE_CHECKING:
    from trace_rl.predictor.capabilities import StateAware

UPDATE_STREAM = 1
"""The policy update's minibatch order draws from ``default_rng([seed, UPDATE_STREAM])``, apart from the stream
(``default_rng(seed)``) that samples prompts and allocates, so the number of rows a step trains on never changes
which prompts later steps see."""


class Trainer:
    """Owns the policy, engine, predictor and data for one run; `run()` executes the remaining steps."""

    def __init__(
        self, cfg: TrainConfig, out: str | Path, *, resume: bool = False, log: Callable[[str], None] = print
    ):
        self.cfg = cfg
        self.out = Path(out)
        self.log = log
        self.resume = resume
        self.start_step = 1
        # rollout-equivalents spent against total_budget: the steps done, plus the probe a run reading it pays for
        self.budget_spent = 0.0

    # ---------------------------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        from trace_rl.allocation import AdaptiveState, get_method
        from trace_rl.envs import make_env
        from trace_rl.predictor import build_predictor
        from trace_rl.predictor.capabilities import as_preparable, as_state_aware
        from trace_rl.predictor.online import OnlineConfig, OnlineTrainer
        from trace_rl.rollout.agent import ChatCodec
        from trace_rl.rollout.backends import SamplingParams
        from trace_rl.train.run_policy import load_run_policy
        from trace_rl.train.serving import open_backend
        from trace_rl.train.step import StepParts
        from trace_rl.train.update import policy_update

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        _quiet_transformers()
        _seed_and_threads(cfg)
        self.method = get_method(cfg.method)
        self.shape = budget_shape(cfg)
        self.rng = np.random.default_rng(cfg.seed)  # prompt sampling and allocation
        self.update_rng = np.random.default_rng([cfg.seed, UPDATE_STREAM])  # minibatch order
        env_kwargs = {**cfg.env.env_kwargs, "max_turns": cfg.env.max_turns}
        self._load_tasks()
        self.cursor = DataCursor(len(self.tasks), cfg.seed)
        self.env_factory = TimedEnvFactory(lambda: make_env(cfg.env.name, **env_kwargs))

        ckpt = resumable_checkpoint(self.out, self.log) if self.resume else None
        if self.resume and ckpt is None:
            self.log(f"no checkpoint under {self.out}/checkpoints: starting from step 1")
            (self.out / "metrics.jsonl").unlink(missing_ok=True)  # its steps are redone
        self.device = policy_device(cfg)
        self.policy = load_run_policy(cfg, ckpt / "policy" if ckpt is not None else cfg.policy.name)
        self.policy.model.to(self.device)
        if ckpt is None and cfg.policy.sft_steps > 0:
            self._warm_start()
        self.pad_id = int(self.policy.tokenizer.pad_token_id or 0)
        self.serving = open_backend(cfg, self.policy, self.out, self.log)  # local engine or vLLM servers
        self.engine = self.serving.backend
        self.codec = ChatCodec(self.policy.tokenizer, render_tools=cfg.policy.render_tools)
        self.sampling = SamplingParams(
            max_new_tokens=cfg.sampling.max_new_tokens,
            temperature=cfg.sampling.temperature,
            top_p=cfg.sampling.top_p,
            seed=cfg.seed,
        )
        self.optimizer = policy_optimizer(self.policy.model, cfg)
        history = (  # the convex predictors' outcome window (their section's variant holds it)
            {
                "history_window": cfg.predictor.history_window or None,
                "history_decay": cfg.predictor.history_decay,
            }
            if cfg.predictor.variant == "convex"
            else {}
        )
        self.predictor = build_predictor(
            cfg.predictor.name, lr=cfg.predictor.lr, seed=cfg.seed, device=self.device, **history
        )
        self.online = OnlineTrainer(
            self.predictor,
            OnlineConfig(
                batch_size=cfg.predictor.batch_size,
                prefix_share=cfg.predictor.prefix_share,
                buffer_steps=cfg.predictor.buffer_steps,
                updates_per_step=cfg.predictor.updates,
                seed=cfg.seed,
            ),
        )
        if (stateful := as_state_aware(self.predictor)) is not None:
            self._attach_policy_state(stateful)  # the live policy as a frozen critic backbone
        if (preparable := as_preparable(self.predictor)) is not None:
            # frozen-encoder features of the training prompts, once (not inside each step)
            from trace_rl.predictor import serialize_anchor

            limit = self.predictor.max_chars
            seconds = preparable.prepare(
                [serialize_anchor(t.prompt, [], max_chars=limit) for t in self.tasks]
            )
            if seconds > 0.5:
                self.log(f"predictor: embedded {len(self.tasks)} training prompts in {seconds:.1f}s")
        self.predictor_warm_record: dict[str, Any] | None = None
        policy_dir = ckpt / "policy" if ckpt is not None else self.out / "sft" / "policy"
        if ckpt is None and not (policy_dir / PROBE_FILE).exists():
            policy_dir = Path(cfg.policy.name)  # a warm-started policy given by path (trace-rl compare)
        self.probe_charge: dict[str, Any] | None = None
        if ckpt is None and cfg.predictor.warm_start and (policy_dir / PROBE_FILE).exists():
            self._warm_predictor(policy_dir / PROBE_FILE)
        self.settings = cfg.spec.resolved_update(cfg.env.name)  # "auto" resolved: provenance records it
        self.ref_model = self._reference_model(ckpt) if cfg.optim.kl_coef > 0 else None

        def update(trees: list[Any]) -> dict[str, float]:
            stats = policy_update(
                self.policy.model,
                self.optimizer,
                trees,
                self.settings,
                pad_id=self.pad_id,
                rng=self.update_rng,
                ref_model=self.ref_model,
                temperature=cfg.sampling.temperature,
            )
            self.serving.sync(self.policy)  # the backend generates from the new weights from now on
            return stats

        self.parts = StepParts(
            backend=self.engine,
            env_factory=self.env_factory,
            codec=self.codec,
            sampling=self.sampling,
            predictor=self.predictor,
            online=self.online,
            update_policy=update,
            spec=cfg.spec,
            adaptive=AdaptiveState() if self.method.adaptive else None,
        )
        if ckpt is not None:
            self._load_checkpoint(ckpt)
        self._write_config()

    def _write_config(self) -> None:
        """config.json: the config and its provenance block (`trace_rl.train.provenance.run_provenance`). A resumed
        run keeps the block it started with (its warm start and probe charge) and lists the code commits that
        continued it under ``resumed_code_commits``."""
        path = self.out / "config.json"
        block = {
            **run_provenance(self.cfg, self.out, probe_charge=self.probe_charge),
            "resolved": resolved_block(self),
        }
        if self.resume and path.exists():
            try:
                old = json.loads(path.read_text()).get(PROVENANCE_KEY)
            except ValueError:
                old = None
            if isinstance(old, dict):
                resumed = list(old.get("resumed_code_commits") or [])
                resumed.append({"code_commit": block["code_commit"], "code_dirty": block["code_dirty"]})
                block = {**old, "resumed_code_commits": resumed}
        path.write_text(json.dumps({**self.cfg.to_dict(), PROVENANCE_KEY: block}, indent=2))

    def _reference_model(self, ckpt: Path | None) -> Any:
        """The frozen reference policy of ``optim.kl_coef``'s k3 penalty: the policy RL starts from (after the warm
        start), as in GRPO (arXiv 2402.03300, Eq. 3) and verl's ``use_kl_loss``. A resumed run reloads that start
        point (out/sft/policy, else ``policy.name``), not the checkpoint's weights."""
        import copy

        from trace_rl.policy import load_policy

        if ckpt is None:
            ref = copy.deepcopy(self.policy.model)
        else:
            start = self.out / "sft" / "policy"
            name = str(start) if start.exists() else self.cfg.policy.name
            ref = load_policy(name, seed=self.cfg.seed).model.to(self.device)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    def _attach_policy_state(self, predictor: StateAware) -> None:
        """Give a state-aware predictor (``ngram+minilm+state``, ``state-head``) the hidden state of this run's
        policy object (its current weights at every call: the feature follows the policy as it trains) and the
        token contexts of every training prompt (the probe's and the steps' prompt-level texts); the step
        registers anchors and tree nodes as it creates them (docs/predictor.md#the-state-aware-predictor)."""
        from trace_rl.predictor import serialize_anchor
        from trace_rl.predictor.policy_state import PolicyStateEncoder

        predictor.attach_state(PolicyStateEncoder(self.policy.model, pad_id=self.pad_id))
        limit = self.predictor.max_chars
        env = self.env_factory()
        texts = [serialize_anchor(t.prompt, [], max_chars=limit) for t in self.tasks]
        ids = [self.codec.prompt_ids(env.reset(t), t.tools) for t in self.tasks]
        predictor.register_contexts(texts, ids)

    def prepare_policy_only(self) -> Path:
        """Load the training tasks and the policy and run the warm start into out/sft/policy (for compare)."""
        from trace_rl.train.run_policy import load_run_policy

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        # as `setup`: the warm start's numbers depend on the thread count (float reduction order), so a compare's
        # warm start must run at the config's ``threads`` to equal the one `train` builds from the same config
        _seed_and_threads(cfg)
        self._load_tasks()
        self.policy = load_run_policy(cfg, cfg.policy.name)
        self.policy.model.to(policy_device(cfg))
        self._warm_start()
        return self.out / "sft" / "policy"

    # ----------------------------------------------------------------------- warm start, checkpoints, eval
    def _load_tasks(self) -> None:
        """The run's held-out tasks, RL pool and warm-start tasks (`trace_rl.train.hygiene.run_tasks`): pairwise
        disjoint in prompt text, and the same for every run ``seed``."""
        from trace_rl.train.hygiene import run_tasks

        cfg = self.cfg
        splits = run_tasks(cfg)
        self.tasks = list(splits.rl_pool)
        self.sft_tasks = list(splits.sft)
        self.eval_tasks = list(splits.held_out) if cfg.eval_every else []
        if splits.rl_dropped or splits.sft_dropped:
            self.log(
                f"data: {splits.rl_dropped} training tasks left out of the RL pool (held-out prompts), "
                f"{splits.sft_dropped} warm-start tasks left out (held-out or RL-pool prompts)"
            )

    def _warm_start(self) -> None:
        """The supervised warm start (`trace_rl.train.warm_start.warm_start_policy`) of this run's policy."""
        warm_start_policy(self.cfg, self.policy, self.sft_tasks, self.tasks, self.out, self.log)

    def _warm_predictor(self, path: Path) -> None:
        """Train the predictor on the warm start's probe outcomes (`warm_start_predictor`). A method that reads
        the predictor (``uses_predictor``) pays for the probe: the run starts with its rollouts spent
        (`trace_rl.train.warm_start.probe_charge`), so its RL budget is ``total_budget`` minus the probe."""
        charged = bool(self.method.uses_predictor)
        self.predictor_warm_record = warm_start_predictor(
            self.predictor, self.online, path, self.log, charged=charged
        )
        if charged:
            self.probe_charge = probe_charge(path)
            self.budget_spent = float(self.probe_charge["budget"])
            cfg = self.cfg
            if cfg.total_budget > 0 and cfg.total_budget - self.budget_spent < self.shape.total - 1e-9:
                raise ConfigError(
                    f"total_budget {cfg.total_budget:g} leaves less than one step's budget ({self.shape.total:g}) "
                    f"after the warm start's probe ({self.budget_spent:g} rollouts charged to method "
                    f"{cfg.method}); raise total_budget or lower policy.sft_probe_prompts"
                )
            self.log(
                f"probe charge: {self.probe_charge['rollouts']} rollouts of the warm start's RL-pool probe count "
                f"against this run's budget (method {self.cfg.method} reads the predictor)"
            )

    def save_checkpoint(self, step: int, *, finished: bool = False) -> Path:
        """Atomically write checkpoints/step_<step>/ (`trace_rl.train.checkpoint.save_checkpoint`)."""
        return save_checkpoint(
            self.out,
            step,
            cfg=self.cfg,
            policy=self.policy,
            optimizer=self.optimizer,
            predictor=self.predictor,
            online=self.online,
            cursor=self.cursor,
            rng=self.rng,
            update_rng=self.update_rng,
            budget_spent=self.budget_spent,
            finished=finished,
            adaptive=self.parts.adaptive,
        )

    def _load_checkpoint(self, ckpt: Path) -> None:
        state = load_checkpoint(
            ckpt,
            self.out,
            optimizer=self.optimizer,
            predictor=self.predictor,
            online=self.online,
            cursor=self.cursor,
            rng=self.rng,
            update_rng=self.update_rng,
            adaptive=self.parts.adaptive,
        )
        self.start_step = int(state["step"]) + 1
        self.budget_spent = float(state.get("budget_spent", 0.0))
        self.log(f"resumed from {ckpt} at step {self.start_step}")

    def evaluate(self, step: int) -> dict[str, Any]:
        """pass@1 on the fixed held-out split (`trace_rl.train.evaluation.evaluate_held_out`)."""
        return evaluate_held_out(self.cfg, self.engine, self.env_factory, self.codec, self.eval_tasks, step)

    # ------------------------------------------------------------------------------------------------ loop
    def run(self, *, progress: bool = True) -> list[dict[str, Any]]:
        try:
            return self._run(progress=progress)
        finally:  # launched servers never outlive the run (error, interrupt, SIGTERM)
            serving = getattr(self, "serving", None)
            if serving is not None:
                serving.close()

    def _run(self, *, progress: bool = True) -> list[dict[str, Any]]:
        from trace_rl.train.step import training_step

        self.setup()
        cfg = self.cfg
        metrics_path = self.out / "metrics.jsonl"
        writer = tensorboard(self.out / "tb", purge_step=self.start_step)
        records: list[dict[str, Any]] = []
        bar = progress_bar(self.start_step, cfg.steps, progress)
        if self.start_step == 1 and self.predictor_warm_record is not None:
            append_jsonl(metrics_path, self.predictor_warm_record)
        if self.start_step == 1 and self.eval_tasks:
            rec = self.evaluate(0)
            append_jsonl(metrics_path, rec)
            tb_write(writer, rec, 0)
        spent = self.budget_spent
        for step in range(self.start_step, cfg.steps + 1):
            left = cfg.total_budget - spent if cfg.total_budget > 0 else None
            # resumed from a checkpoint without the finished mark: never start a step the budget left cannot pay
            if left is not None and left < self.shape.total - 1e-9:
                self.log(
                    f"total_budget {cfg.total_budget:g} leaves {left:g} after step {step - 1}, less than one "
                    f"step's budget ({self.shape.total:g}): run finished, step {step} not started"
                )
                break
            pool = [self.tasks[i] for i in self.cursor.take(cfg.env.pool_size)]
            self.serving.begin_step()
            record, _ = training_step(
                step, pool, self.method, self.shape, self.parts, self.rng, budget_left=left
            )
            spent += record["budget_spent"]
            self.budget_spent = spent
            record["kind"] = "train"
            record["budget_spent_total"] = spent
            record.update(self.serving.step_metrics())
            append_jsonl(metrics_path, record)
            tb_write(writer, record, step)
            records.append(record)
            # the run's total budget: stop once the next step could not be paid in full
            last = step == cfg.steps or (
                cfg.total_budget > 0 and cfg.total_budget - spent < self.shape.total - 1e-9
            )
            if self.eval_tasks and cfg.eval_every and (step % cfg.eval_every == 0 or last):
                rec = self.evaluate(step)
                append_jsonl(metrics_path, rec)
                tb_write(writer, rec, step)
            if step % cfg.checkpoint_every == 0 or last:
                self.save_checkpoint(step, finished=last)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    eff=f"{record['effective_ratio']:.2f}",
                    succ=f"{record['success_rate']:.2f}",
                    skip=f"{record['skip_rate']:.2f}",
                    spent=f"{record['budget_spent']:.0f}",
                )
            else:
                self.log(
                    f"step {step}/{cfg.steps} effective_ratio={record['effective_ratio']:.3f} "
                    f"success={record['success_rate']:.3f} spent={record['budget_spent']:.1f} wall={record['wall_s']:.1f}s"
                )
            if last:
                if step < cfg.steps:
                    self.log(
                        f"total_budget {cfg.total_budget:g} spent ({spent:g}) after step {step}: run finished"
                    )
                break
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
        return records


def _seed_and_threads(cfg: TrainConfig) -> None:
    """Seed torch's and Python's global generators with ``cfg.seed`` and set torch's CPU threads to ``cfg.threads``
    (0: the cores, at most 4): the process state every entry point (`Trainer.setup`, `Trainer.prepare_policy_only`)
    starts from."""
    import torch

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    torch.set_num_threads(cfg.threads or max(1, min(os.cpu_count() or 1, 4)))


def _quiet_transformers() -> None:
    """No per-save progress bars or load reports from transformers in the training log."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def train(
    cfg: TrainConfig,
    out: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    overwrite: bool = False,
) -> list[dict[str, Any]]:
    """Run (or resume) training; returns this invocation's step records.

    Raises:
        ValueError: ``out`` already holds a run (metrics.jsonl or checkpoints) and neither ``resume`` nor
            ``overwrite`` is set: a new run would interleave its records with the old ones.
    """
    root = Path(out)
    if overwrite and not resume:
        policy = Path(cfg.policy.name)
        if policy.exists() and any(
            policy.resolve().is_relative_to((root / d).resolve()) for d in (*RUN_DIRS, *RUN_FILES)
        ):
            raise UserError(
                f"--overwrite would delete policy.name={cfg.policy.name}, which lies in the run being replaced; "
                "copy it out of the folder first"
            )
        clear_run(root)
    elif not resume and ((root / "metrics.jsonl").exists() or (root / "checkpoints").exists()):
        raise UserError(
            f"{root} already holds a run; continue it with --resume {root}, choose another --out, "
            "or pass --overwrite to replace it"
        )
    return Trainer(cfg, out, resume=resume).run(progress=progress)


# The ``from ... import X as X`` names above are re-exports: importable from here before the run's jobs moved to
# their own modules (docs/training.md), kept for outside code; the repository imports each from its owner.
__all__ = ["UPDATE_STREAM", "Trainer", "policy_device", "train"]
