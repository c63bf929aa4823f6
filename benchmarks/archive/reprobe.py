"""How the RL-pool probes in results/c37cand/probes/ were made (issue 37 candidates c7 and c8, 2026-12-06; not a shipped tool).

Copies a warm-started policy folder and redoes its RL-pool probe (the predictor's warm-start data) with the sampling
of the given config, through the same `sample_episodes` call `trace_rl.train.warm_start` makes since the probe
samples at ``sampling.temperature`` (before, it sampled at temperature 1 always). The copy has no manifest.

    PYTHONPATH=src python benchmarks/archive/reprobe.py results/c37cand/warm_start/sft/policy OUT \
      sampling.temperature=1.5 policy.sft_stop_success=0.4 policy.sft_stop_mixed=0.3 [env.task_kwargs.config.max_terms=6]

The c7/c8 probes were made with this script's first version, which spelled out the same `sample_episodes` call;
since 2026-12-06 (night) it calls the warm start's own `sample_probe`. The presets changed since: pass the
overrides that give the candidate's config (the preset was then 3-4 terms at temperature 1).
"""

import json
import shutil
import sys
from pathlib import Path

import torch

from trace_rl.policy import load_policy
from trace_rl.rollout.evaluate import spread_metrics
from trace_rl.train.config import load_config
from trace_rl.train.hygiene import run_tasks
from trace_rl.train.warm_start import rollout_sampling, sample_probe, save_probe_outcomes

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_config(preset="agentic", overrides=sys.argv[3:])
torch.set_num_threads(1)
shutil.copytree(src, dst)
(dst / "warm_start.json").unlink(missing_ok=True)
pool = list(run_tasks(cfg).rl_pool[: cfg.policy.sft_probe_prompts])
rewards, tokens, calls = sample_probe(load_policy(str(dst)), cfg, pool, rollout_sampling(cfg))
step = json.loads((src / "probe_outcomes.json").read_text())["step"]
save_probe_outcomes(dst, pool, rewards, step=step, tokens_generated=tokens, tool_calls=calls)
print(spread_metrics(rewards))
