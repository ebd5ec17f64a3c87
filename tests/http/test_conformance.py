"""Every answer of both fronts read by a strict client parser (h11): every
route of the table with every method, and malformed request lines. Each
answer parses, carries ``Date`` (RFC 9110 section 6.6.1) and, when it is an
error, a JSON body (SPEC section 17)."""
from __future__ import annotations

import json

import h11
import pytest

from tests.http.harness import ClockNode, Raw

FRONTS = ["fast", "twisted"]
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"]


def answers(front: str, data: bytes, *argv: str) -> tuple[list[tuple[h11.Response, bytes]], Raw]:
    """The answers to ``data`` as h11 reads them (a request per answer)."""
    node = ClockNode("--http", front, *argv)
    raw = Raw(node.http_factory())
    raw.send(data)
    node.clock.advance(0)
    client = h11.Connection(h11.CLIENT)
    method = data.split(b" ", 1)[0] if b" " in data[:20] else b"GET"
    # h11 must have sent a request before it reads an answer: HEAD has no body
    client.send(h11.Request(method=method if method.isalpha() and method.isupper()
                            and len(method) < 10 else b"GET",
                            target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(raw.transport.value())
    if raw.closing:
        client.receive_data(b"")
    out: list[tuple[h11.Response, bytes]] = []
    head: h11.Response | None = None
    body = b""
    while True:
        event = client.next_event()
        if event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed):
            break
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            head, body = event, b""
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            out.append((head, body))
            break
    return out, raw


def check_answer(head: h11.Response, body: bytes, context: object) -> None:
    headers = {name.lower(): value for name, value in head.headers}
    assert b"date" in headers, (context, head)
    if head.status_code >= 400:
        assert headers.get(b"content-type", b"").startswith(b"application/json"), (context, head)
        if body:
            json.loads(body)
    assert b"<html" not in body.lower() and b"Traceback" not in body, (context, body[:200])


def paths() -> list[str]:
    node = ClockNode()
    out = []
    for route in node.web.table.routes:
        path = route.target.decode()
        out.append(path + ("x" if route.branch and path.endswith("/") else ""))
    return sorted(set(out)) + ["/no/such/path", "/api/jsonrpc/x", "/%ff"]


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("path", paths())
def test_every_route_and_method_answers_parseable_json_errors_with_a_date(
        front: str, path: str) -> None:
    for method in METHODS:
        data = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                f"Content-Type: application/json\r\n\r\n{{}}").encode()
        got, _ = answers(front, data, "--admin-key", "k" * 20)
        assert got, (front, method, path)
        check_answer(*got[0], (front, method, path))


BAD_LINES = [
    b"GET /health\r\n\r\n",                               # HTTP/0.9
    b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.2\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/0.9\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/3\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /health HTTX/1.1\r\nHost: x\r\n\r\n",
    b"GET /he alth HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",   # TLS
    b"G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"/health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
    b"GET /health HTTP/1.1\r\n Host: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
]


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("data", BAD_LINES)
def test_a_malformed_request_gets_a_json_400_with_a_date_and_a_close(
        front: str, data: bytes) -> None:
    got, raw = answers(front, data)
    assert got, (front, data, raw.transport.value())
    head, body = got[0]
    check_answer(head, body, (front, data))
    assert head.status_code == 400 and raw.closing, (front, data, head)
