"""verl scores a prompt with the text its predictor learns from (issue 40): one function, `predictor_text`, at the
predictor's own limit, for the trainer's candidate prompts and for the workers' training examples; and the verl
version seam refuses a faked old verl or a moved name with one line naming the supported and tested releases."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from trace_rl.integrations.verl.data import task_row
from trace_rl.integrations.verl.predictor import PredictorActor, RemotePredictor, predictor_text
from trace_rl.integrations.verl.trainer import root_anchor_text, row_prompt
from trace_rl.predictor import node_examples, serialize_anchor
from trace_rl.types import Task

SCHEMA = '{"name": "lookup", "parameters": {"properties": {"key": {"type": "string"}}}} ' * 40
PROMPT = (
    "Earlier turns of this conversation:\n" + SCHEMA + "\nQuestion: what is 17 * 23? Answer with the number."
)


class Tree:
    """The prompt, one anchor (a tool call) and two endings below it: duck-typed as node_examples reads a tree."""

    parent = np.array([-1, 0, 1, 1])
    depth = np.array([0, 1, 2, 2])
    turns: ClassVar[list[Any]] = [
        None,
        SimpleNamespace(text="<tool_call>{...}</tool_call>", observation="391"),
        SimpleNamespace(text="<answer>391</answer>", observation=""),
        SimpleNamespace(text="<answer>401</answer>", observation=""),
    ]

    def value_targets(self) -> np.ndarray:
        return np.array([0.5, 0.5, 1.0, 0.0])


@pytest.mark.parametrize(("name", "limit"), [("ngram", 1024), ("tiny", 508)])
def test_a_long_prompt_is_scored_with_the_text_its_examples_hold(name: str, limit: int) -> None:
    task = Task(id="t", env="math_python", prompt=PROMPT)
    assert len(PROMPT) > 3000
    actor = PredictorActor(name)
    profile = actor.profile()
    assert profile["max_chars"] == limit < len(PROMPT)
    row = task_row(task, 0)
    scored = root_anchor_text(row, max_chars=profile["max_chars"])  # what TraceTrainer.prepare_step scores
    assert row_prompt(row) == PROMPT and len(scored) <= limit
    assert scored == predictor_text(PROMPT, max_chars=limit)
    assert "Question: what is 17 * 23?" in scored  # the prompt's end (the question itself) survives the cut
    remote = RemotePredictor(handle=None, profile=profile)
    examples = node_examples(  # what TraceAgentLoopWorker.pop_finished hands the trainer's predictor update
        Tree(), task.prompt, max_chars=remote.max_chars, weighting="uniform", text_of=remote.text
    )
    assert [e.node for e in examples] == [0, 1]
    assert examples[0].text == scored  # the root example IS the scored text
    anchor = predictor_text(PROMPT, Tree.turns[1:2], max_chars=limit)
    assert examples[1].text == anchor == serialize_anchor(PROMPT, Tree.turns[1:2], max_chars=limit)
    assert scored != serialize_anchor(PROMPT)  # the old scoring text (4,096 characters) differed
    actor.update([e.text for e in examples], [e.target for e in examples])
    assert len(actor.predict([scored])) == 1


def test_a_row_without_a_trace_task_uses_its_last_user_message() -> None:
    row = {"raw_prompt": [{"role": "user", "content": "first"}, {"role": "user", "content": PROMPT}]}
    assert root_anchor_text(row, max_chars=1024) == predictor_text(PROMPT, max_chars=1024)
    with pytest.raises(ValueError, match="max_chars"):
        root_anchor_text(row, max_chars=10)


def test_the_verl_seam_refuses_a_faked_old_verl(monkeypatch) -> None:
    import verl
    from trace_rl.integrations.verl import UnsupportedVersionError, compat

    try:
        monkeypatch.setattr(verl, "__version__", "0.8.2")
        with pytest.raises(UnsupportedVersionError) as info:
            importlib.reload(compat)
        message = str(info.value)
        assert message.startswith("verl 0.8.2 is older than") and "tested: 0.9.1" in message
        assert "\n" not in message
        monkeypatch.undo()
        monkeypatch.setitem(sys.modules, "verl.trainer.ppo.v1.replay_buffer", None)  # a release that moved it
        with pytest.raises(
            UnsupportedVersionError, match=r"verl 0\.9\.1 has no verl\.trainer\.ppo\.v1\.replay_buffer"
        ):
            importlib.reload(compat)
    finally:
        monkeypatch.undo()
        importlib.reload(compat)
    assert compat.verl_version() == verl.__version__ and compat.ReplayBuffer is not None
