"""A client of a Search-R1-style retrieval server: ``multihop_qa``'s ``search`` tool over HTTP.

The protocol (Search-R1's ``search_r1/search/retrieval_server.py``, also the retriever of verl's
``search_r1_like`` example and `trace_rl.envs.retrieval_server`): ``POST <url>`` with the JSON body
``{"queries": [q, ...], "topk": k, "return_scores": true}``; the answer is ``{"result": [hits of q, ...]}``, one
list per query, each hit ``{"document": {"id": ..., "contents": '"Title"\\ntext'}, "score": s}`` (without scores
the list holds the documents themselves). A document with ``title``/``text`` fields instead of ``contents`` is
accepted too.

Failures (standard library only, `urllib`): a connection error, a timeout or an HTTP 5xx answer is retried
``retries`` times with exponential backoff (``backoff_s``, then twice that, ...); an HTTP 4xx answer or a
malformed response is not (asking again gets the same answer). A request that still fails raises
`RetrievalError`; the environment turns it into an error observation and counts it (``info["tool_errors"]``,
retries in ``info["tool_retries"]``), and the client counts every request in `RetrievalStats`.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from trace_rl.envs.retrieval import Passage, passage_from_row

_log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_S = 0.25


class RetrievalError(RuntimeError):
    """A search request that failed after its retries (the server is unreachable, too slow, answered an HTTP
    error or a malformed response). ``retries``: the retries spent on it; ``transient``: whether the last failure
    was of the retried kind (connection, timeout, 5xx)."""

    def __init__(self, message: str, *, retries: int = 0, transient: bool = False) -> None:
        super().__init__(message)
        self.retries = retries
        self.transient = transient


@dataclass
class RetrievalStats:
    """What a client did since it was made (cumulative; shared by the environments that share the client).

    Attributes:
        requests: search requests (one per tool call).
        retried_requests: retries (a request retried twice counts 2).
        failed_requests: requests that raised `RetrievalError`.
    """

    requests: int = 0
    retried_requests: int = 0
    failed_requests: int = 0


def check_url(url: str) -> str:
    """``url`` when it is an ``http(s)://host[:port]/path`` URL.

    Raises:
        ValueError: anything else (the message shows the expected form).
    """
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"retriever_url must look like http://127.0.0.1:8000/retrieve, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise ValueError(f"retriever_url has a bad port: {url!r}") from None
    return url


def parse_response(body: Any, n_queries: int) -> list[list[Passage]]:
    """The passages of a Search-R1 ``/retrieve`` response, one list per query (hits in the server's order).

    Raises:
        RetrievalError: a body that is not ``{"result": [...]}`` with ``n_queries`` lists of hits, each a
            document with a string ``contents`` (or ``text``), or ``{"document": <that>, "score": s}``.
    """
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        got = f"{len(result)} lists" if isinstance(result, list) else type(body).__name__
        raise RetrievalError(
            f"malformed response: expected {{'result': [{n_queries} list(s) of hits]}}, got {got}"
        )
    out = []
    for q, hits in enumerate(result):
        if not isinstance(hits, list):
            raise RetrievalError(f"malformed response: hits of query {q} are not a list")
        passages = []
        for i, hit in enumerate(hits):
            doc = hit.get("document", hit) if isinstance(hit, dict) else hit
            try:
                passages.append(passage_from_row(doc, f"hit {i} of query {q}", f"{q}:{i}"))
            except ValueError as exc:
                raise RetrievalError(f"malformed response: {exc}") from None
        out.append(passages)
    return out


class SearchR1Client:
    """Blocking client of one Search-R1-style ``/retrieve`` endpoint (thread-safe; see the module docstring).

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8000/retrieve``.
        timeout_s: seconds per HTTP request (> 0).
        retries: extra attempts after a connection error, timeout or HTTP 5xx (>= 0).
        backoff_s: wait before the first retry, doubled for each next one (>= 0).

    Raises:
        ValueError: a bad url or setting.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
    ) -> None:
        self.url = check_url(url)
        if not timeout_s > 0:
            raise ValueError(f"retriever_timeout_s must be > 0, got {timeout_s}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retriever_retries must be an integer >= 0, got {retries!r}")
        if not backoff_s >= 0:
            raise ValueError(f"backoff_s must be >= 0, got {backoff_s}")
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.stats = RetrievalStats()
        self._lock = threading.Lock()

    def search(self, query: str, k: int) -> tuple[list[Passage], int]:
        """(up to k passages for ``query``, best first; retries spent).

        Raises:
            RetrievalError: the request failed after its retries, or the response is malformed.
        """
        with self._lock:
            self.stats.requests += 1
        payload = json.dumps({"queries": [query], "topk": k, "return_scores": True}).encode()
        attempt = 0
        while True:
            try:
                body = self._post(payload)
                return parse_response(body, 1)[0][:k], attempt
            except RetrievalError as exc:
                if not exc.transient or attempt >= self.retries:
                    self._failed(exc, attempt)
                    raise RetrievalError(str(exc), retries=attempt, transient=exc.transient) from None
            time.sleep(self.backoff_s * 2**attempt)
            attempt += 1
            with self._lock:
                self.stats.retried_requests += 1

    def _failed(self, exc: RetrievalError, retries: int) -> None:
        with self._lock:
            self.stats.failed_requests += 1
            failed, requests = self.stats.failed_requests, self.stats.requests
        _log.warning(
            "search request to %s failed after %d retries: %s (%d of %d requests failed so far)",
            self.url,
            retries,
            exc,
            failed,
            requests,
        )

    def _post(self, payload: bytes) -> Any:
        """The decoded JSON answer to one POST; every failure as a `RetrievalError` (``transient`` for the
        retried kinds)."""
        request = urllib.request.Request(
            self.url,
            data=payload,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace") if exc.fp is not None else ""
            raise RetrievalError(f"HTTP {exc.code}: {detail}".strip(), transient=exc.code >= 500) from None
        except (
            urllib.error.URLError,
            OSError,
            http.client.HTTPException,
        ) as exc:  # refused, reset, timed out
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            kind = "timed out" if isinstance(reason, TimeoutError) else "unreachable"
            raise RetrievalError(f"server {kind} ({reason})", transient=True) from None
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise RetrievalError(f"malformed response: not JSON ({data[:80]!r})") from None


@functools.cache
def shared_client(url: str, timeout_s: float, retries: int) -> SearchR1Client:
    """One client per (url, timeout, retries) in a process, so that its `RetrievalStats` add up over the
    environments (made per episode) that use it.

    Raises:
        ValueError: see `SearchR1Client`.
    """
    return SearchR1Client(url, timeout_s=timeout_s, retries=retries)
