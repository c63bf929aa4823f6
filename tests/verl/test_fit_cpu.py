"""TRACE's verl trainer for real on this CPU (issue 61): ``python -m verl.trainer.main_ppo`` with
``trainer.v1.trainer_mode=trace_sync`` runs two training steps of the tiny policy on the parity environment.

What runs is verl's own code from its entry point: ``TaskRunnerV1``, ``TraceTrainer.init()`` (an FSDP2 actor worker
on gloo through the CPU platform of `trace_rl.integrations.verl.cpu`), the agent-loop manager and workers,
TransferQueue, the replay buffer, the actor's log-prob recomputation and update, the weight sync (verl's
``CheckpointEngineManager`` -> the actor worker's rollout adapter -> a vLLM-CPU server reloading the weights), the
predictor update and the file logger. The run leaves its evidence in files (`check.CheckPaths`): TRACE's step
records (``trace.record_dir``), the weight-sync log and verl's metrics, which the tests below read.

Checks: the run exits 0 and leaves no process; each step's root sessions equal the plan and replays equal N * m_i;
the actor's weights after step 1 differ from the initial ones (which the first sync reproduces bit for bit); the
server's log-probs of a fixed sequence change with the step-1 sync and equal, after the last sync, those of the
synced weights computed with transformers; the advantages verl wrote to the batch equal trace-rl's TreeRPO on the
recorded trees; the predictor's estimates move. The vLLM server is started here and stopped by PID.
"""

from __future__ import annotations

import os
import resource
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

import trace_rl
from trace_rl.advantages import token_advantages, treerpo_advantages
from trace_rl.integrations.verl.check import (
    CheckPaths,
    cpu_env,
    cpu_overrides,
    run_main_ppo,
    verify,
    wait_for_exit,
)
from trace_rl.integrations.verl.data import write_parquet
from trace_rl.rollout.vllm_server import export_policy, launch_servers, stop_servers, vllm_python
from trace_rl.tree import RolloutTree
from trace_rl.types import Task

HERE = Path(__file__).resolve().parent
SRC = Path(trace_rl.__file__).resolve().parents[1]
N = 2  # continuations per root
STEPS = 2
ROOT_BUDGET = 5


def overrides(paths: CheckPaths, data: Path) -> list[str]:
    """The test's verl config: verl's defaults, TRACE's lines, small sizes; then the CPU settings."""
    return [
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.train_batch_size=2",
        "data.max_prompt_length=256",
        "data.max_response_length=512",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.prompt_length=256",
        "actor_rollout_ref.rollout.response_length=512",
        "actor_rollout_ref.rollout.agent.default_agent_loop=trace_agent",
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        "trace_rl.integrations.verl.worker.TraceAgentLoopManager",
        "algorithm.adv_estimator=trace_treerpo",
        "trainer.v1.trainer_mode=trace_sync",
        "trainer.total_epochs=1",
        f"+trace.continuations={N}",
        "+trace.env=parity_env:make_parity_env",
        "+trace.max_turns=3",
        "+trace.max_new_tokens=12",
        "+trace.max_context=1024",
        "+trace.max_rollouts=3",
        f"+trace.root_budget={ROOT_BUDGET}",
        "+trace.max_active=2",
        "+trace.candidate_pool=4",
        "+trace.predictor=ngram",
    ]


