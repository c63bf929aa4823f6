"""How the RL-pool probes in this folder were made (issue 37 candidates c7 and c8, 2026-12-06; not a shipped tool).

Copies a warm-started policy folder and redoes its RL-pool probe (the predictor's warm-start data) with the sampling
of the given config, through the same `sample_episodes` call `trace_rl.train.warm_start` makes since the probe
samples at ``sampling.temperature`` (before, it sampled at temperature 1 always). The copy has no manifest.

    PYTHONPATH=src python results/c37cand/probes/reprobe_scratch.py results/c37cand/warm_start/sft/policy OUT \
      sampling.temperature=1.5 policy.sft_stop_success=0.4 policy.sft_stop_mixed=0.3 [env.task_kwargs.config.max_terms=6]
"""

import asyncio
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from trace_rl.envs import make_env
from trace_rl.policy import load_policy
from trace_rl.rollout.agent import ChatCodec
from trace_rl.rollout.backends import SamplingParams
from trace_rl.rollout.engine import LocalEngine
from trace_rl.rollout.evaluate import sample_episodes, spread_metrics
from trace_rl.train.config import load_config
from trace_rl.train.hygiene import run_tasks
from trace_rl.train.warm_start import _tool_calls, save_probe_outcomes

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_config(preset="agentic", overrides=sys.argv[3:])
torch.set_num_threads(1)
shutil.copytree(src, dst)
(dst / "warm_start.json").unlink(missing_ok=True)
pool = list(run_tasks(cfg).rl_pool[: cfg.policy.sft_probe_prompts])
policy = load_policy(str(dst))
codec = ChatCodec(policy.tokenizer, render_tools=cfg.policy.render_tools)
sampling = SamplingParams(
    max_new_tokens=cfg.sampling.max_new_tokens,
    temperature=cfg.sampling.temperature,
    top_p=cfg.sampling.top_p,
    seed=cfg.seed,
)
episodes = asyncio.run(
    sample_episodes(
        LocalEngine(policy, max_batch=64),
        lambda: make_env(cfg.env.name),
        codec,
        pool,
        sampling,
        samples=8,
        max_turns=cfg.env.max_turns,
    )
)
rewards = np.asarray([e.reward for e in episodes]).reshape(len(pool), 8)
step = json.loads((src / "probe_outcomes.json").read_text())["step"]
tokens = sum(e.sampled_tokens for e in episodes)
calls = sum(_tool_calls(t.info) for e in episodes for t in e.turns)
save_probe_outcomes(dst, pool, rewards, step=step, tokens_generated=tokens, tool_calls=calls)
print(spread_metrics(rewards))
