"""A minimal asyncio HTTP/1.1 JSON client (standard library only) for the server backends.

One TCP connection per request (`Connection: close`): on a local network that costs well under a millisecond,
against generation requests of tens of milliseconds or more, and it leaves no pooled connection to a dead
replica behind. Responses are read with Content-Length or chunked transfer encoding.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


class ServerError(RuntimeError):
    """An HTTP error status from a server (4xx: the request is wrong; 5xx: the server failed).

    Attributes:
        status: the HTTP status code; body: the response body (text, at most 2,000 characters).
    """

    def __init__(self, url: str, status: int, body: str):
        super().__init__(f"{url}: HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body[:2000]


async def request_json(
    method: str,
    url: str,
    payload: Any = None,
    *,
    timeout_s: float = 600.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """Send `payload` (JSON-encoded, or no body when None) and return the decoded JSON response (None if empty).

    Raises:
        ServerError: a status >= 400. OSError / ConnectionError: the server is unreachable or closed the
        connection. TimeoutError: no complete response within timeout_s seconds. ValueError: a body that is
        not JSON.
    """
    return await asyncio.wait_for(_request(method, url, payload, headers or {}), timeout_s)


async def _request(method: str, url: str, payload: Any, headers: dict[str, str]) -> Any:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    body = b"" if payload is None else json.dumps(payload).encode()
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: close",
        "Accept: application/json",
    ]
    if payload is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    elif method != "GET":
        head.append("Content-Length: 0")
    head += [f"{k}: {v}" for k, v in headers.items()]
    reader, writer = await asyncio.open_connection(host, port, ssl=parts.scheme == "https" or None)
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError(f"{url}: connection closed before a response")
        status = int(status_line.split()[1])
        fields: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                if size == 0:
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            data = b"".join(chunks)
        elif "content-length" in fields:
            data = await reader.readexactly(int(fields["content-length"]))
        else:
            data = await reader.read()
    finally:
        writer.close()
    text = data.decode("utf-8", errors="replace")
    if status >= 400:
        raise ServerError(url, status, text)
    return json.loads(text) if text.strip() else None
