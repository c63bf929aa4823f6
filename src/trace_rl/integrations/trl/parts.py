"""What both TRL paths share: TRACE's settings, the native step's parts, and one TRL training row per trained path.

Both `trace_rollout_func` (GRPOTrainer) and `TraceRolloutWorker` (AsyncGRPOTrainer) run trace-rl's own training
step, `trace_rl.train.step.training_step` (predictor scores -> root allocation -> per-prompt expansion with
turn-prefix replays -> predictor update), with the policy update replaced by "hand the trees to TRL". The step's
per-prompt stage is `trace_rl.rollout.expansion.expand_prompt`, the same function the native scheduler and the verl
worker call: the TRL adapters hold no copy of it. Nothing here imports TRL.

Rows. TRL trains one sequence per row with ONE scalar advantage (`RolloutSample.advantage`; the rollout_func
path through a reward function). A leaf-level estimator (GRPO, Tree-GRPO) gives one row per root-to-leaf path
with A(leaf): the native trainer's default layout (`token_advantages(..., shared_prefix="per_path")`). The
node-level TreeRPO gives one row per non-root node y: the prompt and the turns above y as context, y's model
tokens trained with A(y): the native `shared_prefix="once"` layout (each turn trained once with its own advantage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.advantages import advantage_level
from trace_rl.spec import BudgetSpec, SamplingSpec, TraceSpec, UpdateSpec, resolve_estimator
from trace_rl.tree import RolloutTree
from trace_rl.types import Task

ESTIMATOR_NAMES = ("grpo", "tree_grpo", "treerpo")


@dataclass(frozen=True)
class TraceSettings:
    """TRACE's knobs for the TRL adapters: the TRL-facing keys of `trace_rl.spec.TraceSpec` (their defaults
    and meanings there, the same as `trace-rl train`'s; glossary: docs/glossary.md) and the adapter's own.

    Attributes:
        method: a `trace_rl.allocation.METHODS` name ("trace", or a baseline: "treepo", "trace_root_only", ...).
        estimator: "auto" (default: `trace_rl.spec.resolve_estimator`, tree_grpo for the tree methods inside
            GRPOTrainer, treerpo for math and QA tasks in TraceRolloutWorker), "grpo" (leaf-level), "tree_grpo" or
            "treerpo" (node-level; one row per turn).
        continuations: N, replays per root rollout (a prompt with m_i roots gets a local budget of N m_i).
        replay_cost: rollout-equivalents per replay (paper: 0.5).
        min_rollouts, max_rollouts: bounds on m_i for active prompts (max None: no cap).
        max_turns: turns per episode. max_new_tokens, temperature, top_p: sampling of every model turn.
        predictor: `trace_rl.predictor.build_predictor` name or folder ("ngram": the demo preset's).
        predictor_batch_size, predictor_updates: the online predictor trainer's batch and updates per step
            (None: its default schedule).
        render_tools: render the task's tool schemas into the prompt (`ChatCodec`).
        max_concurrency: episodes in flight at once. seed: seeds of sampling and allocation.

    Raises:
        ValueError: an unknown method or estimator, or a value out of range (`trace_rl.spec.SpecError`).
    """

    method: str = TraceSpec.method
    estimator: str = UpdateSpec.estimator
    continuations: int = BudgetSpec.continuations
    replay_cost: float = BudgetSpec.replay_cost
    min_rollouts: int = BudgetSpec.min_rollouts
    max_rollouts: int | None = BudgetSpec.max_rollouts
    max_turns: int = TraceSpec.max_turns
    max_new_tokens: int = SamplingSpec.max_new_tokens
    temperature: float = SamplingSpec.temperature
    top_p: float = SamplingSpec.top_p
    predictor: str = "ngram"
    predictor_batch_size: int = 32
    predictor_updates: int | None = None
    render_tools: bool = True
    max_concurrency: int = SamplingSpec.max_concurrency
    seed: int = 0

    def __post_init__(self) -> None:
        from trace_rl.allocation import get_method
        from trace_rl.predictor.names import STATE_NAMES

        if get_method(self.method).adaptive:  # get_method: ValueError listing the known methods
            raise ValueError(
                f"method {self.method} reads what earlier steps of a run measured (an AdaptiveState the native "
                "trainer owns and checkpoints); the TRL adapter does not keep it yet: use trace-rl train, or "
                "another method"
            )
        self.spec  # noqa: B018 (building the spec checks every TRACE setting: SpecError, a ValueError)
        if self.predictor in STATE_NAMES:
            raise ValueError(
                f"predictor {self.predictor!r} reads the policy's hidden states, which only trace-rl's own trainer "
                "provides; pick another predictor (e.g. ngram+minilm) inside TRL"
            )

    @property
    def spec(self) -> TraceSpec:
        """These settings as the `TraceSpec` the native step reads (the budget's M and n come with each step)."""
        return TraceSpec.of(self, method=self.method, max_turns=self.max_turns)

    def estimator_for(self, task: Task, *, node_level: bool = True) -> str:
        """The estimator a tree of ``task`` trains with ("auto" resolved for its environment and the method;
        ``node_level=False`` where the rows cannot be per turn: GRPOTrainer's fixed num_generations)."""
        return resolve_estimator(self.estimator, self.method, task.env, node_level=node_level)


def build_step_parts(
    policy: Any,
    backend: Any,
    env_factory: Callable[[], Any],
    settings: TraceSettings,
    update_policy: Callable[[list[RolloutTree]], dict[str, float]],
) -> Any:
    """The native step's `trace_rl.train.step.StepParts` for a TRL adapter.

    Args:
        policy: the generator's `trace_rl.policy.Policy` (its tokenizer renders prompts and observations).
        backend: a generation backend (`LocalEngine(policy)` or a `ReplicaPool` of vLLM servers).
        env_factory: makes a fresh trace-rl environment.
        update_policy: called with the step's trees after the predictor update (TRL trains, so the adapters
            hand the trees over here instead of updating a policy).
    """
    from trace_rl.predictor import build_predictor
    from trace_rl.predictor.online import OnlineConfig, OnlineTrainer
    from trace_rl.rollout.agent import ChatCodec
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.train.step import StepParts

    predictor = build_predictor(settings.predictor, seed=settings.seed)
    online = OnlineTrainer(
        predictor,
        OnlineConfig(
            batch_size=settings.predictor_batch_size,
            updates_per_step=settings.predictor_updates,
            seed=settings.seed,
        ),
    )
    return StepParts(
        backend=backend,
        env_factory=env_factory,
        codec=ChatCodec(policy.tokenizer, render_tools=settings.render_tools),
        sampling=SamplingParams(
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            seed=settings.seed,
        ),
        predictor=predictor,
        online=online,
        update_policy=update_policy,
        spec=settings.spec,
    )


def tree_advantages(tree: RolloutTree, estimator: str) -> npt.NDArray[np.float64]:
    """`trace_rl.train.update.ESTIMATORS[estimator](tree)`: leaf-level (NaN off the leaves) for grpo and
    tree_grpo, node-level (NaN at the root) for treerpo."""
    from trace_rl.train.update import ESTIMATORS

    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    return np.asarray(ESTIMATORS[estimator](tree), dtype=np.float64)


@dataclass(frozen=True)
class PathRow:
    """One TRL training row of a rollout tree.

    Attributes:
        node: the tree node the row ends at (a leaf for leaf-level estimators; any non-root node for TreeRPO).
        prompt_ids: int64 (P,) the tree's prompt tokens.
        completion_ids: int64 (T,) the turns from the prompt down to ``node``, concatenated.
        completion_mask: int8 (T,) 1 on the tokens trained: model tokens of the whole path (leaf rows) or of
            ``node``'s own turn only (TreeRPO rows); tool/observation tokens are always 0.
        logprobs: float32 (T,) behaviour log-probabilities (0 where the turn's loss mask is 0).
        advantage: A(node) from the estimator.
        reward: the terminal reward of the path's leaf (the chain leaf for a TreeRPO row of an inner node).
    """

    node: int
    prompt_ids: npt.NDArray[np.int64]
    completion_ids: npt.NDArray[np.int64]
    completion_mask: npt.NDArray[np.int8]
    logprobs: npt.NDArray[np.float32]
    advantage: float
    reward: float


def tree_rows(tree: RolloutTree, advantages: npt.ArrayLike) -> list[PathRow]:
    """The TRL rows of one tree (module docstring): one per leaf for leaf-level advantages, in `tree.leaves()`
    order; one per non-root node for node-level advantages, in node order.

    Raises:
        ValueError: advantages of the wrong shape or NaN pattern, or a node without a turn payload.
    """
    a = np.asarray(advantages, dtype=np.float64)
    level = advantage_level(tree, a)
    leaves = tree.leaves()
    ends = leaves if level == "leaf" else np.arange(1, tree.num_nodes)
    chain_leaf = tree.chain_leaf()
    rows: list[PathRow] = []
    for end in (int(y) for y in ends):
        ids, mask, logps = [], [], []
        for y in tree.path_to(end)[1:]:
            turn = tree.turns[int(y)]
            if turn is None:
                raise ValueError(f"node {int(y)} has no turn payload; TRL rows need token ids")
            trained = level == "leaf" or int(y) == end
            ids.append(turn.token_ids)
            mask.append(turn.loss_mask if trained else np.zeros_like(turn.loss_mask))
            logps.append(turn.logprobs)
        leaf = end if level == "leaf" else int(chain_leaf[end])
        rows.append(
            PathRow(
                node=end,
                prompt_ids=np.asarray(tree.prompt_ids, np.int64),
                completion_ids=np.concatenate(ids).astype(np.int64),
                completion_mask=np.concatenate(mask).astype(np.int8),
                logprobs=np.concatenate(logps).astype(np.float32),
                advantage=float(a[end]),
                reward=float(tree.reward[leaf]),
            )
        )
    return rows


def prompt_text(prompt: Any) -> str:
    """The user text of a TRL prompt: a string, or the last user message of a conversation (a list of
    {"role", "content"} dicts whose content is a string or a list of {"type": "text", "text"} blocks).

    Raises:
        ValueError: a prompt with no user text.
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(list(prompt)):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    raise ValueError(f"a TRL prompt must be a string or a conversation with a user message; got {prompt!r}")


def task_index(tasks: Sequence[Task]) -> dict[str, Task]:
    """Map each task's prompt text to the task (TRL hands the rollout function prompts, not task ids).

    Raises:
        ValueError: two tasks with the same prompt text but different task ids (a prompt would be ambiguous).
    """
    index: dict[str, Task] = {}
    for task in tasks:
        seen = index.get(task.prompt)
        if seen is not None and seen.id != task.id:
            raise ValueError(
                f"tasks {seen.id!r} and {task.id!r} share one prompt text; TRL passes prompts only, so each "
                "prompt text must identify one task"
            )
        index[task.prompt] = task
    return index


def tasks_dataset_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """Rows for a TRL dataset (``datasets.Dataset.from_list``): a conversational ``prompt`` holding the task's
    prompt as the user message, and its ``task_id``."""
    return [{"prompt": [{"role": "user", "content": t.prompt}], "task_id": t.id} for t in tasks]
