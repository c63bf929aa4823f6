"""The claims of README.md and docs/results.md (and docs/benchmarks.md's figures), every number recomputed from
what is kept in results/.

    python scripts/claims.py            # print the generated blocks
    python scripts/claims.py --check    # exit 1 naming each block of README.md / docs/results.md that differs
    python scripts/claims.py --write    # rewrite those blocks in place

A generated block is the text between ``<!-- claims:NAME -->`` and ``<!-- /claims:NAME -->`` in README.md,
docs/results.md or docs/benchmarks.md (its wall-clock figures, from the JSON lines in results/c38); nothing between the markers is written by hand. Each number is a paired difference over seeds
(mean and 95% Student-t interval, as ``scripts/paired_runs.py`` prints it: the same function, `paired_text`, on the
same columns, `paired_columns`), each pair read on its own (``--baseline B --methods M``), so that the command in a
row prints exactly that row's number. tests/unit/test_claims.py checks that both files hold what this prints, and
that no decimal number of two or more places stands outside a generated block.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("paired_runs_for_claims", ROOT / "scripts" / "paired_runs.py")
assert _spec is not None and _spec.loader is not None
paired_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paired_runs)

FILES = ("README.md", "docs/results.md", "docs/benchmarks.md")
METRIC_NAMES = {
    "final": "final held-out pass@1",
    "auc_rollouts": "area under pass@1 vs generated rollouts",
    "effective_ratio": "effective ratio",
    "mixed_sibling_share": "share of mixed sibling groups",
    "replay_flip_rate": "flips per replay",
}
PREFIX_METRICS = ("mixed_sibling_share", "replay_flip_rate")
NAMES = {
    "grpo": "GRPO",
    "trace": "TRACE",
    "pcl": "PCL",
    "dapo": "DAPO",
    "treepo": "TreePO",
    "branpo": "BranPO",
}


class Pair(NamedTuple):
    """``method - baseline`` on ``metric`` over ``seeds`` of ``folder`` (a folder of results/)."""

    folder: str
    baseline: str
    method: str
    metric: str
    seeds: tuple[int, ...]
    mixed_commits: bool = False  # the runs of a seed ran on different commits (results/README.md says which)

    def command(self) -> str:
        flags = " --prefix-stats" if self.metric in PREFIX_METRICS else ""
        flags += " --allow-mixed-commits" if self.mixed_commits else ""
        seeds = ",".join(map(str, self.seeds))
        return (
            f"python scripts/paired_runs.py results/{self.folder} --baseline {self.baseline} "
            f"--methods {self.method} --seeds {seeds}{flags}"
        )

    def label(self) -> str:
        return (
            f"{NAMES.get(self.method, f'`{self.method}`')} - {NAMES.get(self.baseline, f'`{self.baseline}`')}"
        )


class Claim(NamedTuple):
    statement: str
    task: str
    pair: Pair
    holds: bool
    readme: bool  # also in the README's table


DEMO = range(6)
AGENTIC = range(5)
MULTISTEP = range(5)


def _pair(folder: str, baseline: str, method: str, metric: str, seeds: range, mixed: bool = False) -> Pair:
    return Pair(folder, baseline, method, metric, tuple(seeds), mixed)


CLAIMS = (
    Claim(
        "TRACE trains a more accurate agent than GRPO at equal generated budget, its predictor's probe charged",
        "`demo`",
        _pair("c39", "grpo", "trace", "final", DEMO),
        True,
        True,
    ),
    Claim(
        "TRACE keeps more of its groups mixed than GRPO (effective ratio)",
        "`demo`",
        _pair("c39", "grpo", "trace", "effective_ratio", DEMO),
        True,
        True,
    ),
    Claim(
        "TRACE ends above DAPO's dynamic sampling at equal generated budget",
        "`demo`",
        _pair("c39", "dapo", "trace", "final", DEMO),
        True,
        False,
    ),
    Claim(
        "TRACE's trees are more often mixed than tail branching's (BranPO)",
        "`multistep`",
        _pair("c23", "branpo", "trace", "effective_ratio", MULTISTEP),
        True,
        True,
    ),
    Claim(
        "TRACE's replays flip the rollout's ending more often than random branching's (TreePO)",
        "`multistep`",
        _pair("c23", "treepo", "trace", "replay_flip_rate", MULTISTEP),
        True,
        True,
    ),
    Claim(
        "TRACE's prefix stage alone mixes more sibling groups than random branching (TreePO)",
        "`multistep`",
        _pair("c23", "treepo", "trace_prefix_only", "mixed_sibling_share", MULTISTEP),
        True,
        False,
    ),
    Claim(
        "Anchors valued with what the tree's other roots saw (`trace_gp`, ours) mix more sibling groups than TRACE",
        "`multistep`",
        _pair("c23", "trace", "trace_gp", "mixed_sibling_share", MULTISTEP),
        True,
        True,
    ),
    Claim(
        "TRACE keeps more of its groups mixed than GRPO (effective ratio)",
        "`agentic`",
        _pair("c37v2", "grpo", "trace", "effective_ratio", AGENTIC, mixed=True),
        True,
        False,
    ),
    # what did not hold
    Claim(
        "TRACE trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "trace", "final", AGENTIC, mixed=True),
        False,
        True,
    ),
    Claim(
        "PCL's prompt selection trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "pcl", "final", AGENTIC, mixed=True),
        False,
        False,
    ),
    Claim(
        "TRACE's root stage alone (`trace_root_only`) trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "trace_root_only", "final", AGENTIC, mixed=True),
        False,
        False,
    ),
    Claim(
        "Random branching (TreePO) trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "treepo", "final", AGENTIC, mixed=True),
        False,
        False,
    ),
    Claim(
        "DAPO's dynamic sampling trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "dapo", "final", range(3), mixed=True),
        False,
        False,
    ),
    Claim(
        "Prefix sampling trains a more accurate agent than GRPO",
        "`agentic`",
        _pair("c37v2", "grpo", "prefix_sampling", "final", range(3), mixed=True),
        False,
        False,
    ),
    Claim(
        "TRACE's prefix stage adds accuracy over its root stage alone",
        "`agentic`",
        _pair("c37v2", "trace_root_only", "trace", "final", AGENTIC, mixed=True),
        False,
        False,
    ),
    Claim(
        "TRACE's allocation adds accuracy over PCL's prompt selection",
        "`agentic`",
        _pair("c37v2", "pcl", "trace", "final", AGENTIC, mixed=True),
        False,
        False,
    ),
    Claim(
        "TRACE's unequal root counts add accuracy over PCL's prompt selection",
        "`demo`",
        _pair("c39", "pcl", "trace", "final", DEMO),
        False,
        True,
    ),
    Claim(
        "TRACE's trees are mixed ten points more often than random branching's (TreePO), as in the paper",
        "`multistep`",
        _pair("c23", "treepo", "trace", "effective_ratio", MULTISTEP),
        False,
        True,
    ),
    Claim(
        "TRACE's prefix stage mixes more trees than its root stage alone",
        "`multistep`",
        _pair("c23", "trace_root_only", "trace", "effective_ratio", MULTISTEP),
        False,
        False,
    ),
)

# docs/results.md's tables per task: every method against the baseline on these metrics
DETAILS = {
    "demo": (
        "c39",
        "grpo",
        ("trace", "pcl", "dapo"),
        DEMO,
        False,
        ("final", "auc_rollouts", "effective_ratio"),
    ),
    "multistep": (
        "c23",
        "treepo",
        ("trace", "trace_root_only", "trace_prefix_only", "branpo", "trace_state", "trace_gp"),
        MULTISTEP,
        False,
        ("effective_ratio", "mixed_sibling_share", "replay_flip_rate", "final"),
    ),
    "agentic": (
        "c37v2",
        "grpo",
        ("trace", "pcl", "trace_root_only", "treepo"),
        AGENTIC,
        True,
        ("final", "auc_rollouts", "effective_ratio"),
    ),
}
# issue 58's first runs: one seed per arm, an investigation, not a claim
C58 = ("c58", "grpo", ("trace", "grpo_g8", "trace_est_grpo", "trace_est_tree_grpo", "trace_nostd"), (0,))


@cache
def _columns(
    folder: str, baseline: str, method: str, seeds: tuple[int, ...], mixed: bool, prefix: bool
) -> dict:
    runs = paired_runs.paired_columns(
        ROOT / "results" / folder,
        [baseline, method],
        list(seeds),
        allow_mixed_commits=mixed,
        prefix_stats=prefix,
    )
    return runs.columns


def number(pair: Pair) -> str:
    """``pair``'s paired difference as paired_runs.py prints it: ``+0.020 [+0.007, +0.033]``."""
    prefix = pair.metric in PREFIX_METRICS
    columns = _columns(pair.folder, pair.baseline, pair.method, pair.seeds, pair.mixed_commits, prefix)
    text, k = paired_runs.paired_text(columns, pair.method, pair.baseline, pair.metric)
    if k != len(pair.seeds):
        raise ValueError(f"{pair.command()}: {k} paired seeds, {len(pair.seeds)} expected")
    return text


