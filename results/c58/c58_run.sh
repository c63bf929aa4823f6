#!/bin/bash
# issue 58 item 1: the agentic ablations, 3 paired seeds, one commit (397080c), warm start of results/c37v2
cd /work/wt-c58
V="grpo=grpo,trace=trace,grpo_g8=grpo@budget.group_size=8,trace_est_grpo=trace@optim.estimator=grpo,trace_est_tree_grpo=trace@optim.estimator=tree_grpo,trace_nostd=trace@optim.normalize_std=false,pcl=pcl,trace_root_only=trace_root_only,treepo=treepo,grpo_g16=grpo@budget.group_size=16;budget.max_rollouts=16,grpo_nostd=grpo@optim.normalize_std=false"
for s in 0 1 2; do
  PYTHONPATH=/work/wt-c58/src nice -n 5 /work/main/.venv/bin/python scripts/compare_seeds.py --preset agentic --steps 100 --methods "$V" --seeds $s --jobs 2 --out /work/runs/c58
  echo "== seed $s done $(date)"
done
