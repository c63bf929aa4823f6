"""The tree-packed policy update against the padded one on the trees of a real `multistep` step (issue 38).

Runs `policy_update` on the same trees from the same weights both ways (``optim.packing`` "none", then "tree"),
back to back in one process, ``--repeats`` times, and prints one JSON line:

- ``tokens_computed``: tokens the policy's forward passes computed per update ({"padded", "packed"}, the
  update's ``forward_tokens``: padded, rows x longest row per pass; packed, the packed rows' own tokens under the
  default padding-free rows (`trace_rl.policy.segments.tree_forward`), or packed rows x longest packed row per pass
  where the dense ancestry mask runs: compiled, or a model whose attention function cannot be replaced), and their
  ratio;
- ``wall_ratio``: median packed update seconds / median padded update seconds (and both medians);
- ``max_rel_logprob_err``: max over paths of |packed - padded| / |padded| of the path's log-probability (the sum of
  its model tokens' log-probabilities), at the starting weights; ``max_abs_token_logprob_err``: max over model
  tokens of |packed - padded| (float32 models: rounding, not method error; tests/unit/test_tree_packing.py checks
  the method in float64);
- ``max_rel_weight_err``: max over parameter tensors of ||w_packed - w_padded|| / ||w_padded|| after one update.

Trees: ``--trees`` (default results/c38/multistep_step1_trees.json.gz: the 16 trees, 192 paths of step 1 of a
`multistep` TRACE run, seed 0 of results/c23 from its warm start; ``--generate`` rebuilds that file, about a minute
of rollouts). ``--synthetic`` builds trees of the same shape instead (16 prompts of 140 tokens, 4 root rollouts of
4 turns of 40 model + 25 observation tokens, 8 replays: 6 from depth 1, 2 from depth 2). Settings
are the `multistep` preset's: treerpo, token-mean, 2 minibatches, micro_tokens 4096.

    python benchmarks/tree_packing.py [--repeats 3] [--threads 1] [--synthetic] [--generate]

``--compare compile`` times the packed update eager against the same update through torch.compile
(``optim.compile``) instead, and prints ``eager_s``, ``compiled_s`` (wall medians over repeats after the first,
which holds the compile: ``first_s``), ``cpu_ratio`` (CPU seconds of the process, compiled / eager) and
``max_rel_weight_err`` (compiled against eager, after one update).

    python benchmarks/tree_packing.py --compare compile --repeats 4

``--compare chains`` times the packed update's two ways of running packed rows, both eager: each row padded to
the pass's longest under its dense (N, N) ancestry mask (the way before 2026-12-07, and the compiled update's),
against the rows end to end without padding, attention along each trie's chains (`trace_rl.policy.segments`,
the eager default since), and prints ``mask_s``, ``chains_s`` (wall medians over repeats), ``wall_ratio`` and
``cpu_ratio`` (chains / mask), ``tokens_computed`` of both and ``max_rel_weight_err`` (chains against mask).

    python benchmarks/tree_packing.py --compare chains --repeats 3

``--compare row_tokens`` times the eager (chains) packed update with its packed rows capped at
`trace_rl.train.packing.ROW_TOKENS` (1,024: the dense mask's cap, and the chains' before 2026-12-07) against the caps
of ``--row-tokens`` (default 0 = no cap but ``micro_tokens``, and 2048, the chains' cap `CHAIN_ROW_TOKENS` since),
alternating, and prints per cap ``wall_s`` (medians), ``wall_ratio`` and ``cpu_ratio`` against the 1,024 cap,
``tokens_computed`` and ``max_rel_weight_err``.

    python benchmarks/tree_packing.py --compare row_tokens --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TREES = ROOT / "results" / "c38" / "multistep_step1_trees.json.gz"
WARM_START = ROOT / "results" / "c23" / "warm_start" / "sft" / "policy"
RUN_CONFIG = ROOT / "results" / "c23" / "trace" / "seed_0" / "config.json"


def generate(path: Path) -> None:
    """Run step 1 of the `multistep` TRACE run of results/c23 (seed 0, its warm start) and save its trees."""
    from trace_rl.train.config import config_from_dict, with_overrides
    from trace_rl.train.run import Trainer
    from trace_rl.train.step import training_step

    data = json.loads(RUN_CONFIG.read_text())
    data["policy"]["name"] = str(WARM_START)
    cfg = with_overrides(config_from_dict(data), ["env.eval_tasks=0", "steps=1"])
    out = Path("/tmp/tree_packing_run")
    trainer = Trainer(cfg, out)
    trainer.setup()
    captured: list[Any] = []
    trainer.parts.update_policy = lambda trees: (captured.extend(trees), {})[1]
    pool = [trainer.tasks[i] for i in trainer.cursor.take(cfg.env.pool_size)]
    training_step(1, pool, trainer.method, trainer.shape, trainer.parts, trainer.rng)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump([t.to_dict() for t in captured], f)


def synthetic_trees(seed: int = 0) -> list[Any]:
    """Trees of the multistep shape (module docstring), random token ids, mixed rewards."""
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Turn

    rng = np.random.default_rng(seed)

    def turn() -> Turn:
        ids = rng.integers(3, 500, 65).astype(np.int64)
        mask = np.r_[np.ones(40, np.int8), np.zeros(25, np.int8)]
        return Turn(ids, mask, (-rng.uniform(0.1, 3.0, 65) * mask).astype(np.float32))

    trees = []
    for _ in range(16):
        tree = RolloutTree.new(prompt_ids=rng.integers(3, 500, 140).astype(np.int64))
        roots = [tree.add_rollout([turn() for _ in range(4)], reward=float(j % 2)) for j in range(4)]
        for k in range(8):
            depth = 1 if k < 6 else 2
            chain = roots[k % 4]
            tree.add_replay(
                int(chain[depth - 1]), [turn() for _ in range(4 - depth)], reward=float(k % 3 == 0)
            )
        trees.append(tree)
    return trees


def load_trees(path: Path) -> list[Any]:
    from trace_rl.tree import RolloutTree

    with gzip.open(path, "rt") as f:
        return [RolloutTree.from_dict(d) for d in json.load(f)]


def logprob_errors(model: Any, trees: list[Any], settings: Any) -> tuple[float, float]:
    """(max relative error of per-path log-probabilities, max absolute error of token log-probabilities)."""
    import torch

    from trace_rl.train.packing import packed_logprobs, plan_packed_passes
    from trace_rl.train.update import path_rows, sequence_logprobs

    rows = path_rows(trees, settings)
    rel, absolute = 0.0, 0.0
    for p in plan_packed_passes(rows, settings.micro_tokens):
        sub = [rows[i] for i in p.paths]
        mask = torch.zeros((len(sub), max(len(r.token_ids) for r in sub)))
        for i, r in enumerate(sub):
            mask[i, : len(r.token_ids)] = torch.as_tensor(r.loss_mask, dtype=torch.float32)
        with torch.no_grad():
            packed = packed_logprobs(model, sub, p.rows, settings.temperature, 0) * mask
            padded = sequence_logprobs(model, sub, settings.temperature, 0) * mask
        per_path = (packed.sum(1) - padded.sum(1)).abs() / padded.sum(1).abs().clamp(min=1e-30)
        rel = max(rel, float(per_path.max()))
        absolute = max(absolute, float((packed - padded).abs().max()))
    return rel, absolute


def compare_compile(model: Any, start: dict[str, Any], trees: list[Any], args: argparse.Namespace) -> None:
    """``--compare compile``: the packed update eager and through torch.compile, alternating, same start weights."""
    import torch

    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import policy_update

    ways = {
        name: UpdateSpec(estimator="treerpo", minibatches=2, micro_tokens=4096, packing="tree", compile=on)
        for name, on in (("eager", False), ("compiled", True))
    }
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    weights: dict[str, list[Any]] = {}
    for _ in range(args.repeats):
        for name, settings in ways.items():
            model.load_state_dict(start)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
            t0, c0 = time.perf_counter(), time.process_time()
            policy_update(model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(0))
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            weights[name] = [p.detach().clone() for p in model.parameters()]
    err = _weight_err(weights["compiled"], weights["eager"])
    med = {name: statistics.median(v[1:]) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v[1:]) for name, v in cpu.items()}
    print(
        json.dumps(
            {
                "compare": "compile",
                **_setup(args, trees),
                "eager_s": med["eager"],
                "compiled_s": med["compiled"],
                "wall_ratio": med["compiled"] / med["eager"],
                "cpu_ratio": med_cpu["compiled"] / med_cpu["eager"],
                "first_s": {name: v[0] for name, v in wall.items()},
                "max_rel_weight_err": err,
            }
        )
    )


def alternate(
    model: Any, start: dict[str, Any], trees: list[Any], repeats: int, ways: dict[str, dict[str, Any]]
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float], dict[str, list[Any]]]:
    """Run the eager tree-packed update once per way per repeat, alternating, from the same start weights; a way
    is the keyword arguments of `trace_rl.train.update.policy_update` it runs with (``strategy``, ``row_tokens``).
    Returns the wall and CPU seconds of every run, each way's ``forward_tokens`` and weights after its last run."""
    import torch

    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import policy_update

    settings = UpdateSpec(estimator="treerpo", minibatches=2, micro_tokens=4096, packing="tree")
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    tokens: dict[str, float] = {}
    weights: dict[str, list[Any]] = {}
    for _ in range(repeats):
        for name, way in ways.items():
            model.load_state_dict(start)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
            t0, c0 = time.perf_counter(), time.process_time()
            stats = policy_update(model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(0), **way)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            tokens[name] = stats["forward_tokens"]
            weights[name] = [p.detach().clone() for p in model.parameters()]
    return wall, cpu, tokens, weights


