"""trace-rl tasks as verl dataset rows (RLHFDataset columns), for parquet files or direct submission."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_rl.integrations.verl.agent_loop import TRACE_AGENT
from trace_rl.policy.chat import CHAT
from trace_rl.types import Task


def task_row(task: Task, index: int) -> dict[str, Any]:
    """One verl row: ``data_source`` (the env), ``prompt`` (chat messages: the system message the agent loop
    renders, tool schemas included (`ChatFormat.system_text`), then the user prompt; so verl's overlong-prompt
    filter, ``data.filter_overlong_prompts``, counts the tokens the agent loop's first context really has),
    ``agent_name`` = ``trace_agent``, ``reward_model`` (ground truth, informational: the env scores),
    ``extra_info`` with ``index`` and ``trace_task``: the Task's fields as a JSON string (parquet cannot store
    arbitrary nested metadata; `agent_loop.task_from_row` reads it)."""
    return {
        "data_source": task.env,
        "prompt": [
            {"role": "system", "content": CHAT.system_text(task.tools)},
            {"role": "user", "content": task.prompt},
        ],
        "agent_name": TRACE_AGENT,
        "ability": "agent",
        "reward_model": {"style": "rule", "ground_truth": task.answer or ""},
        "extra_info": {
            "index": index,
            "trace_task": json.dumps(
                {
                    "id": task.id,
                    "env": task.env,
                    "prompt": task.prompt,
                    "answer": task.answer,
                    "tools": list(task.tools),
                    "metadata": dict(task.metadata),
                }
            ),
        },
    }


def tasks_to_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """`task_row` for each task, indexed in order."""
    return [task_row(t, i) for i, t in enumerate(tasks)]


def write_parquet(tasks: Sequence[Task], path: str | Path) -> Path:
    """Write `tasks_to_rows(tasks)` as a parquet file verl's ``data.train_files`` can read; returns the path."""
    import pandas as pd

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(tasks_to_rows(tasks)).to_parquet(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trace_rl.integrations.verl.data --env math_python --split train --limit N --out FILE``:
    write a trace-rl environment's tasks as a verl parquet file (``data.train_files``)."""
    import argparse

    from trace_rl.envs import load_tasks

    ap = argparse.ArgumentParser(prog="python -m trace_rl.integrations.verl.data", description=main.__doc__)
    ap.add_argument("--env", required=True, help="math_python | bfcl | multihop_qa")
    ap.add_argument("--split", default="train")
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    tasks = load_tasks(args.env, split=args.split, limit=args.limit, seed=args.seed)
    print(write_parquet(tasks, args.out), len(tasks), "tasks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
