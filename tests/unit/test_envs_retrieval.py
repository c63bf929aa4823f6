"""multihop_qa's retrieval backends: corpus formats, the Search-R1 protocol (client and server), failures.

Stub servers here run in a thread of the test process (one answer per request, chosen by the test); the real
server as a subprocess is tests/integration/test_retrieval_server.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from trace_rl.envs import load_tasks, make_env
from trace_rl.envs.multihop_qa import MultihopQAEnv
from trace_rl.envs.retrieval import (
    BM25Retriever,
    Passage,
    format_hits,
    load_corpus,
    split_contents,
    to_contents,
)
from trace_rl.envs.retrieval_client import RetrievalError, SearchR1Client, check_url, parse_response
from trace_rl.envs.retrieval_server import RequestError, answer
from trace_rl.errors import DataError

PASSAGES = (
    Passage("a", "Paris", "Paris is the capital of France."),
    Passage("b", "Rome", "Rome is the capital of Italy."),
    Passage("c", "", "Berlin is the capital of Germany.\nIt is on the Spree."),
)
SEARCH = '<tool_call>{"name": "search", "arguments": {"query": "capital of France"}}</tool_call>'


def _doc(p: Passage) -> dict[str, str]:
    return {"id": p.id, "contents": to_contents(p)}


@contextmanager
def stub_server(reply: Callable[[dict[str, Any]], tuple[int, bytes]]) -> Iterator[tuple[str, list[Any]]]:
    """(url, requests seen) of a server answering each POST with ``reply(decoded body)`` = (status, body)."""
    seen: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            status, data = reply(body)
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/retrieve", seen
    finally:
        server.shutdown()
        server.server_close()


def _task() -> Any:
    return load_tasks("multihop_qa", "all", limit=1)[0]


# ---- corpus formats ------------------------------------------------------------------------------------


def test_contents_round_trip_and_split() -> None:
    for p in PASSAGES:
        assert split_contents(to_contents(p)) == (p.title, p.text)
    assert split_contents('"Paris"\nParis is.') == ("Paris", "Paris is.")
    assert split_contents("Paris\nParis is.") == (
        "Paris",
        "Paris is.",
    )  # unquoted first line: still the title
    assert split_contents("no title here") == ("", "no title here")
    with pytest.raises(ValueError, match="line break"):
        to_contents(Passage("x", "two\nlines", "t"))


def test_load_corpus_reads_both_row_formats(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "b", "contents": '"Rome"\nRome is the capital of Italy.'},
        {"contents": "Berlin is the capital of Germany."},  # no id: the line number
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert load_corpus(path) == (
        Passage("a", "Paris", "Paris is the capital of France."),
        Passage("b", "Rome", "Rome is the capital of Italy."),
        Passage("3", "", "Berlin is the capital of Germany."),
    )
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "contents": 3}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1:.*'contents'"):
        load_corpus(tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match="cannot read"):
        make_env("multihop_qa", corpus_path=str(tmp_path / "missing.jsonl"))


def test_format_hits() -> None:
    assert format_hits([]) == "No results."
    assert format_hits(PASSAGES[:1]) == "[1] Paris: Paris is the capital of France."
    assert format_hits(PASSAGES[2:]).startswith("[1] Berlin is")


# ---- the protocol: client parsing, server answers -----------------------------------------------------


def test_parse_response_with_and_without_scores() -> None:
    docs = [_doc(p) for p in PASSAGES]
    with_scores = {"result": [[{"document": d, "score": 1.0} for d in docs], []]}
    assert parse_response(with_scores, 2) == [list(PASSAGES), []]
    assert parse_response({"result": [docs]}, 1) == [list(PASSAGES)]
    titled = {"result": [[{"id": "t", "title": "T", "text": "body"}]]}  # title/text documents are accepted
    assert parse_response(titled, 1) == [[Passage("t", "T", "body")]]


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"results": [[]]},
        {"result": [[], []]},
        {"result": {"a": 1}},
        {"result": ["not a list"]},
        {"result": [[{"document": {"id": "x"}}]]},
        {"result": [[{"document": {"contents": 7}, "score": 1}]]},
        {"result": [["just a string"]]},
    ],
)
def test_parse_response_malformed(body: Any) -> None:
    with pytest.raises(RetrievalError, match="malformed response"):
        parse_response(body, 1)


def test_server_answer_matches_the_index_and_refuses_bad_requests() -> None:
    index = BM25Retriever(PASSAGES)
    lock = threading.Lock()
    got = answer(index, {"queries": ["capital of France", ""], "topk": 2, "return_scores": True}, 3, lock)
    first = got["result"][0]
    assert [h["document"]["id"] for h in first] == [p.id for p in index.search("capital of France", 2)]
    assert all(h["score"] > 0 for h in first) and got["result"][1] == []
    plain = answer(index, {"queries": ["capital of Italy"]}, 1, lock)  # default topk, no scores
    assert plain == {"result": [[_doc(PASSAGES[1])]]}
    for bad in (
        [],
        {"queries": "x"},
        {"queries": [1]},
        {"queries": ["x"], "topk": 0},
        {"queries": ["x"], "topk": True},
        {"queries": ["x"], "return_scores": "yes"},
    ):
        with pytest.raises(RequestError):
            answer(index, bad, 3, lock)


# ---- settings that cannot take effect, bad URLs --------------------------------------------------------


def test_config_errors(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "P", "text": "p"}) + "\n")
    with pytest.raises(ValueError, match="corpus_path cannot take effect with retriever_url"):
        make_env("multihop_qa", corpus_path=str(corpus), retriever_url="http://127.0.0.1:8000/retrieve")
    with pytest.raises(ValueError, match="apply to a retrieval server only"):
        make_env("multihop_qa", retriever_retries=5)
    with pytest.raises(ValueError, match="apply to a retrieval server only"):
        make_env("multihop_qa", corpus_path=str(corpus), retriever_timeout_s=1.0)
    for url in ("127.0.0.1:8000/retrieve", "ftp://h/retrieve", "http:///retrieve", "http://h:99999/r"):
        with pytest.raises(ValueError, match="retriever_url"):
            make_env("multihop_qa", retriever_url=url)
    with pytest.raises(ValueError, match="retriever_timeout_s"):
        make_env("multihop_qa", retriever_url="http://127.0.0.1:1/retrieve", retriever_timeout_s=0)
    with pytest.raises(ValueError, match="retriever_retries"):
        make_env("multihop_qa", retriever_url="http://127.0.0.1:1/retrieve", retriever_retries=-1)
    with pytest.raises(ValueError, match="top_k"):
        make_env("multihop_qa", retriever_url="http://127.0.0.1:1/retrieve", top_k=0)
    assert check_url("https://search.example:443/retrieve") == "https://search.example:443/retrieve"


# ---- failures: error observation, counted, retried where it can help ----------------------------------


def test_malformed_response_is_an_error_observation_counted_not_retried() -> None:
    with stub_server(lambda body: (200, b'{"result": "nope"}')) as (url, seen):
        env = make_env("multihop_qa", retriever_url=url, retriever_retries=2)
        assert isinstance(env, MultihopQAEnv) and env.client is not None
        before = env.client.stats.failed_requests
        env.reset(_task())
        res = env.step(SEARCH)
        assert res.observation.startswith("Error: search failed: malformed response") and not res.done
        assert res.info["tool_errors"] == 1 and res.info["tool_retries"] == 0
        assert len(seen) == 1  # asking again would get the same answer
        assert env.client.stats.failed_requests == before + 1
    with stub_server(lambda body: (200, b"<html>not json</html>")) as (url, _):
        env = make_env("multihop_qa", retriever_url=url)
        env.reset(_task())
        assert "malformed response: not JSON" in env.step(SEARCH).observation


def test_server_error_is_retried_with_backoff_then_succeeds() -> None:
    calls = {"n": 0}

    def flaky(body: dict[str, Any]) -> tuple[int, bytes]:
        calls["n"] += 1
        if calls["n"] == 1:
            return 503, b"busy"
        hits = [{"document": _doc(PASSAGES[0]), "score": 2.0}]
        return 200, json.dumps({"result": [hits]}).encode()

    with stub_server(flaky) as (url, seen):
        env = make_env("multihop_qa", retriever_url=url, top_k=1)
        env.reset(_task())
        res = env.step(SEARCH)
        assert res.observation == "[1] Paris: Paris is the capital of France."
        assert res.info["tool_errors"] == 0 and res.info["tool_retries"] == 1
        assert seen[0] == {"queries": ["capital of France"], "topk": 1, "return_scores": True}


def test_client_error_status_is_not_retried() -> None:
    with stub_server(lambda body: (400, b'{"error": "bad topk"}')) as (url, seen):
        client = SearchR1Client(url, retries=3, backoff_s=0.0)
        with pytest.raises(RetrievalError, match="HTTP 400") as err:
            client.search("q", 3)
        assert err.value.retries == 0 and len(seen) == 1
        assert (client.stats.requests, client.stats.failed_requests) == (1, 1)


def test_unreachable_server_retries_then_an_error_observation_and_the_episode_goes_on() -> None:
    with stub_server(lambda body: (200, b"{}")) as (url, _):
        pass  # the port is closed again: nothing listens there now
    client = SearchR1Client(url, retries=2, backoff_s=0.0)
    with pytest.raises(RetrievalError, match="unreachable") as err:
        client.search("q", 3)
    assert err.value.retries == 2 and err.value.transient
    assert (client.stats.requests, client.stats.retried_requests, client.stats.failed_requests) == (1, 2, 1)
    env = make_env("multihop_qa", retriever_url=url, retriever_retries=1)
    task = _task()
    env.reset(task)
    res = env.step(SEARCH + SEARCH)  # two calls in one turn: both fail, both counted
    assert res.info["tool_errors"] == 2 and res.info["tool_retries"] == 2 and not res.done
    assert res.observation.count("Error: search failed after 2 attempts: server unreachable") == 2
    assert env.step(f"<answer>{task.answer}</answer>").reward == 1.0


def test_timeout_is_a_failure_not_a_hang() -> None:
    release = threading.Event()

    def slow(body: dict[str, Any]) -> tuple[int, bytes]:
        release.wait(5)
        return 200, b'{"result": [[]]}'

    with stub_server(slow) as (url, _):
        client = SearchR1Client(url, timeout_s=0.2, retries=0)
        try:
            with pytest.raises(RetrievalError, match="timed out"):
                client.search("q", 3)
        finally:
            release.set()


# ---- the config path: env.env_kwargs reaches make_env, refused when it cannot take effect --------------


def test_env_kwargs_config_key() -> None:
    from trace_rl.train.config import ConfigError, load_config

    url = "http://127.0.0.1:8000/retrieve"
    cfg = load_config(
        preset="multihop_qa", overrides=[f"env.env_kwargs.retriever_url={url}", "env.env_kwargs.top_k=5"]
    )
    assert cfg.env.env_kwargs == {"retriever_url": url, "top_k": 5}
    env = make_env(cfg.env.name, **cfg.env.env_kwargs, max_turns=cfg.env.max_turns)  # as the trainer makes it
    assert (
        isinstance(env, MultihopQAEnv) and env.client is not None and env.client.url == url and env.top_k == 5
    )
    refused = {
        "env.env_kwargs.corpus_path=wiki.jsonl": "corpus_path cannot take effect with retriever_url",
        "env.env_kwargs.topk=5": "does not take",
        "env.env_kwargs.max_turns=3": "max_turns is set by env.max_turns",
        "env.env_kwargs.retriever_url=localhost:8000": "retriever_url must look like",
        "env.env_kwargs.retriever_timeout_s=0": "retriever_timeout_s must be > 0",
    }
    for item, why in refused.items():
        with pytest.raises(ConfigError, match=f"env.env_kwargs: .*{why}"):
            load_config(preset="multihop_qa", overrides=[f"env.env_kwargs.retriever_url={url}", item])
    with pytest.raises(ConfigError, match="apply to a retrieval server only"):
        load_config(preset="multihop_qa", overrides=["env.env_kwargs.retriever_retries=4"])
