"""TRACE for TRL's `AsyncGRPOTrainer`: a rollout worker (TRL's `RolloutWorkerProtocol`) and the weight push that
feeds it (TRL's `WeightTransferProtocol`).

`TraceRolloutWorker` runs trace-rl's own training step (`trace_rl.train.step.training_step`) in a background
thread, one step after another: the predictor scores a candidate pool of ``pool_size`` tasks, the method's root
strategy (TRACE: `allocate_roots(v, M, max_active=...)`) allocates m_i roots, each active prompt's roots run and,
as soon as they return, its turn prefixes are scored and get replays from their save points (local budget N m_i),
the predictor is updated on the finished trees, and tree advantages are computed with the chosen estimator. Each
trained path becomes one TRL `RolloutSample` (see `trace_rl.integrations.trl.parts`: one per leaf for grpo /
tree_grpo, one per turn for treerpo) carrying its precomputed ``advantage`` and ``group_id`` = the tree's id, so
TRL's tree packing shares the prompt and the common turn prefixes of a tree. Groups have any size.

Weights and versions. `TraceWeightPush` is the trainer's ``weight_transfer``: ``pause()`` waits until the step in
flight has finished generating (roots AND replays: a prompt's replays always run on the weights that made its
roots), ``send_weights`` copies the trainer's tensors into the generator's policy and refreshes the backend with
the project's own weight push (`trace_rl.train.serving.RunBackend.sync`: the local engine drops its cached
keys/values; vLLM / SGLang replicas reload from an exported folder and reset their prefix caches), ``resume()``
bumps the policy version and lets generation go on. Every sample carries the version of the weights that
generated it, which is the trainer's ``model_version`` (one push per trainer sync); TRL drops samples more than
``max_staleness`` versions old. TRL's own NCCL transfer (``weight_transfer=None``) would change a server's weights
behind the worker's back, between a prompt's roots and its replays: `update_model_version` refuses a version that
did not come through `TraceWeightPush`.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.integrations.trl.parts import (
    TraceSettings,
    build_step_parts,
    tree_advantages,
    tree_rows,
)
from trace_rl.tree import RolloutTree
from trace_rl.types import Task


@dataclass(frozen=True)
class TraceStepLog:
    """What one worker step produced (kept for inspection and tests; the last `history_steps` steps).

    Attributes:
        step: the worker's step counter (1, 2, ...).
        version: policy version of the weights every rollout of the step was generated with.
        record: the native step's metrics record (allocation, budget, effective ratio, predictor metrics, ...).
        results: the step's `PromptResult`s (task, tree, roots, replays, k), one per active prompt.
        group_ids: the ``group_id`` of each result's samples.
        samples: (group_id, node, advantage) of every sample pushed, in push order.
    """

    step: int
    version: int
    record: dict[str, Any]
    results: list[Any]
    group_ids: list[int]
    samples: list[tuple[int, int, float]]


class TraceRolloutWorker:
    """TRL `RolloutWorkerProtocol`: TRACE steps in a background thread, pushing `RolloutSample`s.

    Args:
        tasks: the training tasks (cycled in a fresh random order every epoch).
        policy: the generator's `trace_rl.policy.Policy` (a copy separate from the trainer's model: the trainer
            loads its own from a checkpoint folder; `TraceWeightPush` keeps the two equal after every sync).
        env_factory: makes a fresh trace-rl environment.
        settings: TRACE's knobs (`TraceSettings`).
        roots: M, root rollouts per worker step.
        group_size: n, rollouts per prompt of the uniform methods (the cold-start rule and baselines use it;
            M must be a multiple of it).
        pool_size: candidate prompts scored per step (default 2 x the flat baselines' batch size).
        backend: a trace-rl generation backend (default `LocalEngine(policy)`).
        serve_dir: folder for exported weights when the backend is a server pool (default: a temporary folder).
        queue_maxsize: bound of ``rollout_buffer`` (0: unbounded); a full buffer blocks the worker.
        history_steps: how many `TraceStepLog`s to keep.

    Attributes:
        rollout_buffer, metrics_queue: the queues the trainer drains (TRL's protocol).
        history: the last steps' `TraceStepLog`s.

    Raises:
        ValueError: a bad budget shape or a pool smaller than a step needs.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        policy: Any,
        env_factory: Callable[[], Any],
        settings: TraceSettings | None = None,
        *,
        roots: int,
        group_size: int = 8,
        pool_size: int | None = None,
        backend: Any = None,
        serve_dir: str | Path | None = None,
        queue_maxsize: int = 0,
        history_steps: int = 16,
    ):
        from trace_rl.allocation import BudgetShape, get_method
        from trace_rl.train.serving import RunBackend

        self.settings = settings or TraceSettings()
        s = self.settings
        self.shape = BudgetShape(
            roots=roots,
            continuations=s.continuations,
            group_size=group_size,
            replay_cost=s.replay_cost,
            min_rollouts=s.min_rollouts,
            max_rollouts=s.max_rollouts,
        )
        self.method = get_method(s.method)
        self.tasks = list(tasks)
        self.pool_size = pool_size if pool_size is not None else 2 * self.shape.batch_size
        needed = max(self.shape.batch_size, self.shape.tree_batch, 1)
        if self.pool_size < needed or self.pool_size > len(self.tasks):
            raise ValueError(
                f"pool_size={self.pool_size} must lie between the step's batch size ({needed}) and the number of "
                f"tasks ({len(self.tasks)})"
            )
        self.policy = policy
        if backend is None:
            from trace_rl.rollout.engine import LocalEngine

            backend = LocalEngine(policy, max_batch=s.max_concurrency)
        if serve_dir is None:
            import tempfile

            serve_dir = tempfile.mkdtemp(prefix="trace-rl-trl-")
        self.serving = RunBackend(backend, Path(serve_dir))
        self._trees: list[RolloutTree] = []
        self.parts = build_step_parts(policy, backend, self._beating(env_factory), s, self._keep_trees)
        self.rng = np.random.default_rng(s.seed)
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[dict[str, float]] = queue.Queue(maxsize=4096)
        self.history: deque[TraceStepLog] = deque(maxlen=history_steps)
        self.version = 0
        self._order: list[int] = []
        self._step = 0
        self._group = 0
        self._gate = threading.Lock()  # held while a step generates; the weight push takes it between steps
        self._pause = threading.Event()  # a push is waiting: do not start the next step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_tb = ""
        self._beat = time.time()

    # --------------------------------------------------------------------------- RolloutWorkerProtocol
    def start(self) -> None:
        """Start producing rollouts in a daemon thread (TRL calls this after the first weight sync)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._beat = time.time()
        self._thread = threading.Thread(target=self._run, name="trace-rollout-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the step in flight (its samples are dropped if the buffer is full) and join the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=600)
            if thread.is_alive():
                raise RuntimeError("trace rollout worker did not stop within 600 s")
        self._thread = None

    def update_model_version(self, model_version: int) -> None:
        """The trainer's live policy version, which must be the one `TraceWeightPush` set (one push per sync).

        Raises:
            ValueError: another version: the weights changed without the worker's weight push (e.g. TRL's own
                NCCL transfer), so replays could run on other weights than their roots.
        """
        if int(model_version) != self.version:
            raise ValueError(
                f"the trainer is at policy version {model_version} but the worker's generator at {self.version}: "
                "pass weight_transfer=worker.weight_transfer() to AsyncGRPOTrainer so that weights reach the "
                "generator between steps (a prompt's replays must run on the weights of its roots)"
            )

    def check_health(self, stale_after_s: float) -> None:
        """Raise if the worker thread failed, is not running, or made no progress (no new episode, no push) for
        ``stale_after_s`` seconds.

        Raises:
            RuntimeError: with the worker's exception chained when it failed.
        """
        if self._error is not None:
            raise RuntimeError(f"trace rollout worker failed:\n{self._error_tb}") from self._error
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("trace rollout worker is not running")
        age = time.time() - self._beat
        if age > stale_after_s:
            raise RuntimeError(
                f"trace rollout worker made no progress for {age:.0f} s (> {stale_after_s:.0f} s)"
            )

    # ------------------------------------------------------------------------------------ weights
    def weight_transfer(self) -> TraceWeightPush:
        """The `WeightTransferProtocol` object to pass to `AsyncGRPOTrainer(weight_transfer=...)`."""
        return TraceWeightPush(self)

    def load_weights(self, named_tensors: Iterator[tuple[str, Any]]) -> int:
        """Copy (name, tensor) pairs into the generator's policy and refresh the backend; returns how many
        tensors were copied. Call only while generation is paused (`TraceWeightPush` does).

        Raises:
            KeyError: a name the generator's model does not have; ValueError: a shape mismatch.
        """
        import torch

        params = dict(self.policy.model.named_parameters())
        copied = 0
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in params:
                    raise KeyError(f"the generator's model has no parameter {name!r}")
                target = params[name]
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"{name}: shape {tuple(tensor.shape)} != generator's {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
                copied += 1
        self.serving.sync(self.policy)
        return copied

    # ---------------------------------------------------------------------------------------- loop
    def _beating(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        def make() -> Any:
            self._beat = time.time()  # every new episode is progress
            return factory()

        return make

    def _keep_trees(self, trees: list[RolloutTree]) -> dict[str, float]:
        self._trees = list(trees)  # TRL updates the policy; the step only hands its trees over
        return {}

    def _pool(self) -> list[Task]:
        pool: list[Task] = []
        while len(pool) < self.pool_size:
            if not self._order:
                self._order = self.rng.permutation(len(self.tasks)).tolist()
            pool.append(self.tasks[self._order.pop()])
        return pool

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                while self._pause.is_set() and not self._stop.is_set():
                    time.sleep(0.01)
                with self._gate:  # the weights cannot change while this step generates
                    if self._stop.is_set():
                        return
                    version = self.version
                    self._step += 1
                    from trace_rl.train.step import training_step

                    record, results = training_step(
                        self._step, self._pool(), self.method, self.shape, self.parts, self.rng
                    )
                self._publish(self._step, version, record, results)
        except BaseException as error:  # surfaced to the trainer by check_health
            self._error = error
            self._error_tb = traceback.format_exc()

    def _publish(self, step: int, version: int, record: dict[str, Any], results: list[Any]) -> None:
        from trace_rl.integrations.trl.compat import rollout_sample_class

        RolloutSample = rollout_sample_class()

        samples: list[Any] = []
        pushed: list[tuple[int, int, float]] = []
        group_ids: list[int] = []
        for result in results:
            self._group += 1
            group_ids.append(self._group)
            tree = result.tree
            if tree.num_leaves == 0:
                continue
            adv = tree_advantages(tree, self.settings.estimator_for(result.task))
            prompt = [{"role": "user", "content": result.task.prompt}]
            for row in tree_rows(tree, adv):
                n_prompt = row.prompt_ids.shape[0]
                text = "".join(tree.turns[int(y)].text for y in tree.path_to(row.node)[1:])  # type: ignore[union-attr]
                samples.append(
                    RolloutSample(
                        prompt=prompt,
                        completion=[{"role": "assistant", "content": text}],
                        input_ids=np.concatenate([row.prompt_ids, row.completion_ids]).astype(np.int64),
                        completion_mask=np.concatenate(
                            [np.zeros(n_prompt, np.int64), row.completion_mask.astype(np.int64)]
                        ),
                        old_log_probs=np.concatenate(
                            [np.zeros(n_prompt, np.float32), row.logprobs.astype(np.float32)]
                        ),
                        advantage=row.advantage,
                        model_version=version,
                        group_id=self._group,
                        metrics={"reward": row.reward},
                        enqueued_at=None,
                    )
                )
                pushed.append((self._group, row.node, row.advantage))
        self.history.append(TraceStepLog(step, version, record, results, group_ids, pushed))
        self._metrics(record)
        for sample in samples:
            sample.enqueued_at = time.time()
            while not self._stop.is_set():
                try:
                    self.rollout_buffer.put(sample, timeout=0.5)
                    self._beat = time.time()
                    break
                except queue.Full:
                    continue

    def _metrics(self, record: dict[str, Any]) -> None:
        values = {
            f"trace/{k}": float(v)
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
        }
        try:
            self.metrics_queue.put_nowait(values)
        except queue.Full:  # the trainer stopped draining: metrics are dropped, generation is never blocked
            pass


class TraceWeightPush:
    """TRL `WeightTransferProtocol` that feeds a `TraceRolloutWorker`'s generator (see the module docstring)."""

    def __init__(self, worker: TraceRolloutWorker):
        self.worker = worker
        self.pushes = 0

    def init_weight_transfer(self) -> None:
        """Nothing to set up: the generator lives in this process (or behind HTTP servers)."""

    def pause(self) -> None:
        """Wait until the step in flight has finished generating; no new step starts until `resume`."""
        self.worker._pause.set()
        self.worker._gate.acquire()

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        """Copy the trainer's parameters into the generator and refresh the backend."""
        self.worker.load_weights(iterator)
        self.pushes += 1

    def resume(self) -> None:
        """Bump the policy version (the trainer's ``model_version`` after this sync) and let generation go on."""
        self.worker.version += 1
        self.worker._pause.clear()
        self.worker._gate.release()

    def destroy(self) -> None:
        """Nothing to release."""
