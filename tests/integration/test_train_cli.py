"""`trace-rl train / compare / report` end to end on the smoke preset (tiny untrained policy, math_python)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "trace_rl.cli.main"]
REQUIRED = (
    "step",
    "method",
    "budget_spent",
    "effective_ratio",
    "success_rate",
    "skip_rate",
    "active_prompts",
    "root_rollouts",
    "replays",
    "replay_depths",
    "predictor_mse",
    "predictor_spearman",
    "predictor_share",
    "tokens_generated",
    "wall_s",
)


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def train_records(folder: Path) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == "train"]


def test_train_smoke_logs_checkpoints_and_report(tmp_path) -> None:
    out = tmp_path / "run"
    res = run("train", "--preset", "smoke", "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = train_records(out)
    assert [r["step"] for r in recs] == [1, 2]
    for r in recs:
        missing = [k for k in REQUIRED if k not in r]
        assert not missing, missing
        assert 0 < r["budget_spent"] <= r["budget_total"] + 1e-9
        # the predictor is scored on each step's new nodes before it trains on them
        assert 0 <= r["predictor_mse"] <= 1 and "predictor_mse_depth_0" in r and "predictor_ece" in r
        assert r["active_prompts"] <= 4  # smoke: M(1 + N/2) / n = 16 / 4 prompts at most
    assert recs[0]["allocation"] == "treepo" and recs[0]["predictor_warm"] == 0.0  # cold start, as recorded
    evals = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    assert {e["step"] for e in evals} == {0, 2} and all(0 <= e["eval_accuracy"] <= 1 for e in evals)
    assert (out / "checkpoints" / "step_2" / "state.json").exists()
    assert not list((out / "checkpoints").glob(".tmp*"))
    assert list((out / "tb").glob("events.out.tfevents.*"))
    html = (out / "report.html").read_text()
    assert "effective_ratio.png" in html and (out / "report" / "effective_ratio.png").stat().st_size > 1000

    # a second run into the same folder is refused (it would interleave records) unless --overwrite is given
    again = run("train", "--preset", "smoke", "--steps", "1", "--out", str(out), "--no-progress")
    assert again.returncode == 2 and "already holds a run" in again.stderr and "--resume" in again.stderr
    assert [r["step"] for r in train_records(out)] == [1, 2]
    (out / "notes.txt").write_text("kept")
    fresh = run(
        "train", "--preset", "smoke", "--steps", "1", "--out", str(out), "--no-progress", "--overwrite"
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert [r["step"] for r in train_records(out)] == [1]
    assert not (out / "checkpoints" / "step_2").exists() and (out / "notes.txt").read_text() == "kept"


def test_sigkill_then_resume_logs_every_step_once(tmp_path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*CLI, "train", "--preset", "smoke", "--steps", "4", "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 400
    try:
        while time.time() < deadline:  # kill as soon as step 2 is logged (step 3 is in flight)
            if (out / "metrics.jsonl").exists() and len(train_records(out)) >= 2:
                break
            if proc.poll() is not None:
                pytest.fail("training ended before it could be killed")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    res = run("train", "--resume", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    steps = [r["step"] for r in train_records(out)]
    assert steps == [1, 2, 3, 4], steps
    assert "NaN" not in (out / "metrics.jsonl").read_text()  # strict JSON lines
    assert not list((out / "checkpoints").glob(".tmp*"))
    assert (
        "summary: 4 steps" in res.stdout and (out / "report.html").exists()
    )  # a resumed run ends like a new one


def test_compare_and_report(tmp_path) -> None:
    out = tmp_path / "cmp"
    res = run(
        "compare",
        "--preset",
        "smoke",
        "--methods",
        "grpo,trace",
        "--seeds",
        "1",
        "--steps",
        "1",
        "--set",
        "threads=1",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "comparison.json").read_text())
    assert set(data["methods"]) == {"grpo", "trace"}
    for row in data["methods"].values():
        assert {"effective_ratio", "success_rate", "eval_accuracy", "budget_spent"} <= set(row)
        assert row["budget_spent"] <= data["budget_total"] + 1e-9
    assert "grpo" in (out / "report.html").read_text()
    # learning curves and cost as generated (issue 22): per run from its log, in comparison.json and curves.json
    for row in data["methods"].values():
        run0 = row["runs"][0]
        assert {"final_accuracy", "auc", "rollouts_to_baseline_final", "tokens_generated_total"} <= set(run0)
        assert run0["budget_spent_total"] == pytest.approx(run0["budget_spent"] * run0["steps"])
        assert run0["rollouts_generated_total"] >= 1 and run0["tool_calls_total"] >= 0
    assert data["curves"]["baseline"] == "grpo" and "grpo-trace" not in data["paired"]
    assert data["methods"]["grpo"]["rollouts_to_baseline_final_reached"] == 1  # GRPO reaches its own final
    curves = json.loads((out / "curves.json").read_text())
    assert curves["methods"]["trace"]["seeds"][0]["step"] == [0, 1]
    assert "final=" in res.stdout and "tool_calls=" in res.stdout
    assert "accuracy_vs_rollouts.png" in (out / "report.html").read_text()

    # the same compare again: its finished runs are read back, not set up and resumed (no model load, no
    # embeddings, metrics untouched), and the numbers are the same
    metrics = out / "trace" / "seed_0" / "metrics.jsonl"
    before = (metrics.read_bytes(), metrics.stat().st_mtime_ns)
    again = run(
        *("compare", "--preset", "smoke", "--methods", "grpo,trace", "--seeds", "1", "--steps", "1"),
        *("--set", "threads=1", "--out", str(out)),
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed from" not in again.stdout + again.stderr
    assert (metrics.read_bytes(), metrics.stat().st_mtime_ns) == before
    assert json.loads((out / "comparison.json").read_text())["methods"] == data["methods"]

    # continuing a compare folder with a different config is refused (its runs would mix two configs)
    changed = run(
        *("compare", "--preset", "smoke", "--methods", "grpo", "--seeds", "1", "--steps", "1"),
        *("--set", "threads=1", "--set", "budget.roots=16", "--out", str(out)),
    )
    assert changed.returncode == 2 and "holds a run with a different config" in changed.stderr

    # the same comparison with two runs at once (separate processes) gives the same numbers
    par = tmp_path / "cmp_parallel"
    res = run(
        *("compare", "--preset", "smoke", "--methods", "grpo,trace", "--seeds", "1", "--steps", "1"),
        *("--set", "threads=1", "--jobs", "2", "--out", str(par)),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    parallel = json.loads((par / "comparison.json").read_text())
    for method, row in data["methods"].items():
        for key in ("effective_ratio", "success_rate", "budget_spent", "eval_accuracy"):
            assert parallel["methods"][method][key] == pytest.approx(row[key], abs=1e-9), (method, key)


def test_resume_of_a_finished_run_and_of_an_unreadable_last_checkpoint(tmp_path) -> None:
    # issue 16: resuming a finished run says so (exit 0); a newest checkpoint whose state.json exists but whose
    # weights cannot be read falls back to the previous complete one with one warning line
    out = tmp_path / "run"
    args = "--preset smoke --steps 3 --set checkpoint_every=1 --no-progress".split()
    first = run("train", *args, "--out", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    before = (out / "metrics.jsonl").read_text()
    done = run("train", "--resume", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"the run in {out} is complete (3/3 steps); nothing to resume" in done.stdout
    assert "summary: 3 steps" in done.stdout and (out / "metrics.jsonl").read_text() == before

    weights = out / "checkpoints" / "step_3" / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    res = run("train", "--resume", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    output = res.stdout + res.stderr
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and "step_3" in warnings[0] and "resuming from step_2" in warnings[0], output
    assert "Traceback" not in output
    assert [r["step"] for r in train_records(out)] == [1, 2, 3]  # step 3 redone, logged once
    assert run("train", "--resume", str(out), "--no-progress").stdout.startswith(
        f"the run in {out} is complete"
    )


def test_a_run_stopped_by_total_budget_resumes_to_nothing(tmp_path) -> None:
    # issue 60: a run that stopped on total_budget ran another step on --resume (32 of 24 spent): the CLI compared
    # only the checkpoint's step with `steps`. One smoke step costs 16, so 24 pays for one step of the four.
    out = tmp_path / "run"
    args = "--preset smoke --steps 4 --set total_budget=24 --set eval_every=0 --set env.eval_tasks=0".split()
    first = run("train", *args, "--out", str(out), "--no-progress")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "total_budget 24 spent (16) after step 1: run finished" in first.stdout
    state_file = out / "checkpoints" / "step_1" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["finished"] is True and state["budget_spent"] == 16
    before = (out / "metrics.jsonl").read_text()

    again = run("train", "--resume", str(out), "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    lines = again.stdout.splitlines()
    assert lines[0] == (
        f"the run in {out} is finished: total_budget 24 could not pay another step after step 1 of 4; "
        "nothing to resume"
    ), again.stdout
    assert lines[1].startswith("summary: 1 steps") and len(lines) == 2, again.stdout
    assert (out / "metrics.jsonl").read_text() == before and not (out / "checkpoints" / "step_2").exists()

    # a checkpoint without the mark (written before it existed): the loop itself never starts a step that the
    # budget left cannot pay
    state_file.write_text(json.dumps({**state, "finished": False}))
    loop = run("train", "--resume", str(out), "--no-progress")
    assert loop.returncode == 0, loop.stderr[-2000:]
    assert (
        "total_budget 24 leaves 8 after step 1, less than one step's budget (16): run finished, step 2 not started"
        in loop.stdout
    ), loop.stdout
    assert [r["step"] for r in train_records(out)] == [1] and not (out / "checkpoints" / "step_2").exists()
    assert train_records(out)[-1]["budget_spent_total"] == 16


@pytest.mark.parametrize(
    "args",
    [
        ["--preset", "smoke", "--out", "{file}"],
        ["--preset", "smoke", "--out", "{file}/run"],
        ["--resume", "{dir}", "--preset", "smoke"],
        ["--resume", "{dir}", "--config", "x.yaml"],
        ["--preset", "smoke", "--config", "x.yaml", "--out", "{dir}"],
    ],
)
def test_cli_mistakes_are_one_plain_line(tmp_path, args) -> None:
    (tmp_path / "file").write_text("not a folder")
    filled = [a.format(file=tmp_path / "file", dir=tmp_path) for a in args]
    res = run("train", *filled)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trace-rl train: error: "), res.stderr
    assert "usage:" not in res.stderr and "Traceback" not in res.stderr and "Errno" not in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "smoke", "--set", "budget.rootz=1"], "budget.rootz: unknown key"),
        (["--preset", "smoke", "--method", "ppo"], "unknown method 'ppo'"),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--preset", "smoke", "--set", "device=tpu"], "device: must be auto, cpu, cuda or cuda:N"),
        (["--preset", "smoke", "--set", "env.eval_samples=4"], "env.eval_samples: must be 1 when"),
        (["--preset", "smoke", "--set", "policy.sft_evals=0"], "policy.sft_evals: must be at least 1"),
        (["--resume", "/nonexistent/run"], "not a trace-rl run folder"),
    ],
)
def test_bad_train_input_is_one_line(tmp_path, args, message) -> None:
    res = run("train", *args, "--out", str(tmp_path / "x")) if "--resume" not in args else run("train", *args)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_overwrite_refuses_to_delete_the_policy_it_would_load(tmp_path) -> None:
    out = tmp_path / "run"
    (out / "sft" / "policy").mkdir(parents=True)
    (out / "metrics.jsonl").write_text("")
    policy = str(out / "sft" / "policy")
    res = run(
        "train", "--preset", "smoke", "--out", str(out), "--overwrite", "--set", f"policy.name={policy}"
    )
    assert res.returncode == 2 and "would delete policy.name" in res.stderr
    assert (out / "sft" / "policy").is_dir() and (out / "metrics.jsonl").exists()


def test_trace_fresh_with_a_probe_warmed_convex_predictor(tmp_path) -> None:
    """A policy folder carrying its warm start's probe outcomes warms the predictor before step 1, so the first
    step already allocates with trace_fresh (no cold-start fallback); fresh rollouts are logged and paid for."""
    import numpy as np

    from trace_rl.envs import load_tasks
    from trace_rl.policy import load_policy
    from trace_rl.train.warm_start import save_probe_outcomes

    policy = tmp_path / "policy"
    load_policy("tiny", seed=0).save(policy)
    tasks = load_tasks("math_python", "train", 12, 0)
    rewards = np.random.default_rng(0).random((12, 8)) < np.linspace(0.05, 0.95, 12)[:, None]
    save_probe_outcomes(policy, tasks, rewards.astype(float), step=7)
    out = tmp_path / "run"
    res = run(
        *("train", "--preset", "smoke", "--out", str(out), "--no-progress", "--method", "trace_fresh"),
        *("--set", f"policy.name={policy}", "--set", "predictor.name=ngram", "--set", "threads=1"),
        # smoke tunes the neural predictor's batches; a convex one refits once per step (config error otherwise)
        *("--set", "predictor.updates=8", "--set", "predictor.batch_size=32"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    warm = [r for r in lines if r.get("kind") == "predictor_warm_start"]
    assert len(warm) == 1 and warm[0]["examples"] == 12 and warm[0]["samples_per_prompt"] == 8
    assert warm[0]["policy_sft_step"] == 7 and "predictor warm start: 12 training prompts" in res.stdout
    recs = train_records(out)
    assert [r["allocation"] for r in recs] == ["trace_fresh", "trace_fresh"]
    for r in recs:
        assert r["predictor_warm"] == 1.0 and r["fresh_rollouts"] >= 0 and "replay_flip_rate" in r
        assert r["fresh_rollouts_on_mixed"] == 0
        if r["replays"]:
            assert 0 <= r["replay_flip_rate"] <= 1 and "replay_flip_rate_depth_1" in r
        assert r["budget_spent"] <= r["budget_total"] + 1e-9
        assert r["root_rollouts"] + 0.5 * r["replays"] == pytest.approx(r["budget_spent"])


def test_killed_compare_leaves_no_worker_running(tmp_path) -> None:
    # a compare killed with SIGKILL (no cleanup runs in it) takes its pool workers with it: none keeps training
    # into the run folders; a SIGTERM'd one stops its workers and exits non-zero
    for sig in (signal.SIGKILL, signal.SIGTERM):
        out = tmp_path / f"cmp_{sig.name}"
        workers: list[int] = []
        proc = subprocess.Popen(
            [
                *(*CLI, "compare", "--preset", "smoke", "--methods", "grpo,trace", "--seeds", "1"),
                *(
                    "--steps",
                    "50",
                    "--set",
                    "threads=1",
                    "--set",
                    "eval_every=0",
                    "--jobs",
                    "2",
                    "--out",
                    str(out),
                ),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not list(out.glob("*/seed_0/metrics.jsonl")):
                time.sleep(0.5)
            workers = _children(proc.pid)
            assert workers, "the compare started no worker processes"
            proc.send_signal(sig)
            proc.wait(timeout=60)
            assert proc.returncode != 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(_alive(w) for w in workers):
                time.sleep(0.5)
            assert not [w for w in workers if _alive(w)], "orphaned compare workers"
        finally:
            if proc.poll() is None:
                proc.kill()
            for w in set(workers + _children(proc.pid)):  # orphans are no longer children of proc
                if _alive(w):
                    os.kill(w, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_compare_variant_runs_a_method_with_overrides(tmp_path) -> None:
    # issue 13: the budget-shape question needs one method at two shapes in one comparison (one warm start,
    # paired seeds); a variant is LABEL=METHOD@KEY=VALUE;KEY=VALUE
    out = tmp_path / "cmp"
    res = run(
        *(
            "compare",
            "--preset",
            "smoke",
            "--seeds",
            "1",
            "--steps",
            "1",
            "--set",
            "threads=1",
            "--out",
            str(out),
        ),
        *("--methods", "treepo,wide=treepo@budget.roots=16;budget.continuations=0"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "comparison.json").read_text())
    assert list(data["methods"]) == ["treepo", "wide"] and "wide-treepo" in data["paired"]
    wide = data["methods"]["wide"]
    assert wide["method"] == "treepo" and wide["overrides"] == ["budget.roots=16", "budget.continuations=0"]
    assert wide["budget_total"] == data["budget_total"] == 16.0  # 16 x (1 + 0/2) = 8 x (1 + 2/2)
    assert wide["replays"] == 0 < data["methods"]["treepo"]["replays"]
    config = json.loads((out / "wide" / "seed_0" / "config.json").read_text())
    assert config["budget"]["roots"] == 16 and config["method"] == "treepo"
    bad = run(
        "compare", "--preset", "smoke", "--methods", "x=trace@policy.name=tiny", "--out", str(tmp_path / "b")
    )
    assert bad.returncode == 2 and "policy.name cannot differ" in bad.stderr


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    path = Path(__file__).resolve().parents[2] / "scripts" / name
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=600)


def test_compare_seeds_script_adds_the_runs_compare_would_make(tmp_path) -> None:
    # scripts/compare_seeds.py runs only the listed seeds of a compare plan (a later session adding seeds): its
    # seed-1 run is compare's seed-1 run, and scripts/paired_runs.py reads the same final accuracy from the logs
    # that comparison.json holds
    common = ("--preset", "smoke", "--steps", "1", "--set", "threads=1", "--methods", "grpo,trace")
    full = run("compare", *common, "--seeds", "2", "--out", str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr[-2000:]
    added = script("compare_seeds.py", *common, "--seeds", "1", "--out", str(tmp_path / "added"))
    assert added.returncode == 0, added.stderr[-2000:]
    assert not (tmp_path / "added" / "grpo" / "seed_0").exists()  # only the listed seed ran
    for label in ("grpo", "trace"):
        a, b = (train_records(tmp_path / d / label / "seed_1") for d in ("full", "added"))
        keys = ("effective_ratio", "success_rate", "budget_spent", "tokens_generated")
        assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b], label
    pair = ("--baseline", "grpo", "--methods", "trace")
    table = script("paired_runs.py", str(tmp_path / "full"), *pair, "--seeds", "0,1")
    assert table.returncode == 0, table.stderr[-2000:]
    lines = table.stdout.splitlines()
    header, rows = lines[0].split(), {tuple(x.split()[:2]): x.split() for x in lines[1:5]}
    data = json.loads((tmp_path / "full" / "comparison.json").read_text())
    for label in ("grpo", "trace"):
        for seed in (0, 1):
            final = float(rows[label, str(seed)][header.index("final")])
            assert final == pytest.approx(data["methods"][label]["runs"][seed]["final_accuracy"], abs=5e-4)
    assert "trace - grpo final:" in table.stdout
    stats = script("paired_runs.py", str(tmp_path / "full"), *pair, "--seeds", "0,1", "--prefix-stats")
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert (
        "trace - grpo mixed_sibling_share:" in stats.stdout
        and "trace - grpo flips_per_1k_tokens:" in stats.stdout
    )
    # the by-depth table counts every replay the trace runs logged, and grpo makes none
    depth_rows = [x.split() for x in stats.stdout.splitlines() if x.startswith("trace depth ")]
    logged = sum(
        sum(r.get("replay_depths") or [])
        for s in (0, 1)
        for r in train_records(tmp_path / "full" / "trace" / f"seed_{s}")
    )
    assert logged > 0 and sum(int(x[3]) for x in depth_rows) == logged
    assert not any(x.startswith("grpo depth ") for x in stats.stdout.splitlines())
    # --step-stats: where each step's budget went; the run's prompt total is the sum over its step records
    # and --plot draws the curves it summarised (a smoke step has replays: the rollout-equivalents axis differs)
    plots = tmp_path / "plots"
    spend = script(
        "paired_runs.py",
        str(tmp_path / "full"),
        *pair,
        "--seeds",
        "0,1",
        "--step-stats",
        "--plot",
        str(plots),
    )
    assert spend.returncode == 0, spend.stderr[-2000:]
    lines = spend.stdout.splitlines()
    header, rows = lines[0].split(), {tuple(x.split()[:2]): x.split() for x in lines[1:5]}
    for label in ("grpo", "trace"):
        records = train_records(tmp_path / "full" / label / "seed_1")
        cell = rows[label, "1"]
        assert float(cell[header.index("active_prompts_total")]) == sum(r["active_prompts"] for r in records)
        assert float(cell[header.index("replays")]) == pytest.approx(
            sum(r["replays"] for r in records) / len(records), abs=5e-4
        )
    assert float(rows["grpo", "0"][header.index("replays")]) == 0.0
    assert "trace - grpo trained_groups:" in spend.stdout
    drawn = {"accuracy_vs_rollouts.png", "accuracy_vs_rollout_eq.png", "accuracy_vs_tokens.png"}
    assert {p.name for p in plots.iterdir()} == drawn and all(
        (plots / n).stat().st_size > 1000 for n in drawn
    )
    # scripts/keep_logs.py keeps the finished runs' logs (gzip) and configs; the table read from them is the same
    kept = script("keep_logs.py", str(tmp_path / "full"), str(tmp_path / "kept"))
    assert kept.returncode == 0 and kept.stdout.count("kept ") == 4, kept.stdout + kept.stderr
    assert (tmp_path / "kept" / "trace" / "seed_1" / "metrics.jsonl.gz").is_file()
    assert not list((tmp_path / "kept").rglob("*.safetensors"))  # no checkpoint travels
    again = script("paired_runs.py", str(tmp_path / "kept"), *pair, "--seeds", "0,1")
    assert again.returncode == 0 and again.stdout == table.stdout, again.stderr[-2000:]
    empty = script("keep_logs.py", str(tmp_path / "nothing"), str(tmp_path / "kept2"))
    assert empty.returncode == 2 and "no run folder" in empty.stderr
    missing = script("paired_runs.py", str(tmp_path / "added"), *pair, "--seeds", "0")
    assert missing.returncode == 2 and "no log" in missing.stderr
