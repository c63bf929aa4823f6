"""TRACE's settings declared once: `TraceSpec` (method, budget shape, prefix-stage options, policy update, rollout
sampling), the one definition that the native config, the TRL adapter and the verl adapter build and read.

Every field carries its default, its accepted range (`Range`) and its meaning in its metadata (`setting`), and is
checked once, when a part is built (`BudgetSpec`, `PrefixSpec`, `UpdateSpec`, `SamplingSpec`: ranges and choices)
or the whole spec is built (`TraceSpec`: the rules between parts and the method). The native config's sections
subclass the parts (`trace_rl.train.config_sections`: ``budget.*``, ``optim.*``, ``sampling.*`` are these fields);
`trace_rl.integrations.trl.TraceSettings` and `trace_rl.integrations.verl.config.TraceVerlConfig` take their
defaults from these fields (a dataclass field's default is its class attribute: ``BudgetSpec.max_rollouts``) and
build a `TraceSpec` from their own keys (`TraceSpec.of`), so one default holds everywhere (tests/unit/test_spec.py
compares them). A violated rule raises `SpecError` naming the field; each adapter reports it under its own key
(``optim.minibatches``, ``minibatches``, ``trace.max_rollouts``).

Defaults where the three differed before (issue 60): ``max_rollouts`` 16 (the native trainer's; the TRL and verl
adapters had 8), ``max_new_tokens`` 128 (TRL's; native 64, verl 256), ``estimator`` "auto" (native; TRL had
tree_grpo, verl's estimator is its own ``algorithm.adv_estimator``), resolved by `resolve_estimator`.

Plain data (an import-linter contract): it imports `trace_rl.errors`, and `trace_rl.allocation` inside the checks
that need the method table, so the native config, the trainer and both adapters (the verl config is pure) import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from trace_rl.errors import UserError

__all__ = [
    "ESTIMATORS",
    "LOSS_AGGS",
    "BudgetSpec",
    "PrefixSpec",
    "Range",
    "SamplingSpec",
    "SpecError",
    "TraceSpec",
    "UpdateSpec",
    "check_fields",
    "resolve_estimator",
    "setting",
    "uses_allocate_prefixes",
]

ESTIMATORS = ("auto", "grpo", "tree_grpo", "treerpo")
LOSS_AGGS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


class SpecError(UserError):
    """A setting outside its range or an invalid combination: ``key`` is the field's name, ``why`` the rule.

    ``part`` is the `TraceSpec` part holding the field ("budget", "prefix", "update", "sampling"; "" for the
    spec's own fields), so that an adapter can name the key as its users write it (`native_key`)."""

    def __init__(self, key: str, why: str, part: str = "") -> None:
        super().__init__(f"{key}: {why}")
        self.key, self.why, self.part = key, why, part


@dataclass(frozen=True)
class Range:
    """The accepted values of one numeric key: an interval with optional bounds; floats must also be finite.

    Attributes:
        lo: lower bound (None: none).
        hi: upper bound (None: none).
        lo_open: the lower bound itself is refused (``> lo`` instead of ``>= lo``).
        hi_open: the upper bound itself is refused.
        note: what special values mean, e.g. "0 disables evaluation" (shown in the error and the docs).
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    note: str = ""

    def contains(self, x: float) -> bool:
        """Whether ``x`` is finite and inside the interval."""
        if not math.isfinite(x):
            return False
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    def text(self) -> str:
        """The interval as docs/config.md shows it: ``>= 1``, ``> 0``, ``(0, 1]``, ``[0, 2147483648)``."""
        lo, hi = _num(self.lo), _num(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi}"
        return "any finite number"

    def requirement(self) -> str:
        """The error's wording: ``must be at least 1``, ``must be >= 0``, ``must be > 0``, ``must lie in (0, 1]``."""
        if self.lo is not None and self.hi is None and not self.lo_open and self.lo != 0:
            what = f"must be at least {_num(self.lo)}"
        elif self.lo is not None and self.hi is not None:
            what = f"must lie in {self.text()}"
        else:
            what = f"must be {self.text()}"
        return f"{what} ({self.note})" if self.note else what

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is refused (the text after ``key: ``), or None when it is accepted (None passes)."""
        if value is None or self.contains(float(value)):
            return None
        if math.isfinite(float(value)):
            return f"{self.requirement()}, got {value!r}"
        where = f"in {self.text()}" if self.lo is not None and self.hi is not None else self.text()
        note = f" ({self.note})" if self.note else ""
        return f"must be a finite number {where}{note}, got {value!r}"


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def setting(default: Any, doc: str, *, accepts: Range | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A spec field: its default, its meaning (``doc``, shown in docs/config.md), and what it accepts: a numeric
    ``Range`` or a tuple of string ``choices``; `check_fields` applies both."""
    return field(default=default, metadata={"doc": doc, "range": accepts, "choices": choices})


def check_fields(obj: Any, part: str = "") -> None:
    """Raise `SpecError` for the first field of the dataclass ``obj`` outside its metadata's range or choices."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        accepts: Range | None = f.metadata.get("range")
        why = accepts.problem(value) if accepts is not None else None
        choices = f.metadata.get("choices") or ()
        if why is None and choices and value not in choices:
            why = f"must be {', '.join(choices[:-1])} or {choices[-1]}, got {value!r}"
        if why is not None:
            raise SpecError(f.name, why, part)


_AT_LEAST_1 = Range(1)
_GROUP = Range(2, note="a group of one has no contrast")


@dataclass(frozen=True)
class BudgetSpec:
    """Budget shape (DESIGN.md section 2): M roots, N continuations per root, n rollouts per flat prompt; the
    native config's ``budget.*`` keys (with `PrefixSpec`'s)."""

    roots: int = setting(
        32,
        "M, root rollouts per step of the tree methods (TRACE, TreePO and the ablations); a multiple of "
        "``group_size``.",
        accepts=_AT_LEAST_1,
    )
    continuations: int = setting(
        2,
        "N, replays per root rollout: a prompt with m_i roots gets a replay budget of N * m_i.",
        accepts=Range(0, note="0 = no replays"),
    )
    group_size: int = setting(
        8, "n, rollouts per prompt of the uniform methods (GRPO, PCL, TreePO's roots).", accepts=_GROUP
    )
    replay_cost: float = setting(
        0.5,
        "cost of one replay in rollout-equivalents, in (0, 1] (paper: 0.5). Every method spends M (1 + N * "
        "replay_cost) per step; the flat ones on floor(M (1 + N * replay_cost) / n) prompts.",
        accepts=Range(0, 1, lo_open=True),
    )
    min_rollouts: int = setting(
        2, "smallest group of an active prompt for the allocating methods (paper: 2).", accepts=_GROUP
    )
    max_rollouts: int | None = setting(
        16,
        "cap on rollouts per prompt for the allocating methods (None: no cap); >= group_size.",
        accepts=Range(2, note="or none for no cap"),
    )
    accounting: str = setting(
        "paper",
        '"paper" (a replay costs replay_cost) or "token" (a replay costs its expected remaining tokens relative '
        "to a full rollout, in integer units for the exact prefix knapsack).",
        choices=("paper", "token"),
    )
    max_num_gen_batches: int = setting(
        0,
        "`dapo` only: the most batches of batch_size prompts x n rollouts one step may draw while filling its "
        "batch with mixed groups (verl's DAPO recipe name; docs/allocation.md); 0 = as many as the step's "
        "candidate pool holds (env.pool_size // batch_size).",
        accepts=Range(0, note="0 = the pool's limit"),
    )
    coverage: float = setting(
        0.25,
        "trace_adaptive only (ours, issue 58): the share of a step's active prompts drawn uniformly at random "
        "from the candidate pool and kept active whatever the predictor says, once its ranking test passes "
        "(before, the plan is GRPO's), in [0, 1], so selection cannot narrow the training distribution "
        '(docs/allocation.md, "trace_adaptive"); any other value with another method is a config error.',
        accepts=Range(0, 1, note="share of active prompts drawn uniformly"),
    )

    def __post_init__(self) -> None:
        check_fields(self, "budget")
        if self.max_rollouts is not None and self.max_rollouts < self.min_rollouts:
            raise SpecError(
                "max_rollouts",
                f"must be at least min_rollouts ({self.min_rollouts}), got {self.max_rollouts}",
                "budget",
            )


@dataclass(frozen=True)
class PrefixSpec:
    """Options of the prefix stage (stage 3: which anchors get replays) of the methods whose prefix strategy is
    `trace_rl.allocation.trace_prefixes` (trace, trace_prefix_only, trace_fresh); native keys ``budget.*``."""

    prefix_objective: str = setting(
        "paper",
        'what the prefix stage of trace, trace_prefix_only and trace_fresh maximises: "paper" (TRACE\'s sum_j 1 - '
        'q_j^k_j, the expected number of anchors whose ending flips) or "contrast" (ours: for a prompt whose roots '
        "all agree, the chance its tree becomes mixed, plus sibling_weight times the chance each anchor's sibling "
        "group becomes mixed; solved exactly; docs/allocation.md); contrast with any other method is a config error.",
        choices=("paper", "contrast"),
    )
    sibling_weight: float = setting(
        1.0,
        "contrast objective only: weight of the sibling-group terms against the tree term (>= 0; 1 = the expected "
        "number of sibling groups, root group included, that become mixed under TreeRPO).",
        accepts=Range(0),
    )
    state_evidence: bool = setting(
        False,
        "trace, trace_prefix_only and trace_fresh only (ours): value each anchor by the predictor's posterior "
        "given the root rollouts in its environment state (its own, and the other roots whose observations agree "
        "through its depth), not by the predictor's estimate alone; docs/predictor.md. A config error with "
        "predictor.name=ngram+minilm+group (its prior already reads those outcomes).",
    )

    def __post_init__(self) -> None:
        check_fields(self, "prefix")
        if self.prefix_objective == "paper" and self.sibling_weight != PrefixSpec.sibling_weight:
            raise SpecError(
                "sibling_weight",
                "applies to budget.prefix_objective=contrast only; leave it at its default with the paper's objective",
                "prefix",
            )


@dataclass(frozen=True)
class UpdateSpec:
    """The policy update (`trace_rl.train.update.policy_update`); the native config's ``optim.*`` keys but the
    optimizer's (lr, weight_decay)."""

    estimator: str = setting(
        "auto",
        '"auto" (grpo for flat methods; tree_grpo for bfcl, for trace_adaptive and where rows cannot be per turn, '
        'TRL\'s GRPOTrainer; treerpo otherwise: `resolve_estimator`), "grpo", "tree_grpo" or "treerpo".',
        choices=ESTIMATORS,
    )
    normalize_std: bool = setting(True, "divide by the group std (False: Dr. GRPO).")
    clip: float = setting(
        0.2,
        "PPO ratio clip epsilon in (0, 1): the surrogate clips exp(logp - old_logp) to [1 - clip, 1 + clip].",
        accepts=Range(0, 1, lo_open=True, hi_open=True),
    )
    kl_coef: float = setting(
        0.0,
        "weight of the k3 KL penalty toward a reference policy (`trace_rl.advantages.losses.kl_k3`): a frozen copy "
        "of the policy RL starts from (after the warm start); logged as update_ref_kl; 0 = none.",
        accepts=Range(0, note="0 = no KL penalty"),
    )
    loss_agg: str = setting(
        "token-mean",
        '"token-mean", "seq-mean-token-sum", "seq-mean-token-mean" or "seq-mean-token-sum-norm", with verl\'s '
        "meanings over the whole minibatch (`trace_rl.advantages.losses.aggregate_loss`).",
        choices=LOSS_AGGS,
    )
    epochs: int = setting(1, "passes over each step's paths.", accepts=Range(1, 100))
    minibatch: int = setting(
        0,
        "the older split, used only when minibatches is 0: a fixed number of paths per optimizer step, so the "
        "number of optimizer steps grows with the paths a method keeps (unequal between methods).",
        accepts=Range(0, note="0 = use optim.minibatches"),
    )
    max_grad_norm: float = setting(
        1.0,
        "gradient-norm clip of every optimizer step.",
        accepts=Range(0, lo_open=True, note="a clip of 0 or less zeroes or flips the gradient"),
    )
    micro_tokens: int = setting(
        4096,
        "padded tokens per forward pass: each minibatch's gradient is accumulated over passes of at most this many "
        "(rows x longest row) tokens, the same gradient with a fraction of the activation memory "
        '(`trace_rl.train.update.micro_batches`); 0 = the whole minibatch in one pass. Under packing "tree" the '
        "limit counts packed rows x longest packed row.",
        accepts=Range(0, note="0 = one forward pass per minibatch"),
    )
    minibatches: int = setting(
        1,
        "optimizer steps per epoch, the same for every method (paths split evenly); logged per step as "
        "`optimizer_steps`.",
        accepts=Range(0, 4096, note="0 = use optim.minibatch; more than the step's paths leaves some empty"),
    )
    zero_advantage_rows: str = setting(
        "count",
        '"count" (verl/TRL: paths with zero advantage count in the loss denominator) or "drop" (they are removed '
        "before the loss; `trace_rl.train.update`).",
        choices=("count", "drop"),
    )
    loss_scale_tokens: int = setting(
        0,
        'the constant L of "seq-mean-token-sum-norm" (Dr. GRPO); 0 = sampling.max_new_tokens x env.max_turns '
        "(the most model tokens an episode can generate). Must be 0 with the other modes.",
        accepts=Range(0, note="0 = sampling.max_new_tokens x env.max_turns"),
    )
    packing: str = setting(
        "tree",
        '"tree" (default): the paths of one prompt in a minibatch go through the model as one packed row holding '
        "each distinct prefix once (the prompt, a root's turns up to each replay's anchor), with an ancestry "
        "attention mask and per-path position ids, so log-probabilities, loss and gradient equal the padded "
        "update's up to rounding at a fraction of its compute (`trace_rl.train.packing`); a model whose attention "
        'cannot take the mask falls back to "none" with one log line. "none": one padded row per path. The warm '
        "start's SFT batches follow it (`trace_rl.policy.sft.batch_loss`): \"tree\" runs a batch's examples as one "
        "row without padding, each attending to its own tokens only (`trace_rl.policy.segments`; a model that "
        "cannot falls back to padded rows with one log line).",
        choices=("tree", "none"),
    )
    compile: bool = setting(
        False,
        "run the policy update's forward and backward through ``torch.compile(dynamic=True)`` "
        "(`trace_rl.policy.compiled`; needs a C++ compiler, an error if it cannot compile): the same "
        "log-probabilities, loss and gradient up to float32 rounding, a one-off compile of one to two minutes on "
        "the first update; about 0.87x the CPU time of an eager update on `multistep` trees at one thread, while "
        "at two threads it made the whole step 1.16x slower (docs/benchmarks.md). Off by default. The rollout "
        "engine and the reference model stay eager.",
    )

    def __post_init__(self) -> None:
        check_fields(self, "update")
        if (self.minibatches > 0) == (self.minibatch > 0):
            raise SpecError(
                "minibatches",
                "set exactly one of optim.minibatches (optimizer steps per RL step, equal for every method) and "
                "optim.minibatch (paths per step); set the other to 0",
                "update",
            )
        if self.loss_scale_tokens > 0 and self.loss_agg != "seq-mean-token-sum-norm":
            raise SpecError(
                "loss_scale_tokens",
                "only seq-mean-token-sum-norm uses a constant length normaliser; leave it 0",
                "update",
            )


