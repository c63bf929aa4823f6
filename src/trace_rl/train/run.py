"""The training run: set-up, warm start, the step loop, evaluation, logging, checkpoints and resume.

Output folder layout::

    DIR/config.json                  the resolved config
    DIR/metrics.jsonl                one record per training step (and "eval" records), each step exactly once
    DIR/tb/                          TensorBoard event files
    DIR/sft/                         the warm-started policy (when policy.sft_steps > 0) and sft.json
    DIR/checkpoints/step_<N>/        policy, optimizer, predictor, RNG states, data position (atomic)
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.train.checkpoint import complete_checkpoints, resumable_checkpoint
from trace_rl.train.config import TrainConfig, budget_shape, config_from_dict

KEEP_CHECKPOINTS = 2


class WarmStartError(ValueError):
    """The configured warm start did not reach any success on its probe prompts: RL would get no signal.

    A ValueError because the fix is a config value (more ``policy.sft_steps``, or ``policy.require_jump: false``);
    the CLI reports it as one error line.
    """


class TimedEnvFactory:
    """Makes environments whose step() calls are timed (the "tools" share of the wall-clock).

    Steps of concurrent episodes run in worker threads and overlap, so the factory accumulates the busy
    wall-clock time: seconds during which at least one env.step of any of its environments was running.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._seconds = 0.0
        self._active = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1

    def _exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._seconds += time.perf_counter() - self._since

    def __call__(self) -> Any:
        env = self._make()
        factory = self

        class _Timed:
            def reset(self, task: Any) -> Any:
                return env.reset(task)

            def step(self, text: str) -> Any:
                factory._enter()
                try:
                    return env.step(text)
                finally:
                    factory._exit()

            def snapshot(self) -> Any:
                return env.snapshot()

            def restore(self, state: Any) -> None:
                env.restore(state)

        return _Timed()

    @property
    def seconds(self) -> float:
        """Busy seconds so far: wall-clock time with at least one env.step running (overlaps counted once)."""
        with self._lock:
            return self._seconds


@dataclass
class DataCursor:
    """Deterministic order over the training tasks: epoch permutations seeded by (seed, epoch)."""

    n: int
    seed: int
    epoch: int = 0
    index: int = 0

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
            take = min(k - len(out), self.n - self.index)
            out.extend(int(i) for i in order[self.index : self.index + take])
            self.index += take
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
        return out