def _mean(pair: Pair, label: str) -> float:
    prefix = pair.metric in PREFIX_METRICS
    columns = _columns(pair.folder, pair.baseline, pair.method, pair.seeds, pair.mixed_commits, prefix)
    values = [v for v in columns[label][pair.metric] if math.isfinite(v)]
    return sum(values) / len(values)


def claims_table(claims: list[Claim], results: str) -> str:
    """The claims as one markdown table; ``results`` is the path from the page to results/."""
    rows = [
        "| claim | task | number: mean [95% interval] | seeds | recompute | data |",
        "|---|---|---|---|---|---|",
    ]
    for c in claims:
        p = c.pair
        seeds = f"{len(p.seeds)} ({p.seeds[0]}-{p.seeds[-1]})"
        rows.append(
            f"| {c.statement} | {c.task} | {p.label()}, {METRIC_NAMES[p.metric]}: **{number(p)}** | {seeds} "
            f"| `{p.command()}` | [results/{p.folder}]({results}/{p.folder}) |"
        )
    return "\n".join(rows)


def details_table(name: str) -> str:
    """One task's methods against its baseline: the baseline's mean, then each method's paired differences."""
    folder, baseline, methods, seeds, mixed, metrics = DETAILS[name]
    head = "| | " + " | ".join(METRIC_NAMES[m] for m in metrics) + " |"
    rows = [head, "|---" * (len(metrics) + 1) + "|"]
    first = _pair(folder, baseline, methods[0], metrics[0], seeds, mixed)
    means = [_mean(first._replace(metric=m), baseline) for m in metrics]
    rows.append(
        f"| {NAMES.get(baseline, f'`{baseline}`')} (mean) | " + " | ".join(f"{x:.3f}" for x in means) + " |"
    )
    for method in methods:
        pair = first._replace(method=method)
        cells = [number(pair._replace(metric=m)) for m in metrics]
        rows.append(f"| {pair.label()} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def c58_table() -> str:
    folder, baseline, methods, seeds = C58
    rows = [
        f"| run (seed {seeds[0]}) | final held-out pass@1 | minus GRPO | effective ratio | RL steps |",
        "|---|---|---|---|---|",
    ]
    for method in (baseline, *methods):
        pair = Pair(folder, baseline, methods[0] if method == baseline else method, "final", seeds)
        columns = _columns(folder, baseline, pair.method, seeds, False, False)
        cols = columns[method]
        diff = "" if method == baseline else paired_runs.paired_text(columns, method, baseline, "final")[0]
        rows.append(
            f"| `{method}` | {cols['final'][0]:.3f} | {diff} | {cols['effective_ratio'][0]:.3f} "
            f"| {cols['steps'][0]:.0f} |"
        )
    return "\n".join(rows)


def wallclock_table() -> str:
    """Issue 38's wall-clock figures on a quiet machine, from the JSON lines its benchmarks wrote (results/c38,
    ``*_2026-12-07b.json``): this code against the reference commit each names."""
    c38 = ROOT / "results" / "c38"

    def load(name: str) -> dict:
        return json.loads((c38 / f"{name}_2026-12-07b.json").read_text())

    rows = [
        "| what (`multistep`, tiny policy) | this code | reference | ratio | JSON |",
        "|---|---|---|---|---|",
    ]
    for threads, label in (("0", "two threads (the preset's default)"), ("1", "one thread")):
        name = f"step_breakdown_threads{threads}"
        d = load(name)
        ref = d["reference_rev"]
        for key, part in (
            ("wall_s", "RL step"),
            ("time_generation_s", "its generation"),
            ("time_update_s", "its update"),
        ):
            rows.append(
                f"| {part}, {label}, s | {d['current'][key]:.2f} | {d['reference'][key]:.2f} ({ref}) "
                f"| {d['ratios'][key]:.3f} | `{name}` |"
            )
    for name, label in (
        ("warm_start_time_1300_default", "warm start, 1,300 SFT steps, float32, one thread, s"),
        ("warm_start_time_1300", "the same with `policy.sft_dtype=bfloat16`, `policy.sft_compile=true`, s"),
    ):
        d = load(name)
        rows.append(
            f"| {label} | {d['current']['seconds']:.0f} | {d['reference']['seconds']:.0f} ({d['reference_rev']}) "
            f"| {d['ratio']:.3f} | `{name}` |"
        )
    d = load("tree_packing")
    rows.append(
        f"| policy update on step 1's 192 paths, tree-packed against padded rows, s | {d['packed_s']:.2f} "
        f"| {d['padded_s']:.2f} (padded) | {d['wall_ratio']:.3f} | `tree_packing` |"
    )
    return "\n".join(rows)


REGIME_ARMS = ("independent", "treepo", "branpo", "trace", "oracle")


def _regime_cells() -> list[dict]:
    """The cells of issue 59's regime map (`benchmarks/kb_regime.py`'s JSON line, results/c59/regime_map.json)."""
    return list(json.loads((ROOT / "results" / "c59" / "regime_map.json").read_text())["cells"])


def _pm(value: float | None, se: float | None, fmt: str = ".2f") -> str:
    if value is None:
        return "-"
    return f"{value:{fmt}}" if se is None else f"{value:{fmt}} ± {se:{fmt}}"


def regime_table() -> str:
    """Mixed groups per 1k generated tokens per question depth x per-prompt budget x arm (mean ± bootstrap SE over
    the cell's prompts), and each replay arm minus independent rollouts (paired), from the regime map."""
    cells = {(c["depth"], c["budget"], c["arm"]): c for c in _regime_cells()}
    rows = [
        "| depth | budget | prompts | " + " | ".join(f"`{a}`" for a in REGIME_ARMS) + " |",
        "|---|---|---|" + "---|" * len(REGIME_ARMS),
    ]
    for d, b in sorted({(k[0], k[1]) for k in cells}):
        parts = []
        for arm in REGIME_ARMS:
            c = cells[(d, b, arm)]
            text = _pm(c["mixed_per_1k"], c["mixed_per_1k_se"])
            if arm != "independent":
                diff, se = c["mixed_per_1k_minus_independent"], c["mixed_per_1k_minus_independent_se"]
                text += f" ({diff:+.2f} ± {se:.2f})"
                if se is not None and diff > 2 * se:
                    text = f"**{text}**"
            parts.append(text)
        n = int(cells[(d, b, "independent")]["prompts"])
        rows.append(f"| {d} | {b} | {n} | " + " | ".join(parts) + " |")
    return "\n".join(rows)


def regime_detail_table() -> str:
    """Flips per replay and the step-credit error (RMSE of the estimated advantage against the true value
    difference at branch points) per cell and arm, from the regime map."""
    cells = {(c["depth"], c["budget"], c["arm"]): c for c in _regime_cells()}
    rows = [
        "| depth | budget | flips per replay: "
        + " / ".join(REGIME_ARMS[1:])
        + " | advantage RMSE: "
        + " / ".join(REGIME_ARMS)
        + " | replays per tree: "
        + " / ".join(REGIME_ARMS[1:])
        + " |",
        "|---|---|---|---|---|",
    ]
    for d, b in sorted({(k[0], k[1]) for k in cells}):
        flips = " / ".join(_pm(cells[(d, b, a)]["flips_per_replay"], None, ".3f") for a in REGIME_ARMS[1:])
        adv = " / ".join(_pm(cells[(d, b, a)]["adv_rmse"], None, ".3f") for a in REGIME_ARMS)
        reps = " / ".join(f"{cells[(d, b, a)]['replays']:.1f}" for a in REGIME_ARMS[1:])
        rows.append(f"| {d} | {b} | {flips} | {adv} | {reps} |")
    return "\n".join(rows)


def blocks() -> dict[str, dict[str, str]]:
    """Per file, the text of each generated block."""
    readme = [c for c in CLAIMS if c.readme]
    return {
        "README.md": {"claims": claims_table(readme, "results")},
        "docs/results.md": {
            "claims": claims_table([c for c in CLAIMS if c.holds], "../results"),
            "refuted": claims_table([c for c in CLAIMS if not c.holds], "../results"),
            "demo": details_table("demo"),
            "multistep": details_table("multistep"),
            "agentic": details_table("agentic"),
            "c58": c58_table(),
            "regime": regime_table(),
            "regime_detail": regime_detail_table(),
        },
        "docs/benchmarks.md": {"wallclock": wallclock_table()},
    }


BLOCK = re.compile(r"(<!-- claims:(\w+) -->\n)(.*?)(\n<!-- /claims:\2 -->)", re.S)


def written(text: str) -> dict[str, str]:
    """The generated blocks as a page holds them: name -> text between the markers."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def outside(text: str) -> str:
    """The page with its generated blocks removed (what is written by hand)."""
    return BLOCK.sub("", text)


def differences(root: Path = ROOT) -> list[str]:
    """One line per generated block that a page lacks or holds with other text."""
    out = []
    for path, expected in blocks().items():
        have = written((root / path).read_text())
        for name, text in expected.items():
            if name not in have:
                out.append(f"{path}: no block <!-- claims:{name} -->")
            elif have[name] != text:
                out.append(f"{path}: block {name} differs from what scripts/claims.py recomputes")
        out += [f"{path}: unknown block {name}" for name in have.keys() - expected.keys()]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if a page's generated blocks differ")
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks in place")
    args = p.parse_args(argv)
    if args.check:
        diffs = differences()
        for line in diffs:
            print(line, file=sys.stderr)
        return 1 if diffs else 0
    for path, expected in blocks().items():
        if args.write:
            page = ROOT / path
            text = page.read_text()
            new = expected  # bound here: the substitution reads this file's blocks

            def fill(m: re.Match[str], new: dict[str, str] = new) -> str:
                return m.group(1) + new.get(m.group(2), m.group(3)) + m.group(4)

            text = BLOCK.sub(fill, text)
            page.write_text(text)
            print(f"wrote {path}")
            continue
        for name, text in expected.items():
            print(f"<!-- claims:{name} --> ({path})\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
