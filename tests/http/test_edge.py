"""The edge: one HTTP policy and one route table for both fronts.

The Origin rule of the streams is the CORS rule of the API; API keys, the
error shapes and wrong methods are the same on both fronts; every route of
the table is reached on both, the calls answered by the same function, the
rest by klein; nothing in the table is a route one front never reaches.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import Request

from pushengine.api.auth import ApiKeys
from pushengine.web.policy import (
    HttpPolicy, closing_answer, error_body, path_error, rpc_error, stream_error)
from pushengine.web.routes import HttpAnswer, Route, RouteTable
from tests.http.harness import ClockNode, Raw, http_request
from tests.http.test_fronts import FRONTS, answers, both, rpc_bytes


def strict(data: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)
    return json.loads(data.decode("utf-8"), parse_constant=refuse)


# -- the Origin rule ------------------------------------------------------------------

def ws_upgrade(origin: str | None, query: str = "") -> bytes:
    headers = [("Origin", origin)] if origin is not None else []
    return WSConnection(ConnectionType.CLIENT).send(
        Request(host="127.0.0.1", target="/api/ws" + query, extra_headers=headers))


def sse_open(sid: str, origin: str | None) -> bytes:
    return http_request("GET", f"/api/events?session={sid}",
                        headers={"Origin": origin} if origin is not None else {})


@pytest.mark.parametrize("cors, origin, allowed", [
    (None, "https://elsewhere.example", True),      # no CORS policy: no Origin rule
    ("https://app.example", "https://app.example", True),
    ("https://app.example", "https://elsewhere.example", False),
    ("https://app.example", None, True),            # not a page
    ("*", "https://elsewhere.example", True),       # every origin, as for CORS
])
@pytest.mark.parametrize("front", FRONTS)
def test_streams_take_the_origins_the_api_lets_read_its_answers(cors, origin, allowed,
                                                                front) -> None:
    argv = ("--http", front) + (("--cors-origin", cors) if cors else ())
    node = ClockNode(*argv)
    raw = Raw(node.http_factory())
    raw.send(rpc_bytes("session.create", extra={"Origin": origin} if origin else {}))
    node.clock.advance(0)
    created = raw.responses()[0]
    sid = created.json()["result"]
    # what CORS lets a page of that origin read of the API
    reads = cors is None or origin is None or created.header(
        "access-control-allow-origin") in ("*", origin)
    assert reads == allowed
    sse = Raw(node.http_factory())
    sse.send(sse_open(sid, origin))
    node.clock.advance(0)
    ws = Raw(node.http_factory())
    ws.send(ws_upgrade(origin))
    node.clock.advance(0)
    for raw_ in (sse, ws):
        head = raw_.transport.value().split(b"\r\n", 1)[0]
        if allowed:
            assert head in (b"HTTP/1.1 200 OK", b"HTTP/1.1 101 Switching Protocols"), head
        else:
            reply = raw_.responses()[0]
            assert reply.code == 403
            assert reply.json() == {"error": {"code": 1003, "message":
                                              "this origin may not open a stream"}}


def test_the_origin_rule_of_the_policy() -> None:
    assert HttpPolicy().origin_allowed(b"https://x.example")
    assert HttpPolicy(cors_origin="*").origin_allowed(b"https://x.example")
    only = HttpPolicy(cors_origin="https://a.example")
    assert only.origin_allowed(b"https://a.example") and only.origin_allowed(None)
    assert not only.origin_allowed(b"https://b.example")
    assert not only.origin_allowed(b"https://a.example.evil")


# -- API keys -------------------------------------------------------------------------

@pytest.mark.parametrize("path, headers, code", [
    ("/api/jsonrpc?apikey=%FF", {}, 403),                       # not UTF-8
    ("/api/jsonrpc?apikey=%D0%BA", {}, 403),                    # not ASCII
    ("/api/jsonrpc", {"X-Api-Key": "k1"}, 200),
    ("/api/jsonrpc?apikey=k1", {"X-Api-Key": "wrong"}, 200),    # the query's key first
    ("/api/jsonrpc?apikey=wrong", {"X-Api-Key": "k1"}, 403),
    ("/api/jsonrpc?apikey=&apikey=k1", {"X-Api-Key": "k1"}, 200),   # an empty one: none
    ("/api/jsonrpc?%61pikey=k1", {}, 200),                      # the name escaped
    ("/api/jsonrpc?x=1&apikey=k1&y", {}, 200),
])
def test_api_keys_are_judged_alike_on_both_fronts(path: str, headers: dict,
                                                  code: int) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stats.online"}).encode()
    got = both(http_request("POST", path, body, headers), "--api-key", "k1")
    assert got[0][0] == code, got
    if code == 403:
        assert got[0][1] == {"jsonrpc": "2.0", "id": None, "error": {
            "code": 1003, "message": "a valid API key is required (apikey or X-Api-Key)"}}


@given(st.binary(max_size=60), st.one_of(st.none(), st.binary(max_size=20)))
def test_a_key_check_never_fails_and_lets_in_only_a_key(query: bytes,
                                                       header: bytes | None) -> None:
    policy = HttpPolicy(ApiKeys(["k1"]))
    allowed = policy.key_allowed(query, header)
    assert allowed in (True, False)
    if allowed:
        assert b"k1" in query or b"%" in query or header == b"k1"
    assert policy.key_allowed(b"apikey=k1&" + query, header)


# -- the error shapes -----------------------------------------------------------------

@given(st.text(), st.one_of(st.integers(-2 ** 31, 2 ** 31), st.text(max_size=10)))
def test_every_error_shape_is_strict_json_of_its_form(message: str, code: Any) -> None:
    message = message.encode("utf-8", "replace").decode("utf-8")   # no lone surrogate
    assert strict(rpc_error(-32600, message)) == {
        "jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    assert strict(stream_error(code, message)) == {"error": {"code": code,
                                                             "message": message}}
    assert strict(path_error(message)) == {"error": message}
    assert strict(error_body(b"/api/jsonrpc", message))["error"]["code"] == -32600
    assert strict(error_body(b"/api/publish", message)) == {"error": message}
    answer = closing_answer(413, path_error(message), [(b"X-A", b"1")])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-length: %d" % len(body) in head.lower()
    assert head.startswith(b"HTTP/1.1 413 ") and head.endswith(b"Connection: close")


@pytest.mark.parametrize("method, path, allow, shape", [
    ("GET", "/api/jsonrpc", "POST, OPTIONS", "rpc"),
    ("PUT", "/api/publish", "POST, OPTIONS", "plain"),
    ("POST", "/api/events", "GET, HEAD, OPTIONS", "stream"),
    ("PUT", "/api/ws", "GET, HEAD", "stream"),
    ("POST", "/health", "GET, HEAD", "plain"),
])
def test_a_wrong_method_is_json_of_its_paths_shape_on_both_fronts(method, path, allow,
                                                                  shape) -> None:
    for front in FRONTS:
        node, raw, got = answers(front, http_request(method, path, b"{}"))
        reply = raw.responses()[0]
        assert reply.code == 405 and reply.header("allow") == allow, (front, reply)
        body = reply.json()
        if shape == "rpc":
            assert body["error"]["code"] == -32600 and body["id"] is None
        elif shape == "stream":
            assert body["error"]["code"] == -32600
            assert body["error"]["message"].startswith("method not allowed: use GET")
        else:
            assert body == {"error": "method not allowed"}


def test_missing_static_files_have_the_plain_shape() -> None:
    got = both(http_request("GET", "/static/js/no-such-file.js"))
    assert got == [(404, {"error": "not found"})]


# -- the route table --------------------------------------------------------------------

class EchoNode(ClockNode):
    """A node with one more call in its table: ``POST /api/echo``."""

    def _routes(self) -> list[Route]:
        def echo(call, caller) -> HttpAnswer:
            return HttpAnswer(201, json.dumps({"body": call.content().decode(),
                                               "query": call.query.decode(),
                                               "from": caller.address}).encode(),
                              ((b"X-Echo", b"1"),))
        return [*super()._routes(), Route.post("/api/echo", echo)]


def test_a_call_of_the_table_is_answered_alike_by_both_fronts() -> None:
    results = {}
    for front in FRONTS:
        node = EchoNode("--http", front)
        raw = Raw(node.http_factory(), host="198.51.100.4")
        raw.send(http_request("POST", "/api/echo?q=1", b"hi")
                 + http_request("GET", "/api/echo"))
        node.clock.advance(0)
        replies = raw.responses()
        results[front] = [(r.code, r.json(), r.header("x-echo"), r.header("allow"))
                          for r in replies]
    assert results["fast"] == results["twisted"], results
    assert results["fast"] == [
        (201, {"body": "hi", "query": "q=1", "from": "198.51.100.4"}, "1", None),
        (405, {"error": "method not allowed"}, None, "POST")]


def test_each_route_is_served_once_calls_by_both_fronts_pages_by_klein() -> None:
    node = ClockNode("--admin-key", "k" * 32)
    table = node.web.table
    calls = {(m, r.path) for r in table.routes if r.call is not None for m in r.methods}
    assert calls == {("POST", "/api/jsonrpc"), ("POST", "/api/publish")}
    fast = node.http_factory()
    assert set(fast.calls) == {(m.encode(), p.encode()) for m, p in calls}
    # klein holds the pages only: no klein rule answers a call
    klein = node.web.resource().klein
    endpoints = {rule.endpoint.split(" ", 1)[1].removesuffix("_branch")
                 for rule in klein._app.url_map.iter_rules()}
    pages = {r.path for r in table.routes if r.page is not None}
    assert endpoints == pages
    assert {"/api/events", "/api/ws", "/api/segments", "/api/segments/", "/admin/",
            "/metrics", "/health"} <= pages
    for path in ("/api/jsonrpc", "/api/publish"):
        methods = {r.methods for r in table.routes if r.path == path and r.page is not None}
        assert methods == {("OPTIONS",)}


def test_the_route_tables_shapes_and_methods() -> None:
    def page(request: Any) -> bytes:
        return b""
    table = RouteTable([Route.post("/api/x", lambda call, caller: HttpAnswer(200)),
                        Route.get("/api/x", page, ("OPTIONS",)),
                        Route.get("/files/", page, branch=True, shape="stream"),
                        Route.get("/plain", page)])
    assert table.methods(b"/api/x") == ["POST", "OPTIONS"]
    assert table.methods(b"/files/a/b") == ["GET", "HEAD"]
    assert table.methods(b"/nope") == []
    assert table.shape(b"/files/a") == "stream" and table.shape(b"/plain") == "plain"
    assert table.shape(b"/nope") == "plain"
    assert list(table.calls()) == [(b"POST", b"/api/x")]
