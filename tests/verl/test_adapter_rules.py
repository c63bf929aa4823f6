"""The verl adapter's rules that need no server (issue 25): context-filling prompts make valid failed rows, rows
carry the rendered tool schemas, the verl version is checked, and settings that cannot take effect are refused."""

from __future__ import annotations

import numpy as np
import pytest
from jinja2 import Template
from omegaconf import OmegaConf

from trace_rl.integrations.verl import check_verl_version
from trace_rl.integrations.verl.agent_loop import VerlServerBackend, build_output
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.data import task_row
from trace_rl.integrations.verl.layout import RowLayout, tree_from_rows
from trace_rl.integrations.verl.trainer import refuse_unsupported
from trace_rl.policy.chat import CHAT, CHAT_TEMPLATE
from trace_rl.rollout.agent import Episode
from trace_rl.types import Task, Turn


def context_filled_episode() -> Episode:
    """What `run_episode` returns when the prompt alone fills max_context: one empty failed turn, reward 0."""
    empty = np.zeros(0, np.int64)
    turn = Turn(empty, empty.astype(np.int8), empty.astype(np.float32), "", "", {"finish_reason": "context"})
    task = Task(id="t", env="x", prompt="p")
    return Episode(task, 0, np.arange(10, dtype=np.int64), [turn], 0.0, [], "context")


def test_a_context_filling_prompt_becomes_a_valid_failed_row() -> None:
    backend = VerlServerBackend(server_manager=None, request_id="u", stop_ids=[7])
    out = build_output(context_filled_episode(), None, 0, backend, filler_id=7)
    assert out["response_ids"] == [7] and out["response_mask"] == [0] and out["reward_score"] == 0.0
    extra = out["extra_fields"]
    assert extra["trace_turn_lens"] == [1] and extra["trace_finish"] == "context"
    layout = RowLayout(np.array(extra["trace_sessions"]), np.array(extra["trace_turn_lens"]))  # used to raise
    # two such rows and one successful root make a valid group: the failures count in the reward statistics
    ok = RowLayout(np.array([2]), np.array([3]))
    prompt = tree_from_rows([layout, RowLayout(np.array([1]), np.array([1])), ok], [0.0, 0.0, 1.0])
    assert prompt.tree.num_root_rollouts == 3


def test_rows_carry_the_tool_schemas_the_agent_loop_renders() -> None:
    tools = ({"name": "f", "description": "d" * 200, "parameters": {"type": "object", "properties": {}}},)
    task = Task(id="t", env="bfcl", prompt="do it", tools=tools)
    messages = task_row(task, 0)["prompt"]
    rendered = Template(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True)
    assert rendered == CHAT.prompt(task.prompt, task.tools)  # verl's length filter sees the same text
    assert '"d' + "d" * 199 in messages[0]["content"]


def test_old_verl_is_refused_and_newer_is_accepted() -> None:
    for old in ("0.9.0", "0.8.2", "unknown"):
        with pytest.raises(RuntimeError, match=r"0\.9\.1"):
            check_verl_version(old)
    check_verl_version("0.9.1")
    check_verl_version("0.10.0.dev")  # a warning only


def test_settings_that_cannot_take_effect_are_refused() -> None:
    with pytest.raises(ValueError, match="sync_refill_failed_groups"):
        refuse_unsupported(
            OmegaConf.create({"trainer": {"v1": {"sampler": {"sync_refill_failed_groups": True}}}})
        )
    with pytest.raises(ValueError, match="filter_groups"):
        refuse_unsupported(OmegaConf.create({"algorithm": {"filter_groups": {"enable": True}}}))
    with pytest.raises(
        ValueError, match="custom_sampler"
    ):  # the failed-prompt rule lives in TraceReplayBuffer
        refuse_unsupported(
            OmegaConf.create(
                {"trainer": {"v1": {"sampler": {"custom_sampler": {"path": "x.py", "name": "Sampler"}}}}}
            )
        )
    refuse_unsupported(OmegaConf.create({"trainer": {"v1": {"sampler": {}}}}))
    refuse_unsupported(  # verl's generated default: both null
        OmegaConf.create({"trainer": {"v1": {"sampler": {"custom_sampler": {"path": None, "name": None}}}}})
    )
    with pytest.raises(ValueError, match=r"trace\.method"):
        TraceVerlConfig(method="grpo")
    for name in ("state-head", "ngram+minilm+state"):  # no policy in the driver to read hidden states from
        with pytest.raises(ValueError, match="hidden states"):
            TraceVerlConfig(predictor=name)
    for name in ("ngram+minilm+group", "ngram+minilm+group-prior"):  # its actor gets no consensus rows
        with pytest.raises(ValueError, match="sibling consensus"):
            TraceVerlConfig(predictor=name)
    with pytest.raises(ValueError, match="denominator"):
        TraceVerlConfig(method="trace_fresh", replay_cost=0.123456789)
    assert TraceVerlConfig(method="trace_fresh", accounting="token").replay_cost == 0.5
