"""A Search-R1-compatible retrieval server over a JSONL corpus, with the bm25s index ``multihop_qa`` uses.

    python -m trace_rl.envs.retrieval_server --corpus_path wiki.jsonl --port 8000 --topk 3

``POST /retrieve`` takes ``{"queries": [q, ...], "topk": k, "return_scores": bool}`` (``topk`` optional: the
server's ``--topk``; ``return_scores`` default false) and answers ``{"result": [hits of q, ...]}``: per query a
list of ``{"document": {"id", "contents"}, "score": s}`` with scores, of documents ``{"id", "contents"}`` without;
``contents`` is Search-R1's ``'"Title"\\ntext'``. The protocol of Search-R1's ``retrieval_server.py`` (its e5/FAISS
and BM25 servers), so a client of either works against the other: `trace_rl.envs.retrieval_client`, and
``make_env("multihop_qa", retriever_url=...)``. Hits are `trace_rl.envs.retrieval.BM25Retriever`'s (score > 0 only),
so an environment searching this server sees the observations an in-process index of the same corpus gives.
``GET /health`` answers ``{"status": "ok", "passages": n}``. A bad request gets HTTP 400 ``{"error": message}``.

Standard library only (`http.server`, one thread per request; searches are serialised on one lock). Once it
listens it prints one line, ``listening on http://HOST:PORT/retrieve``, to stdout (``--port 0`` picks a free
port; the line says which).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trace_rl.envs.retrieval import BM25Retriever, corpus_retriever, to_contents

MAX_QUERIES = 1024
"""Queries per request at most (a larger batch is a 400)."""
MAX_BODY_BYTES = 4 << 20
"""Request body size at most (a larger body is a 400)."""
MAX_TOPK = 1000
"""``topk`` at most."""


class RequestError(ValueError):
    """A request the server refuses (HTTP 400); the message says why."""


def answer(retriever: BM25Retriever, request: Any, default_topk: int, lock: threading.Lock) -> dict[str, Any]:
    """The ``/retrieve`` answer to a decoded request body (see the module docstring).

    Raises:
        RequestError: a body that is not ``{"queries": [str, ...]}`` with an optional integer ``topk`` in
            [1, MAX_TOPK] and an optional boolean ``return_scores``.
    """
    if not isinstance(request, dict):
        raise RequestError("the body must be a JSON object")
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise RequestError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = request.get("topk")
    topk = default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise RequestError(f"'topk' must be an integer in [1, {MAX_TOPK}], got {topk!r}")
    scores = request.get("return_scores", False)
    if not isinstance(scores, bool):
        raise RequestError("'return_scores' must be true or false")
    result = []
    for q in queries:
        with lock:
            hits = retriever.search_scored(q, topk)
        docs = [({"document": _doc(p), "score": s} if scores else _doc(p)) for p, s in hits]
        result.append(docs)
    return {"result": result}


def _doc(p: Any) -> dict[str, str]:
    return {"id": p.id, "contents": to_contents(p)}


def make_server(retriever: BM25Retriever, host: str, port: int, default_topk: int) -> ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server answering ``POST /retrieve`` and ``GET /health``."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._send(200, {"status": "ok", "passages": len(retriever.passages)})
            else:
                self._send(404, {"error": f"unknown path {self.path!r}; POST /retrieve or GET /health"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self._send(404, {"error": f"unknown path {self.path!r}; POST /retrieve"})
                return
            try:
                size = int(self.headers.get("Content-Length") or 0)
                if not 0 < size <= MAX_BODY_BYTES:
                    raise RequestError(f"a JSON body of 1 to {MAX_BODY_BYTES} bytes is needed, got {size}")
                try:
                    request = json.loads(self.rfile.read(size))
                except (ValueError, RecursionError):
                    raise RequestError("the body is not valid JSON") from None
                body = answer(retriever, request, default_topk, lock)
            except RequestError as exc:
                self.close_connection = True  # the body may not have been read
                self._send(400, {"error": str(exc)})
                return
            self._send(200, body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would drown the training log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); serves until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m trace_rl.envs.retrieval_server",
        description="Search-R1-compatible retrieval server (POST /retrieve) over a JSONL corpus with bm25s.",
    )
    parser.add_argument(
        "--corpus_path", required=True, help='JSONL: {"id","title","text"} or {"id","contents"} per line'
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--topk", type=int, default=3, help="passages per query when a request gives no topk")
    args = parser.parse_args(argv)
    if not 1 <= args.topk <= MAX_TOPK:
        parser.error(f"--topk must be in [1, {MAX_TOPK}]")
    try:
        retriever = corpus_retriever(args.corpus_path)
        server = make_server(retriever, args.host, args.port, args.topk)
    except (ValueError, OSError) as exc:
        print(f"retrieval_server: {exc}", file=sys.stderr)
        return 2
    host, port = str(server.server_address[0]), int(server.server_address[1])
    print(f"listening on http://{host}:{port}/retrieve ({len(retriever.passages)} passages)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
