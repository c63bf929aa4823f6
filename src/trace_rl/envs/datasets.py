"""Task loaders for verl-style parquet rows and JSONL files.

A verl row holds ``prompt`` (a list of chat messages ``{"role", "content"}``), ``reward_model``
(``{"ground_truth": ..., "style": ...}``), ``data_source`` and ``extra_info`` (a dict, often with ``index``).
It becomes a Task whose prompt is the last user message, answer the ground truth as text, and metadata the
full messages, data source and extra info. JSONL files may hold verl-shaped rows or Task-shaped rows
(``{"id", "prompt", "answer", "tools", "metadata"}``). Every error names the file and the row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_rl.errors import DataError
from trace_rl.types import Task


def _verl_row_to_task(
    row: dict[str, Any], where: str, env: str, tools: tuple[dict[str, object], ...]
) -> Task:
    messages = row.get("prompt")
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'prompt' must be a non-empty list of chat messages")
    for m in messages:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(f"{where}: every prompt message needs string 'role' and 'content'")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise DataError(f"{where}: the prompt has no user message")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise DataError(f"{where}: missing reward_model.ground_truth")
    truth = reward_model["ground_truth"]
    extra = row.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise DataError(f"{where}: extra_info must be a dict")
    source = str(row.get("data_source", "unknown"))
    task_id = str(extra.get("id", extra.get("index", where.rsplit(" ", 1)[-1])))
    return Task(
        id=f"{source}-{task_id}",
        env=env,
        prompt=users[-1],
        answer=truth if isinstance(truth, str) else json.dumps(truth),
        tools=tools,
        metadata={"messages": messages, "data_source": source, "extra_info": extra, "source": "verl"},
    )


def _task_row_to_task(
    row: dict[str, Any], where: str, env: str, tools: tuple[dict[str, object], ...]
) -> Task:
    if not isinstance(row.get("id"), str) or not isinstance(row.get("prompt"), str):
        raise DataError(f"{where}: a task row needs string 'id' and 'prompt'")
    row_tools = row.get("tools", list(tools))
    if not isinstance(row_tools, list) or not all(isinstance(t, dict) for t in row_tools):
        raise DataError(f"{where}: 'tools' must be a list of OpenAI function schemas")
    metadata = row.get("metadata", {})
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be an object")
    answer = row.get("answer")
    return Task(
        id=row["id"],
        env=str(row.get("env", env)),
        prompt=row["prompt"],
        answer=None if answer is None else str(answer),
        tools=tuple(row_tools),
        metadata=metadata,
    )


def rows_to_tasks(
    rows: list[Any], source: str, env: str, tools: tuple[dict[str, object], ...] = ()
) -> list[Task]:
    """Convert verl-shaped or Task-shaped rows; ``source`` names the file in error messages.

    Raises:
        ValueError: naming ``source`` and the 0-based row of the first bad row.
    """
    out = []
    for i, row in enumerate(rows):
        where = f"{source}: row {i}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object, got {type(row).__name__}")
        if isinstance(row.get("prompt"), list) or "reward_model" in row:
            out.append(_verl_row_to_task(row, where, env, tools))
        else:
            out.append(_task_row_to_task(row, where, env, tools))
    return out


def load_jsonl_tasks(path: str | Path, env: str, tools: tuple[dict[str, object], ...] = ()) -> list[Task]:
    """Tasks from a JSONL file (one row per line; blank lines skipped).

    Raises:
        ValueError: a line that is not JSON or a row that is malformed (names the line / row).
    """
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {n}: not valid JSON ({exc.msg})") from exc
    return rows_to_tasks(rows, str(path), env, tools)


def load_verl_parquet(path: str | Path, env: str, tools: tuple[dict[str, object], ...] = ()) -> list[Task]:
    """Tasks from a verl-style parquet file (needs pyarrow).

    Raises:
        ValueError: a malformed row (names the row).
    """
    import pyarrow.parquet as pq

    rows = pq.read_table(str(path)).to_pylist()
    return rows_to_tasks(rows, str(path), env, tools)