def _weight_err(a: list[Any], b: list[Any]) -> float:
    """Max over parameter tensors of ||a - b|| / ||b||."""
    return max(float((x - y).norm() / y.norm()) for x, y in zip(a, b, strict=True))


def _setup(args: argparse.Namespace, trees: list[Any]) -> dict[str, Any]:
    """The JSON line's fields that say what was run: trees, paths, threads, repeats."""
    return {
        "trees": "synthetic" if args.synthetic else str(args.trees.relative_to(ROOT)),
        "paths": sum(t.num_leaves for t in trees),
        "threads": args.threads,
        "repeats": args.repeats,
    }


def compare_chains(model: Any, start: dict[str, Any], trees: list[Any], args: argparse.Namespace) -> None:
    """``--compare chains``: the eager packed update with the dense mask against the padding-free chains,
    alternating, same start weights (the mask way by capping the model's log-prob strategy at "mask")."""
    ways: dict[str, dict[str, Any]] = {"mask": {"strategy": "mask"}, "chains": {}}
    wall, cpu, tokens, weights = alternate(model, start, trees, args.repeats, ways)
    med = {name: statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    print(
        json.dumps(
            {
                "compare": "chains",
                **_setup(args, trees),
                "tokens_computed": tokens,
                "mask_s": med["mask"],
                "chains_s": med["chains"],
                "wall_ratio": med["chains"] / med["mask"],
                "cpu_ratio": med_cpu["chains"] / med_cpu["mask"],
                "max_rel_weight_err": _weight_err(weights["chains"], weights["mask"]),
            }
        )
    )


def compare_row_tokens(model: Any, start: dict[str, Any], trees: list[Any], args: argparse.Namespace) -> None:
    """``--compare row_tokens``: the eager (chains) packed update with its rows capped at `ROW_TOKENS` (the dense
    mask's cap, the baseline) against each cap of ``--row-tokens`` (0: no cap but ``micro_tokens``), alternating;
    a way passes its cap to the update (``row_tokens``; the default is `trace_rl.train.packing.CHAIN_ROW_TOKENS`)."""
    from trace_rl.train.packing import ROW_TOKENS

    ways = {str(cap): {"row_tokens": cap} for cap in (ROW_TOKENS, *args.row_tokens)}
    wall, cpu, tokens, weights = alternate(model, start, trees, args.repeats, ways)
    base = str(ROW_TOKENS)
    med = {name: statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    print(
        json.dumps(
            {
                "compare": "row_tokens",
                **_setup(args, trees),
                "tokens_computed": tokens,
                "wall_s": med,
                "wall_ratio": {name: med[name] / med[base] for name in med},
                "cpu_ratio": {name: med_cpu[name] / med_cpu[base] for name in med},
                "max_rel_weight_err": {name: _weight_err(weights[name], weights[base]) for name in med},
            }
        )
    )


def _relative(path: str) -> str:
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=Path, default=TREES)
    ap.add_argument(
        "--synthetic", action="store_true", help="trees of the multistep shape instead of --trees"
    )
    ap.add_argument(
        "--generate", action="store_true", help="rebuild --trees from a real multistep step first"
    )
    ap.add_argument("--policy", default=str(WARM_START) if WARM_START.exists() else "tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare", choices=("packing", "compile", "chains", "row_tokens"), default="packing")
    ap.add_argument(
        "--row-tokens", type=int, nargs="+", default=[0, 2048], help="--compare row_tokens: the caps to time"
    )
    args = ap.parse_args()

    import torch

    from trace_rl.policy import load_policy
    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import policy_update

    if args.generate:
        generate(args.trees)
    trees = synthetic_trees() if args.synthetic else load_trees(args.trees)
    torch.set_num_threads(args.threads)
    policy = load_policy(args.policy)
    start = copy.deepcopy(policy.model.state_dict())
    if args.compare == "compile":
        compare_compile(policy.model, start, trees, args)
        return
    if args.compare == "chains":
        compare_chains(policy.model, start, trees, args)
        return
    if args.compare == "row_tokens":
        compare_row_tokens(policy.model, start, trees, args)
        return
    settings = {
        p: UpdateSpec(estimator="treerpo", minibatches=2, micro_tokens=4096, packing=p)
        for p in ("none", "tree")
    }
    seconds: dict[str, list[float]] = {"none": [], "tree": []}
    tokens: dict[str, float] = {}
    weights: dict[str, list[Any]] = {}
    for _ in range(args.repeats):
        for packing in ("none", "tree"):  # back to back, same start weights, same minibatch order
            policy.model.load_state_dict(start)
            opt = torch.optim.AdamW(policy.model.parameters(), lr=1e-4, betas=(0.9, 0.95))
            t0 = time.perf_counter()
            stats = policy_update(
                policy.model, opt, trees, settings[packing], pad_id=0, rng=np.random.default_rng(0)
            )
            seconds[packing].append(time.perf_counter() - t0)
            tokens[packing] = stats["forward_tokens"]
            assert stats["packed"] == float(packing == "tree"), "the packed update fell back to padding"
            weights[packing] = [p.detach().clone() for p in policy.model.parameters()]
    policy.model.load_state_dict(start)
    rel, absolute = logprob_errors(policy.model, trees, settings["tree"])
    weight_err = _weight_err(weights["tree"], weights["none"])
    padded, packed = statistics.median(seconds["none"]), statistics.median(seconds["tree"])
    print(
        json.dumps(
            {
                **_setup(args, trees),
                "policy": _relative(args.policy),
                "tokens_computed": {"padded": tokens["none"], "packed": tokens["tree"]},
                "tokens_ratio": tokens["tree"] / tokens["none"],
                "padded_s": padded,
                "packed_s": packed,
                "wall_ratio": packed / padded,
                "max_rel_logprob_err": rel,
                "max_abs_token_logprob_err": absolute,
                "max_rel_weight_err": weight_err,
            }
        )
    )


if __name__ == "__main__":
    main()
