"""The supervised warm start before RL: SFT on gold trajectories with probes, and the predictor's warm start.

`warm_start_policy` trains the policy on the gold trajectories of the warm-start tasks (`trace_rl.policy.sft`;
no RL-pool or held-out prompt among them, `trace_rl.train.hygiene`), probing it (8 samples at temperature 1 per
probe prompt) until the copy-learning jump shows; it saves the policy to ``out/sft/policy`` with the outcomes of
one probe on the RL pool (``probe_outcomes.json``, sampled as the rollouts are: ``sampling.temperature`` and
``sampling.top_p``) and its manifest (``warm_start.json``: content hash and the config
that made it, `trace_rl.train.provenance`). Everything is written under ``out/sft.tmp/`` and moved to ``out/sft/``
at the end, so a warm start killed halfway (in SFT, in ``save_pretrained`` or in the probe) leaves no ``out/sft/``
that looks complete. `warm_start_predictor` trains the success predictor on the probe's outcomes before step 1.

The probe is generated once for every run that starts from the warm start, but only a run whose method reads the
predictor (``Method.uses_predictor``: trace, pcl, knapsack and the TRACE ablations) gains from it, so only such a
run pays for it (`probe_charge`): its run starts with the probe's rollouts spent (its RL budget is
``total_budget`` minus the probe) and its learning curve starts at the probe's cost (docs/training.md, "The
probe's charge").
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.errors import UserError
from trace_rl.train.config import TrainConfig
from trace_rl.train.provenance import write_manifest

PROBE_FILE = "probe_outcomes.json"


class WarmStartError(UserError):
    """The configured warm start did not reach any success on its probe prompts: RL would get no signal.

    A ValueError because the fix is a config value (more ``policy.sft_steps``, or ``policy.require_jump: false``);
    the CLI reports it as one error line.
    """


def warm_start_policy(
    cfg: TrainConfig,
    policy: Any,
    sft_tasks: Sequence[Any],
    rl_pool: Sequence[Any],
    out: Path,
    log: Callable[[str], None] = print,
) -> None:
    """Supervised warm start on the gold trajectories of ``sft_tasks``; verifies the copy-learning jump happened.

    ``sft_tasks`` and ``rl_pool`` come from `trace_rl.train.hygiene.run_tasks`: no warm-start prompt is an
    RL-pool or held-out prompt. Probes sample 8 episodes (temperature 1) on each of the first
    ``policy.sft_probe_prompts`` warm-start prompts. With ``policy.sft_stop_success`` > 0 it stops at the first
    probe meeting the stop rule (success and mixed share) and raises `WarmStartError` when the step cap comes
    first. Then one probe on the first ``policy.sft_probe_prompts`` RL-pool prompts, prompts the warm start
    never saw, sampled at the rollouts' ``sampling.temperature`` and ``sampling.top_p`` (the predictor it warms
    scores rollouts sampled that way; the stop rule's probes stay at temperature 1, where its thresholds are
    set), is saved with the policy (probe_outcomes.json, with the tokens and tool calls it generated) to
    warm-start the predictor, with the manifest (`trace_rl.train.provenance.write_manifest`).

    Writes ``out/sft.tmp/`` and moves it to ``out/sft/`` (replacing an earlier one) only at the end; when it
    raises `WarmStartError`, ``out/sft/`` holds sft.json and no policy.
    """
    from trace_rl.envs import gold_trajectory, make_env
    from trace_rl.policy.sft import build_sft_examples, train_sft
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.rollout.evaluate import spread_metrics

    pol = cfg.policy
    sft_dir = out / "sft"
    tmp = out / "sft.tmp"  # a kill leaves only this behind; the next warm start starts it afresh
    shutil.rmtree(tmp, ignore_errors=True)

    def publish() -> None:
        shutil.rmtree(sft_dir, ignore_errors=True)
        os.replace(tmp, sft_dir)

    tasks = list(sft_tasks)
    gold = [gold_trajectory(t, cfg.env.name) for t in tasks]
    examples = build_sft_examples(
        tasks,
        gold,
        lambda: make_env(cfg.env.name, **cfg.env.env_kwargs),
        policy.tokenizer,
        render_tools=pol.render_tools,
    )
    probe = tasks[: min(pol.sft_probe_prompts, len(tasks))]
    # the stop rule's probes at temperature 1 (its thresholds are set there); the RL-pool probe as the rollouts
    stop_sampling = SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens, temperature=1.0, seed=cfg.seed)
    last: dict[str, Any] = {}

    def evaluate(step: int) -> dict[str, float]:
        last["rewards"] = sample_probe(policy, cfg, probe, stop_sampling)[0]
        return spread_metrics(last["rewards"])

    stop_rule = pol.sft_stop_success > 0

    def stop(metrics: dict[str, float]) -> bool:
        return (
            metrics.get("mean_success", 0.0) >= pol.sft_stop_success
            and metrics.get("mixed_share", 0.0) >= pol.sft_stop_mixed
        )

    sft_cfg = _sft_config(cfg)
    rule = (
        f"; stops at probe success >= {pol.sft_stop_success:g} and mixed share >= {pol.sft_stop_mixed:g}"
        if stop_rule
        else ""
    )
    log(
        f"warm start: up to {pol.sft_steps} SFT steps on {len(examples)} gold trajectories{rule}"
        if stop_rule
        else f"warm start: {pol.sft_steps} SFT steps on {len(examples)} gold trajectories"
    )
    result = train_sft(
        policy.model,
        examples,
        sft_cfg,
        pad_id=int(policy.tokenizer.pad_token_id or 0),
        evaluate=evaluate,
        log=log,
        stop=stop if stop_rule else None,
    )
    final = result.history[-1] if result.history else {}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "sft.json").write_text(json.dumps(result.to_dict(), indent=2))
    log(
        f"warm start done in {result.seconds:.0f}s ({result.eval_seconds:.0f}s of it in probes) after "
        f"{result.steps} steps: success "
        f"{final.get('mean_success', float('nan')):.3f}, mixed share {final.get('mixed_share', float('nan')):.3f}"
    )
    problem = _missing_jump(pol, result, final) if pol.require_jump else None
    if problem is not None:
        publish()  # sft.json for the diagnosis; no policy, so nothing reuses it
        raise WarmStartError(problem)
    policy.save(tmp / "policy")
    cost: dict[str, int] = {}
    if rl_pool:  # the predictor needs outcomes on the RL pool, which the warm start never trained on
        probe = list(rl_pool[: min(pol.sft_probe_prompts, len(rl_pool))])
        last["rewards"], cost["tokens_generated"], cost["tool_calls"] = sample_probe(
            policy, cfg, probe, rollout_sampling(cfg)
        )
        pool = spread_metrics(last["rewards"])
        log(
            f"RL-pool probe ({len(probe)} training prompts x 8): success {pool['mean_success']:.3f}, "
            f"mixed share {pool['mixed_share']:.3f}, all solved {pool['all_solved_share']:.3f}, "
            f"all failed {pool['all_failed_share']:.3f}"
        )
    if "rewards" in last:
        save_probe_outcomes(tmp / "policy", probe, last["rewards"], step=result.steps, **cost)
    write_manifest(tmp / "policy", cfg, probe=bool(rl_pool))
    publish()


def _sft_config(cfg: TrainConfig) -> Any:
    """The warm start's `trace_rl.policy.sft.SFTConfig`: probes every ``policy.sft_eval_every`` steps under the
    stop rule, else ``policy.sft_evals`` probes, the last on the last step."""
    from trace_rl.policy.sft import SFTConfig

    pol = cfg.policy
    every = (
        pol.sft_eval_every if pol.sft_stop_success > 0 else max(math.ceil(pol.sft_steps / pol.sft_evals), 1)
    )
    return SFTConfig(
        steps=pol.sft_steps,
        batch_size=pol.sft_batch,
        lr=pol.sft_lr,
        eval_every=every,
        seed=cfg.seed,
        min_steps=pol.sft_min_steps,
        packing=cfg.optim.packing,  # the same loss up to rounding either way, like threads: not in the manifest
        dtype=pol.sft_dtype,
        compile=pol.sft_compile,  # the same loss up to rounding: not in the manifest (like packing)
    )


def _missing_jump(pol: Any, result: Any, final: dict[str, Any]) -> str | None:
    """Why a warm start that must show the copy-learning jump (``policy.require_jump``) did not, or None: the
    stop rule's cap reached first, or no success at all on the last probe."""
    if pol.sft_stop_success > 0 and not result.stopped:
        return (
            f"the SFT warm start reached its cap of {pol.sft_steps} steps at probe success "
            f"{final.get('mean_success', 0.0):.3f} / mixed share {final.get('mixed_share', 0.0):.3f}, short of "
            f"the stop rule ({pol.sft_stop_success:g} / {pol.sft_stop_mixed:g}); raise policy.sft_steps, or "
            "set policy.require_jump=false"
        )
    if final.get("mean_success", 0.0) <= 0.0:
        return (
            "the SFT warm start ended without a single success on its probe prompts (no copy-learning jump); "
            "raise policy.sft_steps or set policy.require_jump=false"
        )
    return None


