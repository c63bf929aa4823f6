"""multihop_qa: multi-hop question answering with a BM25 ``search(query)`` tool over a local passage corpus.

The paper trains on HotpotQA with a local Wikipedia retriever; neither HotpotQA nor Wikipedia text is
available offline here. The default data are real multi-hop questions: BFCL v4 web_search (100 questions,
2-4 hops) and the FanOutQA dev questions whose answer is a scalar. THE DEFAULT CORPUS IS CONSTRUCTED: one
short passage per gold hop (sub-question and sub-answer, titled by the source page), and the hop passages of
every other question (FanOutQA's non-scalar questions included) serve as distractors. It tests multi-hop
search behaviour, not open-domain retrieval. A real setup plugs in unchanged: ``load_qa_tasks(questions_path=...)``
reads HotpotQA-style questions and ``make_env("multihop_qa", corpus_path=...)`` a JSONL passage corpus.

Reward: normalised exact match (SQuAD normalisation: lower case, no punctuation, no articles, single spaces)
against any gold answer; token F1 is logged in ``info["f1"]``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import re
import string
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

from trace_rl.envs.base import AnswerEnv, EpisodeState, ToolCall
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAME = "multihop_qa"

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the passage corpus (BM25) and return the top passages with their titles.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Search query."}},
            "required": ["query"],
        },
    },
}
GOLD_MAX_SEARCH_TURNS = 6
HINT = "Answer the question. Use the search tool as often as needed. Put only the final answer inside <answer>...</answer>."


@dataclass(frozen=True)
class Passage:
    """One corpus passage: stable id, title and text."""

    id: str
    title: str
    text: str


# ---- answer normalisation and scores --------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """SQuAD/HotpotQA normalisation: lower, drop punctuation and articles (a, an, the), collapse spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    """True when the normalised prediction equals any normalised gold answer (SQuAD-style normalisation)."""
    return any(normalize_answer(prediction) == normalize_answer(g) for g in golds)


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Max token-level F1 over the gold answers (HotpotQA's definition)."""
    best = 0.0
    pred = normalize_answer(prediction).split()
    for g in golds:
        gold = normalize_answer(g).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common == 0:
            continue
        p, r = common / len(pred), common / len(gold)
        best = max(best, 2 * p * r / (p + r))
    return best


# ---- default data (constructed corpus) ------------------------------------------------------------------


def _render(answer: Any) -> str:
    if isinstance(answer, list):
        return ", ".join(_render(a) for a in answer)
    if isinstance(answer, dict):
        return "; ".join(f"{k}: {_render(v)}" for k, v in answer.items())
    return str(answer)


def _title_from_url(url: str, fallback: str) -> str:
    try:
        path = urllib.parse.urlparse(url).path
        last = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")
        return last if 2 <= len(last) <= 80 and "." not in last else fallback
    except ValueError:
        return fallback


def _web_search_rows() -> list[dict[str, Any]]:
    data = resources.files("bfcl_eval").joinpath("data")
    questions = [
        json.loads(x) for x in data.joinpath("BFCL_v4_web_search.json").read_text().splitlines() if x.strip()
    ]
    answers = {
        a["id"]: a
        for a in (
            json.loads(x)
            for x in data.joinpath("possible_answer", "BFCL_v4_web_search.json").read_text().splitlines()
            if x.strip()
        )
    }
    rows = []
    for q in questions:
        a = answers[q["id"]]
        hops = [
            {
                "question": s["subquestion"],
                "answer": _render(s["answer"]),
                "title": _title_from_url(s.get("source", ""), ""),
            }
            for s in a["source"]
        ]
        rows.append(
            {
                "id": q["id"],
                "question": q["question"][0][0]["content"],
                "answers": [str(x) for x in a["ground_truth"]],
                "hops": hops,
                "source": "bfcl_web_search",
            }
        )
    return rows


def _fanout_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(scalar-answer questions, hop rows of the other questions for distractors)."""
    # Locate the data without importing fanoutqa (its __init__ needs markdownify, which we do not install).
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("fanoutqa is not installed (make install adds fanoutqa==1.1.1 with --no-deps)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    data = json.loads((folder / "data" / "fanout-final-dev.json").read_text(encoding="utf-8"))
    scalar: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    for q in data:
        hops = [
            {
                "question": d["question"],
                "answer": _render(d["answer"]),
                "title": (d.get("evidence") or {}).get("title") or d["question"],
            }
            for d in q.get("decomposition", [])
        ]
        row = {
            "id": f"fanoutqa_{q['id']}",
            "question": q["question"],
            "answers": [str(q["answer"])],
            "hops": hops,
            "source": "fanoutqa",
        }
        (
            scalar
            if isinstance(q["answer"], (str, int, float)) and not isinstance(q["answer"], bool)
            else other
        ).append(row)
    return scalar, other


def _hop_passages(rows: list[dict[str, Any]]) -> list[Passage]:
    out = []
    for r in rows:
        for i, h in enumerate(r["hops"]):
            out.append(
                Passage(id=f"{r['id']}#{i}", title=h["title"], text=f"{h['question']}: {h['answer']}.")
            )
    return out


@functools.cache
def default_corpus() -> tuple[Passage, ...]:
    """The constructed corpus: every hop passage of web_search and FanOutQA dev (distractors included)."""
    scalar, other = _fanout_rows()
    return tuple(_hop_passages(_web_search_rows() + scalar + other))


def load_corpus(path: str | Path) -> tuple[Passage, ...]:
    """A JSONL passage corpus: one ``{"id", "title", "text"}`` object per line (id optional).

    Raises:
        ValueError: a line that is not a JSON object with a string "text" (the message names the line).
    """
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise DataError(f"{path}:{n}: a passage needs a string 'text' field")
        out.append(Passage(id=str(row.get("id", n)), title=str(row.get("title", "")), text=row["text"]))
    if not out:
        raise DataError(f"{path}: corpus is empty")
    return tuple(out)


def _row_to_task(r: dict[str, Any]) -> Task:
    return Task(
        id=str(r["id"]),
        env=ENV_NAME,
        prompt=f"{r['question']}\n\n{HINT}",
        answer=r["answers"][0],
        tools=(SEARCH_TOOL,),
        metadata={
            "answers": r["answers"],
            "hops": r.get("hops", []),
            "source": r.get("source", "user"),
            "question": r["question"],
        },
    )


def load_hotpot_questions(path: str | Path) -> list[dict[str, Any]]:
    """HotpotQA-style questions from JSON (a list) or JSONL: fields ``_id``/``id``, ``question``, ``answer``
    (string or list of aliases); optional ``supporting_facts`` are ignored, optional ``hops`` kept.

    Raises:
        ValueError: a row without a string question or an answer (the message names the row).
    """
    text = Path(path).read_text(encoding="utf-8")
    rows = (
        json.loads(text)
        if text.lstrip().startswith("[")
        else [json.loads(x) for x in text.splitlines() if x.strip()]
    )
    out = []
    for n, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or r.get("answer") in (None, ""):
            raise DataError(f"{path}: row {n} needs a string 'question' and an 'answer'")
        answers = [str(a) for a in r["answer"]] if isinstance(r["answer"], list) else [str(r["answer"])]
        out.append(
            {
                "id": r.get("_id", r.get("id", f"q{n}")),
                "question": r["question"],
                "answers": answers,
                "hops": r.get("hops", []),
                "source": "user",
            }
        )
    return out


def load_qa_tasks(
    split: str = "train", limit: int | None = None, seed: int = 0, *, questions_path: str | None = None
) -> list[Task]:
    """Questions for multihop_qa: default web_search + scalar FanOutQA dev (123), or ``questions_path``.

    Splits: "train" (80%), "test" (20%) of a shuffle with ``seed``, or "all".

    Raises:
        ValueError: unknown split, bad question file.
    """
    if questions_path is not None:
        rows = load_hotpot_questions(questions_path)
    else:
        rows = _web_search_rows() + _fanout_rows()[0]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    cut = round(0.8 * len(rows))
    if split == "train":
        order = order[:cut]
    elif split == "test":
        order = order[cut:]
    elif split != "all":
        raise DataError(f"multihop_qa split must be 'train', 'test' or 'all', got {split!r}")
    tasks = [_row_to_task(rows[i]) for i in order]
    return tasks[:limit] if limit is not None else tasks


# ---- retrieval -------------------------------------------------------------------------------------------


class BM25Retriever:
    """bm25s over a passage tuple (English stopwords). Empty queries and k > corpus size are handled."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = tuple(passages)
        self._bm25s = bm25s
        self._index = bm25s.BM25()
        self._index.index(
            bm25s.tokenize(
                [f"{p.title} {p.text}" for p in self.passages], stopwords="en", show_progress=False
            ),
            show_progress=False,
        )

    def search(self, query: str, k: int = 3) -> list[Passage]:
        if not query.strip() or k < 1:
            return []
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        k = min(k, len(self.passages))
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        return [self.passages[int(i)] for i, s in zip(docs[0], scores[0], strict=True) if s > 0]


@functools.cache
def _default_retriever() -> BM25Retriever:
    return BM25Retriever(default_corpus())


class MultihopQAEnv(AnswerEnv):
    """Multi-hop QA with ``search``; ``reset`` returns the question text. See the module docstring.

    Args:
        corpus_path: JSONL passage corpus; default the constructed corpus.
        top_k: passages per search.
        max_turns: assistant turns before the episode ends with reward 0.
    """

    name = ENV_NAME

    def __init__(self, *, corpus_path: str | None = None, top_k: int = 3, max_turns: int = 8) -> None:
        super().__init__(max_turns=max_turns)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        self.top_k = top_k
        self.retriever = BM25Retriever(load_corpus(corpus_path)) if corpus_path else _default_retriever()

    def call_tool(self, state: EpisodeState, call: ToolCall) -> str:
        query = call.arguments.get("query")
        if not isinstance(query, str):
            raise ValueError("search needs a string argument 'query'")
        hits = self.retriever.search(query, self.top_k)
        if not hits:
            return "No results."
        return "\n".join(
            f"[{i}] {p.title}: {p.text}" if p.title else f"[{i}] {p.text}" for i, p in enumerate(hits, 1)
        )

    def score(self, task: Task, answer: str) -> tuple[float, dict[str, Any]]:
        golds = [str(a) for a in cast(list[Any], task.metadata.get("answers", [task.answer or ""]))]
        em = exact_match(answer, golds)
        return (1.0 if em else 0.0), {"em": em, "f1": f1_score(answer, golds)}


def qa_gold_trajectory(task: Task) -> list[str]:
    """One search per gold hop (the sub-question as the query), then the gold answer. Questions with more than
    GOLD_MAX_SEARCH_TURNS hops put several searches in one turn so the gold fits the default max_turns."""
    calls = [
        f"<tool_call>{json.dumps({'name': 'search', 'arguments': {'query': h['question']}})}</tool_call>"
        for h in cast(list[dict[str, Any]], task.metadata.get("hops", []))
    ]
    per_turn = max(1, -(-len(calls) // GOLD_MAX_SEARCH_TURNS))
    turns = ["\n".join(calls[i : i + per_turn]) for i in range(0, len(calls), per_turn)]
    return [*turns, f"<answer>{task.answer}</answer>"]
