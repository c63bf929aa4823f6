"""The config's sections: frozen dataclasses, the one source of every key's type, default and meaning.

`TrainConfig` holds one instance of each section. TRACE's own settings (``budget.*``, ``optim.*`` but the
optimizer's, ``sampling.*``) are declared once, in `trace_rl.spec`: those sections subclass its parts, and
`TrainConfig.spec` is the `TraceSpec` they make. Building, validating and loading a config live elsewhere
(`trace_rl.train.config`, `config_parse`, `config_check`); this module imports nothing from trace_rl but the spec,
so every one of them can import it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trace_rl.spec import (
    BudgetSpec,
    PrefixSpec,
    Range,
    SamplingSpec,
    SpecError,
    TraceSpec,
    UpdateSpec,
    check_fields,
)

__all__ = [
    "BackendSection",
    "BudgetSection",
    "EnvSection",
    "OptimSection",
    "PolicySection",
    "PredictorSection",
    "SamplingSection",
    "TrainConfig",
]

_NEURAL = {
    "variants": ("neural",),
    "why": "has no effect on the convex predictor {s.name!r} (one refit per step on the outcomes of "
    "predictor.history_window steps); leave it at its default {default!r} or pick a neural predictor",
}
_CONVEX = {
    "variants": ("convex",),
    "why": "applies to the convex predictors ({convex}) only; a neural predictor keeps predictor.buffer_steps steps",
}
_LAUNCHED = {
    "variants": ("launched",),
    "why": "applies only to vLLM servers that trace-rl launches (backend.kind=vllm, backend.urls empty); with "
    "backend.kind={s.kind}{urls_set} it cannot take effect: remove it",
}
_SERVERS = {
    "variants": ("launched", "servers"),
    "why": "the local engine generates in-process; set backend.kind=vllm or sglang to use servers",
}
_IN_FLIGHT = {
    "why": "applies to server replicas only; the local engine batches sampling.max_concurrency requests"
}


def _of(
    variant: dict[str, Any], default: Any, accepts: Range | None = None, choices: tuple[str, ...] = ()
) -> Any:
    """A field of one section ``variant`` (`_only_variant`), with its accepted range or choices (`check_fields`)."""
    return field(default=default, metadata={**variant, "range": accepts, "choices": choices})


def _only_variant(section: Any, variant: str) -> None:
    """The sections with one variant per kind (a predictor is convex or neural; a backend local, launched vLLM
    or running servers): a field whose metadata names other ``variants`` must keep its default, since it cannot
    take effect (`SpecError` with the field's ``why``)."""
    from trace_rl.predictor.names import CONVEX_NAMES

    check_fields(section)
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if variant in f.metadata.get("variants", (variant,)) or value == f.default:
            continue
        urls_set = " and backend.urls set" if getattr(section, "urls", "").strip() else ""
        why = f.metadata["why"].format(
            s=section, default=f.default, convex=", ".join(CONVEX_NAMES), urls_set=urls_set
        )
        raise SpecError(f.name, why)


@dataclass(frozen=True)
class EnvSection:
    """The environment and its task pool.

    Attributes:
        name: environment name (math_python, math_steps, bfcl, multihop_qa), or ``module:factory`` for your own
            (`trace_rl.envs`: the module on PYTHONPATH also defines ``load_tasks`` and, for the SFT warm start,
            ``gold_trajectory``).
        max_turns: turns per episode before it ends with reward 0.
        pool_size: candidate prompts scored per step (the pool the root allocation chooses from).
        train_limit: cap on training tasks loaded (None: all).
        eval_tasks: held-out tasks for the periodic pass@1 evaluation (0 disables it).
        eval_temperature: 0 evaluates greedily; > 0 samples at that temperature (pass@1 = mean reward of
            ``eval_samples`` seeded samples per task, the same seeds at every evaluation).
        eval_samples: samples per held-out task (1 when greedy).
        task_kwargs: extra keyword arguments for the environment's task loader.
        env_kwargs: extra keyword arguments for the environment itself (``make_env(name, **env_kwargs)``, in
            training, evaluation and the warm start), e.g. multihop_qa's ``corpus_path`` or ``retriever_url``
            (docs/environments.md); ``max_turns`` is ``env.max_turns``. Checked against the environment's
            signature (and its ``check_settings``) when the config is validated.
        data_seed: seed of the task data: the held-out tasks (test split), the RL pool (train split) and the
            warm start's stream (train split at ``data_seed + trace_rl.train.hygiene.SFT_SEED_OFFSET``). It does
            not change with the run's ``seed``, which only orders the RL pool and drives sampling, so the runs
            of one ``trace-rl compare`` evaluate on the same held-out tasks and share the RL pool. The three lists
            share no prompt text (`trace_rl.train.hygiene.run_tasks`).
    """

    name: str = "math_python"
    max_turns: int = 4
    pool_size: int = 32
    train_limit: int | None = 2000
    eval_tasks: int = 64
    eval_temperature: float = 0.0
    eval_samples: int = 1
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    data_seed: int = 0


@dataclass(frozen=True)
class PolicySection:
    """The policy and its supervised warm start.

    Attributes:
        name: "tiny", "smollm2-135m-instruct" or a local Hugging Face checkpoint path.
        sft_steps: optimizer steps of supervised warm start on gold trajectories before RL (0: none).
        sft_lr: peak learning rate of the warm start.
        sft_batch: sequences per warm-start step.
        sft_evals: probe evaluations during the warm start (evenly spaced, the last at its end): 32 training
            prompts x 8 samples at temperature 1, about half a minute each for the tiny policy on 2 cores.
        require_jump: stop with an error when the warm start ends without any success on its probe prompts.
        render_tools: render the tasks' tool schemas into the system prompt (False keeps prompts short for
            small from-scratch policies, which learn the tool format from the warm start).
        sft_stop_success: when > 0, ``sft_steps`` is a cap and the warm start stops at the first probe (every
            ``sft_eval_every`` steps from ``sft_min_steps``) with mean success >= this and mixed share >=
            ``sft_stop_mixed``; reaching the cap without it is an error (with ``require_jump``). 0: run exactly
            ``sft_steps`` steps with ``sft_evals`` probes.
        sft_stop_mixed: the stop rule's minimum share of probe prompts with mixed outcomes.
        sft_min_steps: no stop before this step.
        sft_eval_every: probe period (steps) of the stop rule.
        sft_probe_prompts: prompts in each probe, 8 samples each: the stop rule's probes on warm-start prompts at
            temperature 1, then one probe on RL-pool prompts sampled as the rollouts (``sampling.temperature``,
            ``sampling.top_p``), saved with the policy to warm-start the predictor (``predictor.warm_start``).
        sft_task_kwargs: task-loader arguments of the warm start's gold trajectories when they should differ
            from the RL pool's (``env.task_kwargs``), e.g. SFT on short expressions and RL on a wider mix. The
            stop-rule probes then use SFT prompts, and one more probe on the RL pool feeds the predictor.
            None: the RL pool's tasks.
        sft_dtype: "float32" (default) or "bfloat16": the warm start's forward and backward under
            `torch.autocast` to bfloat16 (mixed precision: float32 weights, AdamW state and loss), about 1.6x
            faster per step on a CPU with AMX or AVX512-BF16 (docs/benchmarks.md); it changes the warm start's
            trajectory, so it is part of the warm start's recorded config. RL updates and rollouts stay float32.
        sft_compile: run the warm start's SFT forward and backward through ``torch.compile(dynamic=True)``
            (needs a C++ compiler and a warm start, ``sft_steps`` > 0; an error if it cannot compile). The same
            loss up to rounding (not part of the warm start's recorded config, like ``optim.packing`` and
            ``threads``), a one-off compile of 1-2 min; with ``sft_dtype: bfloat16`` about 0.43x the CPU time of
            an eager float32 SFT step on `multistep` at one thread (docs/benchmarks.md). Off by default.
    """

    name: str = "tiny"
    sft_steps: int = 0
    sft_lr: float = 2e-3
    sft_batch: int = 8
    sft_evals: int = 4
    require_jump: bool = True
    render_tools: bool = True
    sft_stop_success: float = 0.0
    sft_stop_mixed: float = 0.0
    sft_min_steps: int = 0
    sft_eval_every: int = 100
    sft_probe_prompts: int = 32
    sft_task_kwargs: dict[str, Any] | None = None
    sft_dtype: str = "float32"
    sft_compile: bool = False


@dataclass(frozen=True)
class SamplingSection(SamplingSpec):
    """Rollout sampling (`trace_rl.spec.SamplingSpec`: its fields, their meanings in their metadata)."""


@dataclass(frozen=True)
class BudgetSection(PrefixSpec, BudgetSpec):
    """Budget shape (DESIGN.md section 2) and the prefix stage's options (`trace_rl.spec`).

    The fields of `trace_rl.spec.BudgetSpec` and `trace_rl.spec.PrefixSpec`, their meanings in their
    metadata.
    """

    def __post_init__(self) -> None:
        BudgetSpec.__post_init__(self)
        PrefixSpec.__post_init__(self)


@dataclass(frozen=True)
class OptimSection(UpdateSpec):
    """Policy update (`trace_rl.spec.UpdateSpec`, meanings in its fields' metadata) and the optimizer.

    Attributes:
        lr: AdamW learning rate of the policy (betas 0.9, 0.95).
        weight_decay: AdamW's decoupled weight decay of the RL policy update. The default 0.01 is torch's AdamW
            default, which every run before this key existed used implicitly (results stay comparable); the
            supervised warm start uses 0 (`trace_rl.policy.sft.SFTConfig`). verl's actor default is 0.01 too.
    """

    lr: float = 5e-5
    weight_decay: float = 0.01


@dataclass(frozen=True)
class PredictorSection:
    """The shared success predictor (trace_rl.predictor).

    Attributes:
        name: backbone ("tiny", "minilm", a local Hugging Face path, or a convex predictor: "ngram",
            "minilm-head", "ngram+minilm", with the live policy's hidden state at the anchor "state-head",
            "ngram+minilm+state", or with the other root rollouts of the anchor's tree "ngram+minilm+group" and
            "ngram+minilm+group-prior" (without the outcomes of the anchor's own state, the prior that
            budget.state_evidence updates with them); see `trace_rl.predictor.build_predictor`).
        prefix_share: share of prefix nodes in each predictor batch (paper: about 6%).
        buffer_steps: recent steps kept in the replay buffer of the neural predictors (the convex predictors keep
            their own window, history_window).
        updates: predictor optimizer steps after each training step (exactly this many; the convex predictors
            refit once per step on the outcomes they keep, see history_window).
        batch_size: examples per predictor step.
        lr: predictor learning rate (unused by the convex predictors).
        warm_start: before step 1, train the predictor on the outcomes of the policy warm start's last probe
            (training prompts; saved with the warm-started policy as probe_outcomes.json).
        history_window: convex predictors only: steps (policy versions) whose outcomes they keep and refit on;
            0 keeps every outcome (refit time then grows with the run). docs/predictor.md.
        history_decay: convex predictors only: weight multiplier per step of age inside the window, in (0, 1].
    """

    name: str = "tiny"
    prefix_share: float = _of(_NEURAL, 0.06, Range(0, 1))
    buffer_steps: int = _of(_NEURAL, 4, Range(1))
    updates: int = _of(_NEURAL, 8, Range(0, 10_000, note="0 = the predictor never trains"))
    batch_size: int = _of(_NEURAL, 32, Range(1))
    lr: float = _of(_NEURAL, 1e-3, Range(0, lo_open=True))
    warm_start: bool = True
    history_window: int = _of(_CONVEX, 20, Range(0, note="0 = keep every outcome"))
    history_decay: float = _of(_CONVEX, 1.0, Range(0, 1, lo_open=True))

    @property
    def variant(self) -> str:
        """ "convex" (`trace_rl.predictor.names.CONVEX_NAMES`: one refit per step) or "neural"."""
        from trace_rl.predictor.names import CONVEX_NAMES

        return "convex" if self.name in CONVEX_NAMES else "neural"

    def __post_init__(self) -> None:
        _only_variant(self, self.variant)


@dataclass(frozen=True)
class BackendSection:
    """Where rollouts are generated (docs/serving.md).

    Attributes:
        kind: "local" (the in-process LocalEngine), "vllm" (vLLM servers through a ReplicaPool) or "sglang"
            (running SGLang servers through a ReplicaPool; ``urls`` required: trace-rl launches only vLLM).
        urls: comma-separated base URLs of running servers; empty = the trainer launches ``replicas`` servers
            from .venv-vllm (``make vllm``; kind vllm only) and stops them when the run ends, also on error or
            interrupt.
        replicas: servers the trainer launches when ``urls`` is empty.
        max_in_flight: requests in flight per replica.
        dtype: dtype of launched servers ("float32": logprobs as the trainer computes them; or "bfloat16").
        threads: CPU threads per launched server (OMP_NUM_THREADS).
        nice: niceness of launched servers.
        kv_cache_gib: KV cache of each launched server in whole GiB (VLLM_CPU_KVCACHE_SPACE). Its capacity in
            tokens is GiB * 2**30 / (2 * layers * kv_heads * head_dim * dtype bytes): 1 GiB holds 23,296 tokens
            of SmolLM2 in fp32. A step whose roots hold more tokens than that evicts prefixes before their
            replays run (least recently used first) and lowers backend_replay_cache_hit_rate.
    """

    kind: str = field(default="local", metadata={"choices": ("local", "vllm", "sglang")})
    urls: str = _of(_SERVERS, "")
    replicas: int = _of(_LAUNCHED, 1, Range(1, 1024, note="servers launched on this machine"))
    max_in_flight: int = _of(_SERVERS | _IN_FLIGHT, 64, Range(1))
    dtype: str = _of(_LAUNCHED, "float32", choices=("float32", "bfloat16"))
    threads: int = _of(_LAUNCHED, 1, Range(1, 1024, note="more threads than cores only oversubscribes them"))
    nice: int = _of(_LAUNCHED, 0, Range(0, 19, note="niceness only lowers priority"))
    kv_cache_gib: int = _of(_LAUNCHED, 1, Range(1, 4096, note="whole GiB per launched server"))

    @property
    def variant(self) -> str:
        """ "local" (the in-process engine), "launched" (vLLM servers trace-rl starts: kind vllm, no urls) or
        "servers" (running servers at ``urls``)."""
        if self.kind == "local":
            return "local"
        return "launched" if self.kind == "vllm" and not self.urls.strip() else "servers"

    def __post_init__(self) -> None:
        _only_variant(self, self.variant)


@dataclass(frozen=True)
class TrainConfig:
    """Everything one `trace-rl train` run needs.

    Attributes:
        method: the allocation method (`trace_rl.allocation.METHODS`): grpo, pcl, knapsack, treepo, trace,
            trace_root_only, trace_prefix_only, trace_fresh, dapo, branpo, prefix_sampling.
        steps: RL steps.
        total_budget: rollout-equivalents generated over the run; > 0 stops the run once the next step could not
            be paid in full (0 = no limit).
        seed: seed of the data order, sampling, model init and every other random choice of the run.
        eval_every: held-out evaluation period in steps (also before step 1 and after the last); 0 disables it.
        checkpoint_every: checkpoint period in steps (the last step is always saved).
        threads: torch CPU threads; 0 = min(cores, 4). Use 1 per run when runs share a small machine.
        device: the policy's torch device: "auto" (cuda when available, else cpu), "cpu", "cuda" or "cuda:N".
        preset: where the defaults came from: the preset's name, or "custom" (set by the loader, not by hand).
    """

    method: str = "trace"
    steps: int = 20
    total_budget: float = 0.0
    seed: int = 0
    eval_every: int = 5
    checkpoint_every: int = 5
    threads: int = 0
    device: str = "auto"
    preset: str = "custom"
    env: EnvSection = field(default_factory=EnvSection)
    policy: PolicySection = field(default_factory=PolicySection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    optim: OptimSection = field(default_factory=OptimSection)
    predictor: PredictorSection = field(default_factory=PredictorSection)
    backend: BackendSection = field(default_factory=BackendSection)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def spec(self) -> TraceSpec:
        """The run's `TraceSpec` (built, hence checked, at each access: `validate` reports its errors by key)."""
        return TraceSpec.of(
            self.budget, self.optim, self.sampling, method=self.method, max_turns=self.env.max_turns
        )


SPEC_SECTIONS = {"budget": "budget", "prefix": "budget", "update": "optim", "sampling": "sampling", "": ""}
"""The config section holding each `TraceSpec` part's keys (``""``: the spec's own, ``method`` at the top and
``max_turns`` in ``env``): `trace_rl.spec.SpecError` -> the key as a config names it (`spec_key`)."""


def spec_key(part: str, key: str) -> str:
    """The config key of field ``key`` of `TraceSpec` part ``part``: ``optim.minibatches``, ``env.max_turns``."""
    if part == "" and key == "max_turns":
        return "env.max_turns"
    section = SPEC_SECTIONS[part]
    return f"{section}.{key}" if section else key
