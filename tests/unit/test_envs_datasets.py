"""verl parquet / JSONL loaders: good rows become Tasks, bad rows are named."""

from __future__ import annotations

import json

import pytest

from trace_rl.envs.datasets import load_jsonl_tasks, load_verl_parquet

ROW = {
    "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
    "reward_model": {"ground_truth": "4", "style": "rule"},
    "data_source": "toy",
    "extra_info": {"index": 7},
}


def test_verl_parquet_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([ROW]), path)
    [task] = load_verl_parquet(path, env="math_python")
    assert (task.id, task.prompt, task.answer, task.env) == ("toy-7", "2+2?", "4", "math_python")
    assert task.metadata["messages"][0]["role"] == "system"


def test_jsonl_errors_name_the_row(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "d.jsonl"
    bad = {**ROW, "reward_model": {"style": "rule"}}
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"row 1: missing reward_model.ground_truth"):
        load_jsonl_tasks(path, env="math_python")
    path.write_text(json.dumps(ROW) + "\n{oops\n")
    with pytest.raises(ValueError, match="line 2"):
        load_jsonl_tasks(path, env="math_python")


def test_jsonl_task_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "hi", "answer": 3}) + "\n")
    [task] = load_jsonl_tasks(path, env="multihop_qa")
    assert (task.id, task.answer, task.env) == ("a", "3", "multihop_qa")
