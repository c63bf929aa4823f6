"""What a ``trace_sync`` step did, written to files (``trace.record_dir``), for `trace-rl verl-check` and the tests.

verl's trainer runs inside a Ray actor (``TaskRunnerV1``), so a check of a real ``fit()`` cannot look at the
trainer's objects; with ``+trace.record_dir=DIR`` `TraceTrainer` writes, per step k (``DIR/step{k}.json``):

- ``plan``: the candidates' predicted success v, the root allocation m (one entry per candidate), the active
  prompts' uids and their m_i (what `TraceTrainer.prepare_step` submitted);
- ``batch``: the step's TransferQueue rows after verl's ``_compute_advantage``: keys, padding flags, and per row the
  response token ids, response mask and the ``advantages`` verl wrote back (lists, one entry per response token);
- ``trees``: the finished prompts the workers reported (`TraceAgentLoopWorker.pop_finished` summaries: uid, m_i,
  replays, replay budget, the `RolloutTree` as ``to_dict``), without the predictor examples' texts;
- ``predictor``: the predictor's estimates on the step's training texts before and after its update, and the
  update's metrics.

Nothing is written without ``trace.record_dir`` (the default): a training run pays nothing for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

RECORD_FIELDS = ["responses", "response_mask", "advantages"]


def _rows(column: Any) -> list[list[float]]:
    """One list per row of a TransferQueue tensor field (nested or padded)."""
    if isinstance(column, torch.Tensor):
        rows = list(column.unbind()) if column.is_nested else [column[i] for i in range(column.shape[0])]
        return [torch.as_tensor(r).reshape(-1).tolist() for r in rows]
    return [torch.as_tensor(r).reshape(-1).tolist() for r in column]


class StepRecorder:
    """Collects one step's record and writes it as ``{folder}/step{k}.json`` (module doc)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.current: dict[str, Any] = {}

    def plan(self, step: int, v: Any, m: Any, uids: list[str]) -> None:
        """Start step ``step``'s record with its plan: float (P,) v, int (P,) m, the active prompts' uids."""
        m_list = [int(x) for x in m]
        active = [x for x in m_list if x > 0]
        self.current = {
            "step": int(step),
            "plan": {
                "v": [float(x) for x in v],
                "m": m_list,
                "uids": [str(u) for u in uids],
                "m_active": active,
            },
        }

    def batch(self, keys: list[str], tags: list[dict[str, Any]], data: Any) -> None:
        """The step's rows: keys, padding flags and `RECORD_FIELDS` from TransferQueue (``data``, aligned with
        the non-padding keys)."""
        real = [i for i, t in enumerate(tags) if not t.get("is_padding", False)]
        fields = {name: _rows(data[name]) for name in RECORD_FIELDS}
        self.current["batch"] = {
            "keys": [keys[i] for i in real],
            "padding_rows": len(keys) - len(real),
            **{name: fields[name] for name in RECORD_FIELDS},
        }

    def trees(self, finished: list[dict[str, Any]]) -> None:
        """The finished prompts' summaries, without the predictor examples (their texts are long)."""
        self.current["trees"] = [{k: v for k, v in rec.items() if k != "examples"} for rec in finished]

    def predictor(self, before: list[float], after: list[float], metrics: dict[str, float]) -> None:
        """The predictor's estimates on the step's training texts before and after its update."""
        self.current["predictor"] = {"before": before, "after": after, "metrics": metrics}

    def flush(self) -> Path | None:
        """Write the current record (if any) and start afresh; returns the file written."""
        if not self.current:
            return None
        path = self.folder / f"step{self.current['step']}.json"
        path.write_text(json.dumps(self.current))
        self.current = {}
        return path


def read_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every ``step{k}.json`` of a record folder, in step order."""
    files = sorted(Path(folder).glob("step*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(p.read_text()) for p in files]
