"""The config's sections: frozen dataclasses, the one source of every key's type, default and meaning.

`TrainConfig` holds one instance of each section. Building, validating and loading a config live elsewhere
(`trace_rl.train.config`, `config_parse`, `config_check`); this module imports nothing from trace_rl, so every
one of them can import it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

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
class SamplingSection:
    """Rollout sampling.

    Attributes:
        max_new_tokens: most tokens the policy generates per turn.
        temperature: sampling temperature of the rollouts (> 0); log-probabilities are recomputed at it.
        top_p: nucleus sampling threshold in (0, 1] (1 = off; must be 1 with backend.kind=vllm).
        max_concurrency: episodes in flight at once (root rollouts and replays).
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_concurrency: int = 64


@dataclass(frozen=True)
class BudgetSection:
    """Budget shape (DESIGN.md section 2): M roots, N continuations per root, n rollouts per flat prompt.

    Attributes:
        roots: M, root rollouts per step of the tree methods (TRACE, TreePO and the ablations); a multiple of
            ``group_size``.
        continuations: N, replays per root rollout: a prompt with m_i roots gets a replay budget of N * m_i.
        group_size: n, rollouts per prompt of the uniform methods (GRPO, PCL, TreePO's roots).
        replay_cost: cost of one replay in rollout-equivalents, in (0, 1] (paper: 0.5). Every method spends
            M (1 + N * replay_cost) per step; the flat ones on floor(M (1 + N * replay_cost) / n) prompts.
        min_rollouts: smallest group of an active prompt for the allocating methods (paper: 2).
        max_rollouts: cap on rollouts per prompt for the allocating methods (None: no cap); >= group_size.
        accounting: "paper" (a replay costs replay_cost) or "token" (a replay costs its expected remaining
            tokens relative to a full rollout, in integer units for the exact prefix knapsack).
        max_num_gen_batches: `dapo` only: the most batches of batch_size prompts x n rollouts one step may draw
            while filling its batch with mixed groups (verl's DAPO recipe name; docs/allocation.md); 0 = as many
            as the step's candidate pool holds (env.pool_size // batch_size).
        prefix_objective: what the prefix stage of trace, trace_prefix_only and trace_fresh maximises: "paper"
            (TRACE's sum_j 1 - q_j^k_j, the expected number of anchors whose ending flips) or "contrast" (ours: for a
            prompt whose roots all agree, the chance its tree becomes mixed, plus sibling_weight times the chance
            each anchor's sibling group becomes mixed; solved exactly; docs/allocation.md); contrast with any
            other method is a config error.
        sibling_weight: contrast objective only: weight of the sibling-group terms against the tree term (>= 0;
            1 = the expected number of sibling groups, root group included, that become mixed under TreeRPO).
        state_evidence: trace, trace_prefix_only and trace_fresh only (ours): value each anchor by the predictor's
            posterior given the root rollouts in its environment state (its own, and the other roots whose
            observations agree through its depth), not by the predictor's estimate alone; docs/predictor.md. A
            config error with predictor.name=ngram+minilm+group (its prior already reads those outcomes).
        coverage: trace_adaptive only (ours, issue 58): the share of a step's active prompts drawn uniformly at
            random from the candidate pool and kept active whatever the predictor says, once its ranking test
            passes (before, the plan is GRPO's), in [0, 1], so selection cannot narrow the training distribution
            (docs/allocation.md, "trace_adaptive"); any other value with another method is a config error.
    """

    roots: int = 32
    continuations: int = 2
    group_size: int = 8
    replay_cost: float = 0.5
    min_rollouts: int = 2
    max_rollouts: int | None = 16
    accounting: str = "paper"
    max_num_gen_batches: int = 0
    prefix_objective: str = "paper"
    sibling_weight: float = 1.0
    state_evidence: bool = False
    coverage: float = 0.25