def _strict(x: Any) -> Any:
    """NaN and infinities become null, so every line is strict JSON (jq, JavaScript)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strict(v) for v in x]
    return x


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(_strict(record), default=_json_default, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _json_default(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl (a torn last line from a kill is ignored)."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoints/step_<N> under ``out`` (one with a state.json), or None."""
    ckpts = complete_checkpoints(out)
    return ckpts[-1] if ckpts else None


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
        self.budget_spent = 0.0  # rollout-equivalents generated by the steps done (total_budget)

    # ---------------------------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        import torch

        from trace_rl.allocation import get_method
        from trace_rl.envs import load_tasks, make_env
        from trace_rl.policy import load_policy
        from trace_rl.predictor import build_predictor
        from trace_rl.predictor.online import OnlineConfig, OnlineTrainer
        from trace_rl.rollout.agent import ChatCodec
        from trace_rl.rollout.backends import SamplingParams
        from trace_rl.train.serving import open_backend
        from trace_rl.train.step import StepParts
        from trace_rl.train.update import policy_update, update_settings

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        _quiet_transformers()
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        torch.set_num_threads(cfg.threads or max(1, min(os.cpu_count() or 1, 4)))
        self.method = get_method(cfg.method)
        self.shape = budget_shape(cfg)
        self.rng = np.random.default_rng(cfg.seed)
        env_kwargs = {"max_turns": cfg.env.max_turns}
        self.tasks = load_tasks(cfg.env.name, "train", cfg.env.train_limit, cfg.seed, **cfg.env.task_kwargs)
        if len(self.tasks) < cfg.env.pool_size:
            raise ValueError(
                f"env.pool_size={cfg.env.pool_size} but only {len(self.tasks)} training tasks loaded"
            )
        self.eval_tasks = (
            load_tasks(cfg.env.name, "test", cfg.env.eval_tasks, cfg.seed, **cfg.env.task_kwargs)
            if cfg.env.eval_tasks and cfg.eval_every
            else []
        )
        self.cursor = DataCursor(len(self.tasks), cfg.seed)
        self.env_factory = TimedEnvFactory(lambda: make_env(cfg.env.name, **env_kwargs))

        ckpt = resumable_checkpoint(self.out, self.log) if self.resume else None
        if self.resume and ckpt is None:
            self.log(f"no checkpoint under {self.out}/checkpoints: starting from step 1")
            (self.out / "metrics.jsonl").unlink(missing_ok=True)  # its steps are redone
        self.device = policy_device(cfg)
        self.policy = load_policy(
            str(ckpt / "policy") if ckpt is not None else cfg.policy.name, seed=cfg.seed
        )
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
        self.optimizer = torch.optim.AdamW(self.policy.model.parameters(), lr=cfg.optim.lr, betas=(0.9, 0.95))
        self.predictor = build_predictor(
            cfg.predictor.name, lr=cfg.predictor.lr, seed=cfg.seed, device=self.device
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
        prepare = getattr(self.predictor, "prepare", None)
        if callable(prepare):  # frozen-encoder features of the training prompts, once (not inside each step)
            from trace_rl.predictor import serialize_anchor

            limit = int(getattr(self.predictor, "max_chars", 2048))
            seconds = prepare([serialize_anchor(t.prompt, [], max_chars=limit) for t in self.tasks])
            if seconds > 0.5:
                self.log(f"predictor: embedded {len(self.tasks)} training prompts in {seconds:.1f}s")
        self.predictor_warm_record: dict[str, Any] | None = None
        policy_dir = ckpt / "policy" if ckpt is not None else self.out / "sft" / "policy"
        if ckpt is None and not (policy_dir / PROBE_FILE).exists():
            policy_dir = Path(cfg.policy.name)  # a warm-started policy given by path (trace-rl compare)
        if ckpt is None and cfg.predictor.warm_start and (policy_dir / PROBE_FILE).exists():
            self._warm_predictor(policy_dir / PROBE_FILE)
        self.settings = update_settings(cfg)

        def update(trees: list[Any]) -> dict[str, float]:
            stats = policy_update(
                self.policy.model, self.optimizer, trees, self.settings, pad_id=self.pad_id, rng=self.rng
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
            max_turns=cfg.env.max_turns,
            max_concurrency=cfg.sampling.max_concurrency,
            accounting=cfg.budget.accounting,
            max_chars=int(getattr(self.predictor, "max_chars", 2048)),  # score the texts it trains on
            max_gen_batches=cfg.budget.max_num_gen_batches or cfg.env.pool_size // self.shape.batch_size,
        )
        if ckpt is not None:
            self._load_checkpoint(ckpt)
        (self.out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))

    def _warm_start(self) -> None:
        """Supervised warm start on gold trajectories; verifies the copy-learning jump happened.

        Probes sample 8 episodes (temperature 1) on each of the first ``policy.sft_probe_prompts`` training
        prompts. With ``policy.sft_stop_success`` > 0 it stops at the first probe meeting the stop rule (success
        and mixed share) and raises `WarmStartError` when the step cap comes first. The last probe's outcomes are
        saved with the policy (probe_outcomes.json) to warm-start the predictor.
        """
        import asyncio

        from trace_rl.envs import gold_trajectory, load_tasks, make_env
        from trace_rl.policy.sft import SFTConfig, build_sft_examples, train_sft
        from trace_rl.rollout.agent import ChatCodec
        from trace_rl.rollout.backends import SamplingParams
        from trace_rl.rollout.engine import LocalEngine
        from trace_rl.rollout.evaluate import sample_rewards, spread_metrics

        cfg = self.cfg
        pol = cfg.policy
        sft_dir = self.out / "sft"
        tasks = (
            self.tasks
            if pol.sft_task_kwargs is None
            else load_tasks(cfg.env.name, "train", cfg.env.train_limit, cfg.seed, **pol.sft_task_kwargs)
        )
        gold = [gold_trajectory(t) for t in tasks]
        examples = build_sft_examples(
            tasks,
            gold,
            lambda: make_env(cfg.env.name),
            self.policy.tokenizer,
            render_tools=pol.render_tools,
        )
        probe = tasks[: min(pol.sft_probe_prompts, len(tasks))]
        codec = ChatCodec(self.policy.tokenizer, render_tools=pol.render_tools)
        sampling = SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens, temperature=1.0, seed=cfg.seed)
        last: dict[str, Any] = {}

        def sample(prompts: list[Any]) -> Any:
            engine = LocalEngine(self.policy, max_batch=64)
            return asyncio.run(
                sample_rewards(
                    engine,
                    lambda: make_env(cfg.env.name),
                    codec,
                    prompts,
                    sampling,
                    samples=8,
                    max_turns=cfg.env.max_turns,
                )
            )

        def evaluate(step: int) -> dict[str, float]:
            last["rewards"] = sample(probe)
            return spread_metrics(last["rewards"])

        stop_rule = pol.sft_stop_success > 0

        def stop(metrics: dict[str, float]) -> bool:
            return (
                metrics.get("mean_success", 0.0) >= pol.sft_stop_success
                and metrics.get("mixed_share", 0.0) >= pol.sft_stop_mixed
            )

        every = (
            pol.sft_eval_every if stop_rule else max(math.ceil(pol.sft_steps / pol.sft_evals), 1)
        )  # without a stop rule the last probe falls on the last step
        sft_cfg = SFTConfig(
            steps=pol.sft_steps,
            batch_size=pol.sft_batch,
            lr=pol.sft_lr,
            eval_every=every,
            seed=cfg.seed,
            min_steps=pol.sft_min_steps,
        )
        rule = (
            f"; stops at probe success >= {pol.sft_stop_success:g} and mixed share >= {pol.sft_stop_mixed:g}"
            if stop_rule
            else ""
        )
        self.log(
            f"warm start: up to {pol.sft_steps} SFT steps on {len(examples)} gold trajectories{rule}"
            if stop_rule
            else f"warm start: {pol.sft_steps} SFT steps on {len(examples)} gold trajectories"
        )
        result = train_sft(
            self.policy.model,
            examples,
            sft_cfg,
            pad_id=int(self.policy.tokenizer.pad_token_id or 0),
            evaluate=evaluate,
            log=self.log,
            stop=stop if stop_rule else None,
        )
        final = result.history[-1] if result.history else {}
        sft_dir.mkdir(parents=True, exist_ok=True)
        (sft_dir / "sft.json").write_text(json.dumps(result.to_dict(), indent=2))
        self.log(
            f"warm start done in {result.seconds:.0f}s after {result.steps} steps: success "
            f"{final.get('mean_success', float('nan')):.3f}, mixed share {final.get('mixed_share', float('nan')):.3f}"
        )
        if pol.require_jump and stop_rule and not result.stopped:
            raise WarmStartError(
                f"the SFT warm start reached its cap of {pol.sft_steps} steps at probe success "
                f"{final.get('mean_success', 0.0):.3f} / mixed share {final.get('mixed_share', 0.0):.3f}, short of "
                f"the stop rule ({pol.sft_stop_success:g} / {pol.sft_stop_mixed:g}); raise policy.sft_steps, or "
                "set policy.require_jump=false"
            )
        if pol.require_jump and final.get("mean_success", 0.0) <= 0.0:
            raise WarmStartError(
                "the SFT warm start ended without a single success on its probe prompts (no copy-learning jump); "
                "raise policy.sft_steps or set policy.require_jump=false"
            )
        self.policy.save(sft_dir / "policy")
        if pol.sft_task_kwargs is not None:  # the predictor needs outcomes on the RL pool, not the SFT mix
            probe = self.tasks[: min(pol.sft_probe_prompts, len(self.tasks))]
            last["rewards"] = sample(probe)
            pool = spread_metrics(last["rewards"])
            self.log(
                f"RL-pool probe ({len(probe)} training prompts x 8): success {pool['mean_success']:.3f}, "
                f"mixed share {pool['mixed_share']:.3f}, all solved {pool['all_solved_share']:.3f}, "
                f"all failed {pool['all_failed_share']:.3f}"
            )
        if "rewards" in last:
            save_probe_outcomes(sft_dir / "policy", probe, last["rewards"], step=result.steps)

    def _warm_predictor(self, path: Path) -> None:
        """Train the predictor on the warm start's probe outcomes (training prompts only; never held-out ones)."""
        from trace_rl.predictor import NodeExample, serialize_anchor

        data = json.loads(path.read_text())
        max_chars = int(getattr(self.predictor, "max_chars", 2048))
        examples = [
            NodeExample(
                serialize_anchor(prompt, [], max_chars=max_chars), float(np.mean(r)), 0, float(len(r))
            )
            for prompt, r in zip(data["prompts"], data["rewards"], strict=True)
        ]
        metrics = self.online.observe_step(examples)
        self.predictor_warm_record = {
            "kind": "predictor_warm_start",
            "step": 0,
            "source": str(path),
            "examples": len(examples),
            "samples_per_prompt": int(np.mean([len(r) for r in data["rewards"]])) if examples else 0,
            "policy_sft_step": data.get("step"),
            **{k.replace("/", "_"): v for k, v in metrics.items() if isinstance(v, int | float)},
        }
        self.log(
            f"predictor warm start: {len(examples)} training prompts x "
            f"{self.predictor_warm_record['samples_per_prompt']} samples from {path}"
        )

    def prepare_policy_only(self) -> Path:
        """Load the training tasks and the policy and run the warm start into out/sft/policy (for compare)."""
        from trace_rl.envs import load_tasks
        from trace_rl.policy import load_policy

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        self.tasks = load_tasks(cfg.env.name, "train", cfg.env.train_limit, cfg.seed, **cfg.env.task_kwargs)
        self.policy = load_policy(cfg.policy.name, seed=cfg.seed)
        self.policy.model.to(policy_device(cfg))
        self._warm_start()
        return self.out / "sft" / "policy"

    # ------------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, step: int, *, finished: bool = False) -> Path:
        """Atomically write checkpoints/step_<step>/ (write to a temporary folder, then rename)."""
        import torch

        root = self.out / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step_{step}"
        for stale in root.glob(".tmp_step_*"):  # left by a kill during an earlier save
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".tmp_step_{step}_{os.getpid()}"
        tmp.mkdir()
        self.policy.save(tmp / "policy")
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(
            {"predictor": self.predictor.state_dict(), "online": self.online.state_dict()},
            tmp / "predictor.pt",
        )
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
        state = {
            "step": step,
            "cursor": {"epoch": self.cursor.epoch, "index": self.cursor.index},
            "numpy_rng": self.rng.bit_generator.state,
            "config": self.cfg.to_dict(),
            "budget_spent": self.budget_spent,
            "finished": finished,
        }
        (tmp / "state.json").write_text(json.dumps(state, default=_json_default))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in sorted(root.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _load_checkpoint(self, ckpt: Path) -> None:
        import torch

        state = json.loads((ckpt / "state.json").read_text())
        self.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
        pred = torch.load(ckpt / "predictor.pt", weights_only=False)
        self.predictor.load_state_dict(pred["predictor"])
        self.online.load_state_dict(pred["online"])
        rng = torch.load(ckpt / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        self.rng.bit_generator.state = state["numpy_rng"]
        self.cursor.epoch, self.cursor.index = state["cursor"]["epoch"], state["cursor"]["index"]
        self.start_step = int(state["step"]) + 1
        self.budget_spent = float(state.get("budget_spent", 0.0))
        # every step after the checkpoint is redone, so its log lines go
        path = self.out / "metrics.jsonl"
        kept = [r for r in read_metrics(path) if int(r.get("step", 0)) <= state["step"]]
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)
        self.log(f"resumed from {ckpt} at step {self.start_step}")

    # ----------------------------------------------------------------------------------------------- eval
    def evaluate(self, step: int) -> dict[str, Any]:
        """pass@1 on the fixed held-out split: greedy, or the mean reward of ``env.eval_samples`` seeded samples
        per task at ``env.eval_temperature`` (the same seeds at every evaluation, so steps are comparable)."""
        import asyncio

        from trace_rl.rollout.agent import run_episode
        from trace_rl.rollout.backends import SamplingParams

        env_cfg = self.cfg.env
        params = SamplingParams(
            max_new_tokens=self.cfg.sampling.max_new_tokens,
            temperature=env_cfg.eval_temperature,
            top_p=self.cfg.sampling.top_p if env_cfg.eval_temperature > 0 else 1.0,
            seed=0,
        )
        k = env_cfg.eval_samples

        async def run_all() -> list[float]:
            eps = await asyncio.gather(
                *[
                    run_episode(
                        self.engine,
                        self.env_factory(),
                        self.codec,
                        t,
                        params,
                        max_turns=env_cfg.max_turns,
                        seed=i * k + j,
                    )
                    for i, t in enumerate(self.eval_tasks)
                    for j in range(k)
                ]
            )
            return [float(e.reward) for e in eps]

        t0 = time.perf_counter()
        rewards = asyncio.run(run_all())
        return {
            "kind": "eval",
            "step": step,
            "method": self.cfg.method,
            "eval_accuracy": float(np.mean(rewards)) if rewards else float("nan"),
            "eval_tasks": len(self.eval_tasks),
            "eval_samples": k,
            "eval_temperature": env_cfg.eval_temperature,
            "eval_s": time.perf_counter() - t0,
        }

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
        writer = _tensorboard(self.out / "tb", purge_step=self.start_step)
        records: list[dict[str, Any]] = []
        bar = _progress(self.start_step, cfg.steps, progress)
        if self.start_step == 1 and self.predictor_warm_record is not None:
            _append_jsonl(metrics_path, self.predictor_warm_record)
        if self.start_step == 1 and self.eval_tasks:
            rec = self.evaluate(0)
            _append_jsonl(metrics_path, rec)
            _tb_write(writer, rec, 0)
        spent = self.budget_spent
        for step in range(self.start_step, cfg.steps + 1):
            left = cfg.total_budget - spent if cfg.total_budget > 0 else None
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
            _append_jsonl(metrics_path, record)
            _tb_write(writer, record, step)
            records.append(record)
            # the run's total budget: stop once the next step could not be paid in full
            last = step == cfg.steps or (
                cfg.total_budget > 0 and cfg.total_budget - spent < self.shape.total - 1e-9
            )
            if self.eval_tasks and cfg.eval_every and (step % cfg.eval_every == 0 or last):
                rec = self.evaluate(step)
                _append_jsonl(metrics_path, rec)
                _tb_write(writer, rec, step)
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


PROBE_FILE = "probe_outcomes.json"


def save_probe_outcomes(folder: Path, tasks: Sequence[Any], rewards: Any, *, step: int) -> None:
    """Write the warm start's last probe (task ids, prompts, rewards (P, S)) next to the policy it measured."""
    data = {
        "step": step,
        "task_ids": [t.id for t in tasks],
        "prompts": [t.prompt for t in tasks],
        "rewards": np.asarray(rewards, dtype=np.float64).tolist(),
    }
    (folder / PROBE_FILE).write_text(json.dumps(data))


def policy_device(cfg: TrainConfig) -> str:
    """The torch device for the policy: ``cfg.device``, with "auto" = cuda when available, else cpu."""
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(cfg.device.partition(":")[2] or 0)
        if index >= count:
            raise ValueError(
                f"device={cfg.device!r} but torch sees {count} CUDA device(s); use device=auto or cpu"
            )
    return cfg.device


def _quiet_transformers() -> None:
    """No per-save progress bars or load reports from transformers in the training log."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def _tensorboard(path: Path, purge_step: int) -> Any:
    """A SummaryWriter; on resume, events at or after ``purge_step`` (redone steps) are purged."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: the jsonl log still has everything
        return None
    return SummaryWriter(str(path), purge_step=purge_step if purge_step > 1 else None)


def _tb_write(writer: Any, record: dict[str, Any], step: int) -> None:
    if writer is None:
        return
    prefix = "eval" if record.get("kind") == "eval" else "train"
    for key, value in record.items():
        if key == "backend_requests_per_replica":  # a list: one scalar per replica
            for i, count in enumerate(value):
                writer.add_scalar(f"{prefix}/{key}/{i}", count, step)
        if isinstance(value, bool) or not isinstance(value, int | float) or key == "step":
            continue
        writer.add_scalar(f"{prefix}/{key}", value, step)
    writer.flush()


def _progress(start: int, total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=start - 1, desc="train", unit="step", dynamic_ncols=True)


def resume_config(out: str | Path) -> TrainConfig:
    """The config a run in ``out`` was started with (for --resume)."""
    path = Path(out) / "config.json"
    if not path.exists():
        raise ValueError(f"{out} holds no config.json: not a trace-rl run folder")
    return config_from_dict(json.loads(path.read_text()))


# What a run writes into its folder; `clear_run` removes exactly these (and nothing else a user keeps there).
RUN_FILES = ("metrics.jsonl", "config.json", "report.html", "servers.json")
RUN_DIRS = ("checkpoints", "tb", "sft", "report", "served")


def clear_run(out: str | Path) -> None:
    """Delete an earlier run's files from ``out`` (for ``trace-rl train --overwrite``)."""
    root = Path(out)
    for name in RUN_FILES:
        (root / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        shutil.rmtree(root / name, ignore_errors=True)


def check_same_config(cfg: TrainConfig, out: str | Path) -> None:
    """Raise ValueError when ``out`` holds a run (config.json) started with a different config than ``cfg``."""
    path = Path(out) / "config.json"
    if path.exists() and config_from_dict(json.loads(path.read_text())) != cfg:
        raise ValueError(
            f"{out} holds a run with a different config; use another --out (or delete that run) to start afresh"
        )


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
            raise ValueError(
                f"--overwrite would delete policy.name={cfg.policy.name}, which lies in the run being replaced; "
                "copy it out of the folder first"
            )
        clear_run(root)
    elif not resume and ((root / "metrics.jsonl").exists() or (root / "checkpoints").exists()):
        raise ValueError(
            f"{root} already holds a run; continue it with --resume {root}, choose another --out, "
            "or pass --overwrite to replace it"
        )
    return Trainer(cfg, out, resume=resume).run(progress=progress)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Means over a run's train records of the headline metrics, and the last eval accuracy."""
    train_recs = [r for r in records if r.get("kind", "train") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    keys = (
        "effective_ratio",
        "success_rate",
        "budget_spent",
        "skip_rate",
        "active_prompts",
        "replays",
        "wall_s",
    )
    out = {k: float(np.mean([r[k] for r in train_recs])) for k in keys if train_recs}
    if evals:
        out["eval_accuracy"] = float(evals[-1]["eval_accuracy"])
        out["eval_accuracy_first"] = float(evals[0]["eval_accuracy"])
    return out
