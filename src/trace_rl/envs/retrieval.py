"""Passage corpora and the in-process bm25s retriever behind ``multihop_qa``'s ``search`` tool.

Two JSONL corpus row formats are read (`load_corpus`): ours, ``{"id", "title", "text"}``, and Search-R1's,
``{"id", "contents"}`` with ``contents = '"Title"\\ntext'`` (its wiki-18 dump; `split_contents` /
`to_contents` convert). `format_hits` is the observation the search tool shows, whichever backend found the
passages (this bm25s index, or a Search-R1-style retrieval server through `trace_rl.envs.retrieval_client`), so
the two backends give the same observation for the same passages. The server over this index is
`trace_rl.envs.retrieval_server`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_rl.errors import DataError


@dataclass(frozen=True)
class Passage:
    """One corpus passage: stable id, title ("" when it has none) and text."""

    id: str
    title: str
    text: str


def split_contents(contents: str) -> tuple[str, str]:
    """(title, text) of a Search-R1 ``contents`` string: the first line is the title, in double quotes in
    Search-R1's wiki-18 dump (one pair of surrounding quotes is removed), the rest is the text. A string
    without a line break is all text (title "")."""
    if "\n" not in contents:
        return "", contents
    title, text = contents.split("\n", 1)
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text


def to_contents(passage: Passage) -> str:
    """The Search-R1 ``contents`` of a passage, ``'"Title"\\ntext'``; `split_contents` inverts it for any
    title without a line break.

    Raises:
        ValueError: a title with a line break (Search-R1's format cannot carry it).
    """
    if "\n" in passage.title or "\r" in passage.title:
        raise ValueError(
            f"passage {passage.id!r}: a title with a line break has no Search-R1 'contents' form"
        )
    return f'"{passage.title}"\n{passage.text}'


def passage_from_row(row: Any, where: str, default_id: str) -> Passage:
    """A passage from one corpus row: ``{"id", "title", "text"}`` (title optional) or Search-R1's
    ``{"id", "contents"}``; ``default_id`` is its id when the row has none, ``where`` names the row in errors.

    Raises:
        DataError: a row that is not an object with a string "text" or "contents".
    """
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        return Passage(id=str(row.get("id", default_id)), title=str(row.get("title") or ""), text=row["text"])
    if isinstance(row, dict) and isinstance(row.get("contents"), str):
        title, text = split_contents(row["contents"])
        return Passage(id=str(row.get("id", default_id)), title=title, text=text)
    raise DataError(
        f"{where}: a passage needs a string 'text' (with an optional 'title') or 'contents' field"
    )


def load_corpus(path: str | Path) -> tuple[Passage, ...]:
    """A JSONL passage corpus: one ``{"id", "title", "text"}`` or Search-R1 ``{"id", "contents"}`` object per
    line (id optional: the line number).

    Raises:
        DataError: a missing file, a line that is not a JSON passage (the message names the line), no passage.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"corpus {path}: cannot read it ({exc.strerror or exc})") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
        out.append(passage_from_row(row, f"{path}:{n}", str(n)))
    if not out:
        raise DataError(f"{path}: corpus is empty")
    return tuple(out)


def format_hits(hits: Sequence[Passage]) -> str:
    """The search tool's observation: ``[i] title: text`` per passage (``[i] text`` without a title), one per
    line, best first; "No results." when there are none."""
    if not hits:
        return "No results."
    return "\n".join(
        f"[{i}] {p.title}: {p.text}" if p.title else f"[{i}] {p.text}" for i, p in enumerate(hits, 1)
    )


class BM25Retriever:
    """bm25s over a passage tuple (English stopwords; each passage indexed as ``"title text"``). Empty or
    stopword-only queries and k > corpus size are handled; passages with score 0 are never returned."""

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

    def search_scored(self, query: str, k: int = 3) -> list[tuple[Passage, float]]:
        """Up to k (passage, BM25 score) pairs, best first, scores > 0."""
        if not query.strip() or k < 1:
            return []
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        k = min(k, len(self.passages))
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        return [(self.passages[int(i)], float(s)) for i, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """Up to k passages, best first (see `search_scored`)."""
        return [p for p, _ in self.search_scored(query, k)]


def corpus_retriever(path: str | Path) -> BM25Retriever:
    """The bm25s index of the corpus file at ``path``, built once per process for each version of the file
    (keyed by its resolved path, size and modification time): environments are made per episode, a corpus
    is indexed once.

    Raises:
        DataError: see `load_corpus`.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise DataError(f"corpus {path}: cannot read it ({exc.strerror or exc})") from None
    return _cached_retriever(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _cached_retriever(path: str, size: int, mtime_ns: int) -> BM25Retriever:
    del size, mtime_ns  # part of the cache key only
    return BM25Retriever(load_corpus(path))