@dataclass(frozen=True)
class OptimSection:
    """Policy update.

    Attributes:
        lr: AdamW learning rate of the policy (betas 0.9, 0.95).
        weight_decay: AdamW's decoupled weight decay of the RL policy update. The default 0.01 is torch's AdamW
            default, which every run before this key existed used implicitly (results stay comparable); the
            supervised warm start uses 0 (`trace_rl.policy.sft.SFTConfig`). verl's actor default is 0.01 too.
        clip: PPO ratio clip epsilon in (0, 1): the surrogate clips exp(logp - old_logp) to [1 - clip, 1 + clip].
        kl_coef: weight of the k3 KL penalty toward a reference policy (`trace_rl.advantages.losses.kl_k3`):
            a frozen copy of the policy RL starts from (after the warm start); logged as update_ref_kl; 0 = none.
        epochs: passes over each step's paths.
        max_grad_norm: gradient-norm clip of every optimizer step.
        estimator: "auto" (treerpo for math/QA, tree_grpo for function calling, grpo for flat methods),
            "grpo", "tree_grpo" or "treerpo".
        normalize_std: divide by the group std (False: Dr. GRPO).
        loss_agg: "token-mean", "seq-mean-token-sum", "seq-mean-token-mean" or "seq-mean-token-sum-norm", with
            verl's meanings over the whole minibatch (`trace_rl.advantages.losses.aggregate_loss`).
        zero_advantage_rows: "count" (verl/TRL: paths with zero advantage count in the loss denominator) or
            "drop" (they are removed before the loss; `trace_rl.train.update`).
        loss_scale_tokens: the constant L of "seq-mean-token-sum-norm" (Dr. GRPO); 0 = sampling.max_new_tokens
            x env.max_turns (the most model tokens an episode can generate). Must be 0 with the other modes.
        minibatches: optimizer steps per epoch, the same for every method (paths split evenly); logged per step
            as `optimizer_steps`.
        minibatch: the older split, used only when minibatches is 0: a fixed number of paths per optimizer step,
            so the number of optimizer steps grows with the paths a method keeps (unequal between methods).
        micro_tokens: padded tokens per forward pass: each minibatch's gradient is accumulated over passes of at
            most this many (rows x longest row) tokens, the same gradient with a fraction of the activation memory
            (`trace_rl.train.update.micro_batches`); 0 = the whole minibatch in one pass. Under packing "tree" the
            limit counts packed rows x longest packed row.
        packing: "tree" (default): the paths of one prompt in a minibatch go through the model as one packed row
            holding each distinct prefix once (the prompt, a root's turns up to each replay's anchor), with an
            ancestry attention mask and per-path position ids, so log-probabilities, loss and gradient equal the
            padded update's up to rounding at a fraction of its compute (`trace_rl.train.packing`); a model whose
            attention cannot take the mask falls back to "none" with one log line. "none": one padded row per path.
            The warm start's SFT batches follow it (`trace_rl.policy.sft.batch_loss`): "tree" runs a batch's
            examples as one row without padding, each attending to its own tokens only
            (`trace_rl.policy.segments`; a model that cannot falls back to padded rows with one log line).
        compile: run the policy update's forward and backward through ``torch.compile(dynamic=True)``
            (`trace_rl.policy.compiled`; needs a C++ compiler, an error if it cannot compile): the same
            log-probabilities, loss and gradient up to float32 rounding, a one-off compile of one to two minutes
            on the first update; about 0.87x the CPU time of an eager update on `multistep` trees at one thread,
            while at two threads it made the whole step 1.16x slower (docs/benchmarks.md). Off by default. The rollout engine and the reference model stay eager.
    """

    lr: float = 5e-5
    clip: float = 0.2
    kl_coef: float = 0.0
    loss_agg: str = "token-mean"
    estimator: str = "auto"
    normalize_std: bool = True
    epochs: int = 1
    minibatch: int = 0
    max_grad_norm: float = 1.0
    micro_tokens: int = 4096
    minibatches: int = 1
    zero_advantage_rows: str = "count"
    loss_scale_tokens: int = 0
    weight_decay: float = 0.01
    packing: str = "tree"
    compile: bool = False


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
    prefix_share: float = 0.06
    buffer_steps: int = 4
    updates: int = 8
    batch_size: int = 32
    lr: float = 1e-3
    warm_start: bool = True
    history_window: int = 20
    history_decay: float = 1.0


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

    kind: str = "local"
    urls: str = ""
    replicas: int = 1
    max_in_flight: int = 64
    dtype: str = "float32"
    threads: int = 1
    nice: int = 0
    kv_cache_gib: int = 1


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
