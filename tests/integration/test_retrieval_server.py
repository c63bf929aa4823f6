"""The Search-R1-compatible retrieval server as a real subprocess behind multihop_qa's search tool.

Episodes through the server see exactly the observations of the in-process bm25s index of the same corpus; a
server killed mid-episode turns the next search into a counted, retried error observation, and the episode goes
on. The server runs on a free port (``--port 0``, read from its first line) and is killed by its PID.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trace_rl.envs import gold_trajectory, load_tasks, make_env
from trace_rl.envs.multihop_qa import default_corpus
from trace_rl.envs.retrieval import to_contents
from trace_rl.envs.retrieval_client import SearchR1Client

SRC = Path(__file__).resolve().parents[2] / "src"
READY_S = 120.0  # importing bm25s and indexing 2,298 passages on a loaded 2-core machine


class Server:
    def __init__(self, corpus: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trace_rl.envs.retrieval_server",
                "--corpus_path",
                str(corpus),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until it listens, or EOF if it died
        if not line.startswith("listening on "):
            self.kill()
            raise AssertionError(
                f"server did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = line.split()[2]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by PID: this test's own child
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The constructed corpus in both row formats: (ours, Search-R1's ``contents``)."""
    folder = tmp_path_factory.mktemp("corpus")
    ours, search_r1 = folder / "ours.jsonl", folder / "search_r1.jsonl"
    passages = default_corpus()
    ours.write_text(
        "".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n" for p in passages)
    )
    search_r1.write_text(
        "".join(json.dumps({"id": p.id, "contents": to_contents(p)}) + "\n" for p in passages)
    )
    return ours, search_r1


def _serve(corpus: Path) -> Iterator[Server]:
    started = time.monotonic()
    s = Server(corpus)
    assert time.monotonic() - started < READY_S
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture(scope="module")
def server(corpus: tuple[Path, Path]) -> Iterator[Server]:
    """One server for the module's read-only tests; it reads Search-R1's format, the in-process env ours."""
    yield from _serve(corpus[1])


@pytest.fixture()
def own_server(corpus: tuple[Path, Path]) -> Iterator[Server]:
    """A server for one test (which kills it)."""
    yield from _serve(corpus[1])


def test_episodes_through_the_server_equal_the_in_process_index(
    server: Server, corpus: tuple[Path, Path]
) -> None:
    local = make_env("multihop_qa", corpus_path=str(corpus[0]))
    remote = make_env("multihop_qa", retriever_url=server.url)
    tasks = load_tasks("multihop_qa", "test")[:8]
    searches = no_results = 0
    for task in tasks:
        turns = [
            *gold_trajectory(task)[:-1],
            '<tool_call>{"name": "search", "arguments": {"query": "the"}}</tool_call>',
        ]
        turns.append(f"<answer>{task.answer}</answer>")
        local.reset(task)
        remote.reset(task)
        for text in turns:
            a, b = local.step(text), remote.step(text)
            assert b.observation == a.observation
            assert (b.reward, b.done) == (a.reward, a.done)
            if b.info.get("role") == "tool":
                assert b.info["tool_errors"] == 0 and b.info["tool_retries"] == 0
                searches += len(b.info["tool_results"])
                no_results += b.observation == "No results."
        assert remote.state.done
    assert searches > 2 * len(tasks) and no_results == len(tasks)  # the stopword-only query finds nothing


def test_replay_from_a_snapshot_sees_the_same_search(server: Server) -> None:
    env = make_env("multihop_qa", retriever_url=server.url)
    task = load_tasks("multihop_qa", "test")[0]
    first, *rest = gold_trajectory(task)
    env.reset(task)
    env.step(first)
    saved = env.snapshot()
    later = [env.step(t).observation for t in rest[:-1]]
    fresh = make_env("multihop_qa", retriever_url=server.url)
    fresh.restore(saved)
    assert [fresh.step(t).observation for t in rest[:-1]] == later


def test_server_killed_mid_episode(own_server: Server) -> None:
    server = own_server
    env = make_env("multihop_qa", retriever_url=server.url, retriever_retries=2)
    client = env.client
    assert isinstance(client, SearchR1Client)
    before = (client.stats.retried_requests, client.stats.failed_requests)
    task = load_tasks("multihop_qa", "test")[0]
    first, second, *_ = gold_trajectory(task)
    env.reset(task)
    ok = env.step(first)
    assert ok.observation.startswith("[1] ") and ok.info["tool_errors"] == 0
    server.kill()
    failed = env.step(second)
    assert failed.observation.startswith("Error: search failed after 3 attempts: server unreachable")
    assert failed.info["tool_errors"] == 1 and failed.info["tool_retries"] == 2 and not failed.done
    assert (client.stats.retried_requests, client.stats.failed_requests) == (before[0] + 2, before[1] + 1)
    done = env.step(f"<answer>{task.answer}</answer>")
    assert done.done and done.reward == 1.0


def test_server_refuses_a_corpus_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    run = subprocess.run(
        [sys.executable, "-m", "trace_rl.envs.retrieval_server", "--corpus_path", str(bad), "--port", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert run.returncode == 2 and "bad.jsonl:1:" in run.stderr and run.stdout == ""