def rollout_sampling(cfg: TrainConfig) -> Any:
    """The `SamplingParams` of the RL-pool probe: the rollouts' ``sampling.temperature`` and ``sampling.top_p``,
    ``sampling.max_new_tokens`` per turn, seeded by the run's ``seed``."""
    from trace_rl.rollout.backends import SamplingParams

    return SamplingParams(
        max_new_tokens=cfg.sampling.max_new_tokens,
        temperature=cfg.sampling.temperature,
        top_p=cfg.sampling.top_p,
        seed=cfg.seed,
    )


def sample_probe(
    policy: Any, cfg: TrainConfig, prompts: Sequence[Any], sampling: Any
) -> tuple[Any, int, int]:
    """One probe of the warm start: 8 episodes of ``policy`` per prompt on the local engine, sampled with
    ``sampling`` (a `SamplingParams`), with ``cfg.env``'s environment and turn limit.

    Returns:
        (rewards as a float64 array (P, 8) in prompt order, sampled tokens, tool calls) of the whole probe.
    """
    from trace_rl.envs import make_env
    from trace_rl.rollout.agent import ChatCodec
    from trace_rl.rollout.engine import LocalEngine
    from trace_rl.rollout.evaluate import sample_episodes

    codec = ChatCodec(policy.tokenizer, render_tools=cfg.policy.render_tools)
    episodes = asyncio.run(
        sample_episodes(
            LocalEngine(policy, max_batch=64),
            lambda: make_env(cfg.env.name, **cfg.env.env_kwargs),
            codec,
            list(prompts),
            sampling,
            samples=8,
            max_turns=cfg.env.max_turns,
        )
    )
    rewards = np.asarray([e.reward for e in episodes], np.float64).reshape(len(prompts), 8)
    tokens = sum(e.sampled_tokens for e in episodes)
    calls = sum(_tool_calls(t.info) for e in episodes for t in e.turns)
    return rewards, tokens, calls


