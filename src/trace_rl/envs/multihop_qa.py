"""multihop_qa: multi-hop question answering with a BM25 ``search(query)`` tool over a local passage corpus.

The paper trains on HotpotQA with a local Wikipedia retriever; neither HotpotQA nor Wikipedia text is
available offline here. The default data are real multi-hop questions: BFCL v4 web_search (100 questions,
2-4 hops) and the FanOutQA dev questions whose answer is a scalar. THE DEFAULT CORPUS IS CONSTRUCTED: one
short passage per gold hop (sub-question and sub-answer, titled by the source page), and the hop passages of
every other question (FanOutQA's non-scalar questions included) serve as distractors. It tests multi-hop
search behaviour, not open-domain retrieval. A real setup plugs in unchanged: ``load_qa_tasks(questions_path=...)``
reads HotpotQA-style questions, ``make_env("multihop_qa", corpus_path=...)`` a JSONL passage corpus
(`trace_rl.envs.retrieval`), and ``make_env("multihop_qa", retriever_url=...)`` searches a Search-R1-style retrieval
server instead (`trace_rl.envs.retrieval_client`; docs/environments.md, "Plugging in a real corpus and retriever").

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
from importlib import resources
from pathlib import Path
from typing import Any, cast

from trace_rl.envs.base import AnswerEnv, EpisodeState, StepResult, ToolCall
from trace_rl.envs.retrieval import BM25Retriever, Passage, corpus_retriever, format_hits
from trace_rl.envs.retrieval_client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    RetrievalError,
    SearchR1Client,
    check_url,
    shared_client,
)
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


@functools.cache
def _default_retriever() -> BM25Retriever:
    return BM25Retriever(default_corpus())


class MultihopQAEnv(AnswerEnv):
    """Multi-hop QA with ``search``; ``reset`` returns the question text. See the module docstring.

    Args:
        corpus_path: JSONL passage corpus searched in-process with bm25s (`trace_rl.envs.retrieval.load_corpus`:
            ``{"id", "title", "text"}`` or Search-R1's ``{"id", "contents"}`` rows; indexed once per process);
            default the constructed corpus.
        retriever_url: a Search-R1-style retrieval server's endpoint (``http://host:port/retrieve``) to search
            instead of an in-process index (`trace_rl.envs.retrieval_client`); it holds its own corpus, so
            ``corpus_path`` cannot be set with it.
        top_k: passages per search (the server is asked for ``topk=top_k``).
        max_turns: assistant turns before the episode ends with reward 0.
        retriever_timeout_s: seconds per request to the server.
        retriever_retries: retries (with exponential backoff) of a request that met a connection error, a
            timeout or an HTTP 5xx.

    A search the server could not answer is an error observation (``Error: search failed: ...``; the turn counts,
    the episode goes on); every turn with tool calls reports ``info["tool_errors"]`` (such failed calls) and
    ``info["tool_retries"]`` (retries spent), and the shared client counts requests, retries and failures
    (`trace_rl.envs.retrieval_client.RetrievalStats`, ``env.client.stats``).

    Raises:
        ValueError: a setting out of range, a bad URL, or both ``corpus_path`` and ``retriever_url``.
        DataError: a corpus file that cannot be read.
    """

    name = ENV_NAME

    def __init__(
        self,
        *,
        corpus_path: str | None = None,
        retriever_url: str | None = None,
        top_k: int = 3,
        max_turns: int = 8,
        retriever_timeout_s: float = DEFAULT_TIMEOUT_S,
        retriever_retries: int = DEFAULT_RETRIES,
    ) -> None:
        self.check_settings(
            corpus_path=corpus_path,
            retriever_url=retriever_url,
            top_k=top_k,
            max_turns=max_turns,
            retriever_timeout_s=retriever_timeout_s,
            retriever_retries=retriever_retries,
        )
        super().__init__(max_turns=max_turns)
        self.top_k = top_k
        self.retriever: BM25Retriever | None = None
        self.client: SearchR1Client | None = None
        if retriever_url is not None:
            self.client = shared_client(retriever_url, float(retriever_timeout_s), retriever_retries)
        else:
            self.retriever = corpus_retriever(corpus_path) if corpus_path else _default_retriever()
        self._turn_errors = 0
        self._turn_retries = 0

    @staticmethod
    def check_settings(
        *,
        corpus_path: str | None = None,
        retriever_url: str | None = None,
        top_k: int = 3,
        max_turns: int = 8,
        retriever_timeout_s: float = DEFAULT_TIMEOUT_S,
        retriever_retries: int = DEFAULT_RETRIES,
    ) -> None:
        """The constructor's checks, without loading or contacting anything (config validation calls it through
        `trace_rl.envs.env_kwargs_problem`).

        Raises:
            ValueError: see the class docstring.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if corpus_path is not None and not isinstance(corpus_path, str | Path):
            raise ValueError(f"corpus_path must be a path, got {corpus_path!r}")
        if retriever_url is None:
            if (retriever_timeout_s, retriever_retries) != (DEFAULT_TIMEOUT_S, DEFAULT_RETRIES):
                raise ValueError(
                    "retriever_timeout_s and retriever_retries apply to a retrieval server only; "
                    "set retriever_url or leave them at their defaults"
                )
            return
        check_url(retriever_url)
        if corpus_path is not None:
            raise ValueError(
                "corpus_path cannot take effect with retriever_url (the retrieval server searches its own "
                "corpus: give the corpus to the server, or drop retriever_url)"
            )
        if isinstance(retriever_timeout_s, bool) or not isinstance(retriever_timeout_s, int | float):
            raise ValueError(f"retriever_timeout_s must be a number of seconds, got {retriever_timeout_s!r}")
        if not retriever_timeout_s > 0:
            raise ValueError(f"retriever_timeout_s must be > 0, got {retriever_timeout_s}")
        if (
            isinstance(retriever_retries, bool)
            or not isinstance(retriever_retries, int)
            or retriever_retries < 0
        ):
            raise ValueError(f"retriever_retries must be an integer >= 0, got {retriever_retries!r}")

    def step(self, assistant_text: str) -> StepResult:
        self._turn_errors = self._turn_retries = 0
        result = super().step(assistant_text)
        if result.info.get("role") == "tool":
            result.info["tool_errors"] = self._turn_errors
            result.info["tool_retries"] = self._turn_retries
        return result

    def call_tool(self, state: EpisodeState, call: ToolCall) -> str:
        query = call.arguments.get("query")
        if not isinstance(query, str):
            raise ValueError("search needs a string argument 'query'")
        if self.client is None:
            assert self.retriever is not None
            return format_hits(self.retriever.search(query, self.top_k))
        try:
            hits, retries = self.client.search(query, self.top_k)
        except RetrievalError as exc:
            self._turn_errors += 1
            self._turn_retries += exc.retries
            tried = f" after {exc.retries + 1} attempts" if exc.retries else ""
            return f"Error: search failed{tried}: {exc}"
        self._turn_retries += retries
        return format_hits(hits)

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