@pytest.fixture(scope="module")
def fit(tmp_path_factory):  # type: ignore[no-untyped-def]
    vllm_python()  # fails (never skips) without .venv-vllm: `make verl-test` depends on `make vllm`
    from trace_rl.policy import load_policy

    paths = CheckPaths(tmp_path_factory.mktemp("verl_fit"))
    policy = load_policy("tiny", seed=3)
    export_policy(policy, paths.model)
    tasks = [
        Task(id=f"p{i}", env="parity", prompt=f"Count to {i + 3}, one number per turn.") for i in range(8)
    ]
    data = write_parquet(tasks, paths.root / "train.parquet")
    marker = uuid.uuid4().hex
    t0 = time.perf_counter()
    servers = launch_servers(
        paths.model, 1, nice=19, threads=1, max_num_seqs=16, kv_cache_gib=1, timeout_s=540
    )
    server_pids = [s.pid for s in servers]
    try:
        env = cpu_env(paths, pythonpath=[str(HERE), str(SRC)])
        env["TRACE_RL_RUN_MARKER"] = marker  # inherited by every process the run starts
        rc, seconds = run_main_ppo(
            overrides(paths, data) + cpu_overrides(paths, [s.url for s in servers], steps=STEPS, env=env),
            env,
            log=paths.log,
            timeout_s=1500,
        )
    finally:
        stop_servers(servers)
    left = wait_for_exit(marker, timeout_s=60) + [p for p in server_pids if Path(f"/proc/{p}").exists()]
    for pid in left:  # fail below, but leave nothing running on the shared machine
        os.kill(pid, signal.SIGKILL)
    yield {
        "paths": paths,
        "rc": rc,
        "seconds": seconds,
        "total_seconds": time.perf_counter() - t0,
        "left": left,
        "result": verify(paths, STEPS),
        "log_tail": paths.log.read_text()[-6000:] if paths.log.exists() else "",
        "peak_rss_children_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def test_fit_runs_two_trace_sync_steps_and_exits_cleanly(fit):  # type: ignore[no-untyped-def]
    assert fit["rc"] == 0, fit["log_tail"]
    assert fit["left"] == [], f"processes left after the run: {fit['left']}"
    result = fit["result"]
    assert result.steps == STEPS and result.failures == [], result.failures
    print(
        f"verl fit on CPU: main_ppo {fit['seconds']:.0f} s, with the server {fit['total_seconds']:.0f} s, "
        f"largest child RSS {fit['peak_rss_children_mib']:.0f} MiB"
    )


def test_fit_root_allocation_and_replays_happened_as_planned(fit):  # type: ignore[no-untyped-def]
    for rec in fit["result"].records:
        plan = rec["plan"]
        assert sum(plan["m"]) == ROOT_BUDGET and len(plan["m"]) == 4  # the candidate pool
        assert len(plan["uids"]) == sum(1 for m in plan["m"] if m > 0) <= 2  # max_active
        trees = {t["uid"]: t for t in rec["trees"]}
        assert set(trees) == set(plan["uids"])  # skipped prompts never ran
        rows = {k.split("_")[0] for k in rec["batch"]["keys"]}
        assert rows == set(plan["uids"])  # and never reached the update
        for uid, m in zip(plan["uids"], plan["m_active"], strict=True):
            tree = RolloutTree.from_dict(trees[uid]["tree"])
            assert trees[uid]["roots"] == m == tree.num_root_rollouts
            assert trees[uid]["replay_budget"] == N * m
            assert trees[uid]["replays"] == tree.num_replays == N * m  # every root has anchors: all spent
            assert sum(1 for k in rec["batch"]["keys"] if k.startswith(uid)) == tree.num_leaves


def test_fit_actor_weights_change_after_step_1(fit):  # type: ignore[no-untyped-def]
    """The first sync (verl's on_init_end) carries the FSDP actor's initial weights: exactly the exported
    policy's. The sync after step 1 carries different ones: the update changed the actor."""
    from safetensors.torch import load_file

    from trace_rl.integrations.verl.cpu_rollout import tensors_digest

    syncs = {s["global_steps"]: s for s in fit["result"].syncs}
    initial = load_file(str(fit["paths"].model / "model.safetensors"))
    assert syncs[0]["tensors"] == len(initial)
    assert syncs[0]["digest"] == tensors_digest(initial)
    assert syncs[1]["digest"] != syncs[0]["digest"]
    updates = [m["data"] for m in fit["result"].metrics if "actor/pg_loss" in m.get("data", {})]
    assert len(updates) == STEPS


def test_fit_rollout_server_serves_the_new_weights_at_step_2(fit):  # type: ignore[no-untyped-def]
    """The server's log-probs of a fixed sequence move with the step-1 sync (step 2's rollouts are sampled from
    the updated policy), and after the last sync equal those of the synced weights computed with transformers."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    syncs = {s["global_steps"]: s for s in fit["result"].syncs}
    before, after = np.array(syncs[0]["probe_logprobs"]), np.array(syncs[1]["probe_logprobs"])
    assert np.abs(after - before).max() > 1e-3
    last = syncs[max(syncs)]
    folder = fit["paths"].sync / "replica0"
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).float().eval()
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    ids = torch.tensor([last["probe_ids"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
    ours = logp.gather(1, ids[0, 1:, None]).squeeze(1).numpy()
    assert np.abs(ours - np.array(last["probe_logprobs"])).max() < 1e-3


def test_fit_advantages_in_the_batch_equal_trace_rl_on_the_same_trees(fit):  # type: ignore[no-untyped-def]
    spread = 0.0
    for rec in fit["result"].records:
        batch, trees = rec["batch"], {t["uid"]: t for t in rec["trees"]}
        assert len(batch["keys"]) == sum(RolloutTree.from_dict(t["tree"]).num_leaves for t in trees.values())
        for uid, t in trees.items():
            tree = RolloutTree.from_dict(t["tree"])
            paths = {tuple(p.token_ids.tolist()): p for p in token_advantages(tree, treerpo_advantages(tree))}
            rows = [i for i, k in enumerate(batch["keys"]) if k.split("_")[0] == uid]
            assert len(rows) == len(paths) == tree.num_leaves
            for i in rows:
                ids = tuple(int(x) for x in batch["responses"][i])
                path = paths[ids]  # the row is exactly one root-to-leaf path of the tree
                adv = np.asarray(batch["advantages"][i], dtype=np.float64)
                n = len(ids)
                assert np.array_equal(
                    np.asarray(batch["response_mask"][i][:n]).astype(np.int8), path.loss_mask
                )
                assert np.max(np.abs(adv[:n] - path.advantages)) < 1e-6
                spread = max(spread, float(np.abs(path.advantages).max()))
    assert spread > 0  # both outcomes appeared: the comparison is not 0 == 0


def test_fit_predictor_updated(fit):  # type: ignore[no-untyped-def]
    for rec in fit["result"].records:
        pred = rec["predictor"]
        assert pred["metrics"]["trace/predictor_examples"] == len(pred["before"]) > 0
        assert np.abs(np.array(pred["after"]) - np.array(pred["before"])).max() > 1e-3
    logged = [m["data"] for m in fit["result"].metrics if "trace/predictor_examples" in m.get("data", {})]
    assert len(logged) == STEPS


def test_no_process_of_the_run_is_left(fit):  # type: ignore[no-untyped-def]
    assert fit["left"] == []
    assert os.getpid() not in fit["left"]