@dataclass(frozen=True)
class SamplingSpec:
    """Rollout sampling of every model turn; the native config's ``sampling.*`` keys."""

    max_new_tokens: int = setting(
        128,
        "most tokens the policy generates per turn.",
        accepts=Range(1, note="and below the policy's context, checked when the policy loads"),
    )
    temperature: float = setting(
        1.0,
        "sampling temperature of the rollouts (> 0); log-probabilities are recomputed at it.",
        accepts=Range(0, lo_open=True, note="RL samples"),
    )
    top_p: float = setting(
        1.0,
        "nucleus sampling threshold in (0, 1] (1 = off; must be 1 with backend.kind=vllm).",
        accepts=Range(0, 1, lo_open=True),
    )
    max_concurrency: int = setting(
        64, "episodes in flight at once (root rollouts and replays).", accepts=_AT_LEAST_1
    )

    def __post_init__(self) -> None:
        check_fields(self, "sampling")


@dataclass(frozen=True)
class TraceSpec:
    """TRACE's settings as one record: what a training step needs besides its engines, environment and predictor.

    Attributes:
        method: the allocation method (`trace_rl.allocation.METHODS`).
        budget: the budget shape (`BudgetSpec`).
        prefix: the prefix stage's options (`PrefixSpec`).
        update: the policy update (`UpdateSpec`; ``estimator`` may be "auto", resolved by `resolved_update`).
        sampling: rollout sampling (`SamplingSpec`).
        max_turns: turns per episode before it ends with reward 0.

    Raises:
        SpecError: an unknown method, or an option the method cannot use (it would be silently ignored).
    """

    method: str = "trace"
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    update: UpdateSpec = field(default_factory=UpdateSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    max_turns: int = 4

    def __post_init__(self) -> None:
        from trace_rl.allocation import METHODS, units_per_rollout

        if self.method not in METHODS:
            raise SpecError("method", f"unknown method {self.method!r} (known: {', '.join(METHODS)})")
        if not 1 <= self.max_turns <= 1024:
            raise SpecError("max_turns", f"must lie in [1, 1024], got {self.max_turns!r}")
        using = ", ".join(m for m in METHODS if uses_allocate_prefixes(m))
        if self.prefix.prefix_objective != "paper" and not uses_allocate_prefixes(self.method):
            raise SpecError(
                "prefix_objective",
                f"contrast replaces the objective of allocate_prefixes, which method {self.method} does not use "
                f"(methods that do: {using})",
                "prefix",
            )
        if self.prefix.state_evidence and not uses_allocate_prefixes(self.method):
            raise SpecError(
                "state_evidence",
                f"values the anchors of allocate_prefixes, which method {self.method} does not use "
                f"(methods that do: {using})",
                "prefix",
            )
        if self.method != "trace_adaptive" and self.budget.coverage != BudgetSpec.coverage:
            raise SpecError(
                "coverage",
                f"applies to method=trace_adaptive only (its coverage floor); method {self.method} cannot use it",
                "budget",
            )
        if self.method != "dapo" and self.budget.max_num_gen_batches != 0:
            raise SpecError(
                "max_num_gen_batches",
                f"only method dapo draws extra generation batches; leave it 0 with method {self.method}",
                "budget",
            )
        if self.budget.accounting == "token" or METHODS[self.method].fresh:
            try:  # priced in integer units: the cost must be exact
                units_per_rollout(float(self.budget.replay_cost))
            except ValueError as exc:
                raise SpecError("replay_cost", str(exc), "budget") from None

    @classmethod
    def of(cls, *sources: Any, method: str, max_turns: int) -> TraceSpec:
        """The spec of flat settings: each part's fields from the attributes of ``sources`` of the same name (the
        native config's sections, an adapter's settings); a field none of them has keeps its default."""

        def part(kind: Any) -> Any:
            names = [f.name for f in dataclasses.fields(kind)]
            return kind(**{n: getattr(src, n) for src in sources for n in names if hasattr(src, n)})

        return cls(
            method=method,
            budget=part(BudgetSpec),
            prefix=part(PrefixSpec),
            update=part(UpdateSpec),
            sampling=part(SamplingSpec),
            max_turns=max_turns,
        )

    def shape(self) -> Any:
        """The `trace_rl.allocation.BudgetShape` of ``budget`` (ValueError where M, n and the caps do not fit)."""
        from trace_rl.allocation import BudgetShape

        b = self.budget
        return BudgetShape(
            roots=b.roots,
            continuations=b.continuations,
            group_size=b.group_size,
            replay_cost=b.replay_cost,
            min_rollouts=b.min_rollouts,
            max_rollouts=b.max_rollouts,
        )

    def estimator(self, env: str, *, node_level: bool = True) -> str:
        """``update.estimator`` resolved for tasks of environment ``env`` (`resolve_estimator`)."""
        return resolve_estimator(self.update.estimator, self.method, env, node_level=node_level)

    def resolved_update(self, env: str) -> UpdateSpec:
        """``update`` as the policy update reads it: the estimator resolved (`estimator`) and Dr. GRPO's constant
        L = max_new_tokens x max_turns where ``loss_scale_tokens`` is 0 with "seq-mean-token-sum-norm"."""
        scale = self.update.loss_scale_tokens
        if self.update.loss_agg == "seq-mean-token-sum-norm" and scale == 0:
            scale = self.sampling.max_new_tokens * self.max_turns
        return dataclasses.replace(self.update, estimator=self.estimator(env), loss_scale_tokens=scale)


def uses_allocate_prefixes(method: str) -> bool:
    """Whether ``method``'s prefix strategy is `trace_rl.allocation.trace_prefixes` (trace, trace_prefix_only,
    trace_fresh): the methods the prefix stage's options (`PrefixSpec`) apply to."""
    from trace_rl.allocation import METHODS, trace_prefixes

    m = METHODS[method]
    return m.prefixes is trace_prefixes and m.tail_prefixes is None


def resolve_estimator(estimator: str, method: str, env: str, *, node_level: bool = True) -> str:
    """The estimator a run trains with: ``estimator`` unless it is "auto", then grpo for flat methods (no
    replays), tree_grpo for trace_adaptive (its replays' sibling pairs keep a prompt-level term:
    docs/allocation.md), for bfcl, and where the consumer trains one row per path only (``node_level=False``:
    TRL's GRPOTrainer), treerpo otherwise (the paper's, for math and QA)."""
    from trace_rl.allocation import get_method

    if estimator != "auto":
        return estimator
    m = get_method(method)
    if m.adaptive:
        return "tree_grpo"
    if not m.has_replays:
        return "grpo"
    return "tree_grpo" if env == "bfcl" or not node_level else "treerpo"