def probe_charge(path: Path) -> dict[str, Any]:
    """What the probe in ``path`` (probe_outcomes.json) generated, charged to a run that reads it:
    ``rollouts`` (P x S episodes), ``budget`` (rollout-equivalents: each is a full rollout, cost 1), and
    ``tokens_generated`` and ``tool_calls`` (None where the file predates their recording: unknown)."""
    data = json.loads(path.read_text())
    rollouts = int(sum(len(r) for r in data["rewards"]))
    return {
        "rollouts": rollouts,
        "budget": float(rollouts),
        "tokens_generated": data.get("tokens_generated"),
        "tool_calls": data.get("tool_calls"),
    }


def warm_start_predictor(
    predictor: Any,
    online: Any,
    path: Path,
    log: Callable[[str], None] = print,
    *,
    charged: bool = False,
) -> dict[str, Any]:
    """Train the predictor on the warm start's probe outcomes (training prompts only; never held-out ones).

    Returns the log record (kind ``predictor_warm_start``, step 0). With ``charged`` (the run's method reads the
    predictor) it carries the probe's cost (`probe_charge`) as ``charged_rollouts``, ``charged_budget``,
    ``charged_tokens`` and ``charged_tool_calls`` (None: unknown), which `trace_rl.metrics.curves` adds before
    the run's first step; without, those fields are 0.
    """
    from trace_rl.predictor import NodeExample, serialize_anchor

    data = json.loads(path.read_text())
    max_chars = predictor.max_chars
    examples = [
        NodeExample(serialize_anchor(prompt, [], max_chars=max_chars), float(np.mean(r)), 0, float(len(r)))
        for prompt, r in zip(data["prompts"], data["rewards"], strict=True)
    ]
    metrics = online.observe_step(examples)
    record = {
        "kind": "predictor_warm_start",
        "step": 0,
        "source": str(path),
        "examples": len(examples),
        "samples_per_prompt": int(np.mean([len(r) for r in data["rewards"]])) if examples else 0,
        "policy_sft_step": data.get("step"),
        **charge_fields(probe_charge(path) if charged else None),
        **{k.replace("/", "_"): v for k, v in metrics.items() if isinstance(v, int | float)},
    }
    log(
        f"predictor warm start: {len(examples)} training prompts x "
        f"{record['samples_per_prompt']} samples from {path}"
    )
    return record


def charge_fields(charge: dict[str, Any] | None) -> dict[str, Any]:
    """The ``charged_*`` fields of a ``predictor_warm_start`` record for a `probe_charge` (zeros for None)."""
    if charge is None:
        return {
            "charged": False,
            "charged_rollouts": 0,
            "charged_budget": 0.0,
            "charged_tokens": 0,
            "charged_tool_calls": 0,
        }
    return {
        "charged": True,
        "charged_rollouts": charge["rollouts"],
        "charged_budget": charge["budget"],
        "charged_tokens": charge["tokens_generated"],
        "charged_tool_calls": charge["tool_calls"],
    }


def save_probe_outcomes(
    folder: Path,
    tasks: Sequence[Any],
    rewards: Any,
    *,
    step: int,
    tokens_generated: int | None = None,
    tool_calls: int | None = None,
) -> None:
    """Write the warm start's last probe (task ids, prompts, rewards (P, S), and what it generated: sampled
    tokens and tool calls, when known) next to the policy it measured."""
    data: dict[str, Any] = {
        "step": step,
        "task_ids": [t.id for t in tasks],
        "prompts": [t.prompt for t in tasks],
        "rewards": np.asarray(rewards, dtype=np.float64).tolist(),
    }
    if tokens_generated is not None:
        data["tokens_generated"] = int(tokens_generated)
    if tool_calls is not None:
        data["tool_calls"] = int(tool_calls)
    (folder / PROBE_FILE).write_text(json.dumps(data))


def _tool_calls(info: dict[str, Any]) -> int:
    """Tool calls a turn made (envs list one tool result per call in info["tool_results"])."""
    results = info.get("tool_results")
    return len(results) if isinstance(results, list) else 0
