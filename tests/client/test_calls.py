"""The description of the calls: what each sends, how each answer is read."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, strategies as st

from pushengine.client import errors
from pushengine.client.calls import Calls, Response, retry_after
from pushengine.client.retry import RetryPolicy
from pushengine.client.errors import (
    BadInput, NotFound, PushengineError, RateLimited, Rejected, ServerError, Unauthorized,
    Unavailable)
from pushengine.client.upload import Upload

BASE = "http://node.example:8080/push"
calls = Calls(BASE + "/", publish_key="pk-1", api_key="site-1", admin_key="admin-key-0123456")


def ok(result):
    return Response(200, {}, json.dumps({"jsonrpc": "2.0", "result": result, "id": 1}).encode())


def answer(status, body, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(status, {k.replace("_", "-"): v for k, v in headers.items()}, data)


RPC = [
    (calls.rpc("session.create"), "session.create", None),
    (calls.bf_reserve("k", 0.01, 1000), "bf.reserve", {"key": "k", "error_rate": 0.01,
                                                       "capacity": 1000}),
    (calls.bf_reserve("k", 0.01, 10, expansion=4, nonscaling=True), "bf.reserve",
     {"key": "k", "error_rate": 0.01, "capacity": 10, "expansion": 4, "nonscaling": True}),
    (calls.bf_add("k", "ann"), "bf.add", {"key": "k", "item": "ann"}),
    (calls.bf_madd("k", iter(["a", 2])), "bf.madd", {"key": "k", "items": ["a", 2]}),
    (calls.bf_exists("k", 7), "bf.exists", {"key": "k", "item": 7}),
    (calls.bf_mexists("k", ("a",)), "bf.mexists", {"key": "k", "items": ["a"]}),
    (calls.bf_insert("k", ["a"], capacity=2, nocreate=True), "bf.insert",
     {"key": "k", "items": ["a"], "capacity": 2, "nocreate": True}),
    (calls.bf_info("k"), "bf.info", {"key": "k"}),
    (calls.online(), "stats.online", []),
    (calls.online("V(limit=1)"), "stats.online", ["V(limit=1)"]),
    (calls.online("V(limit=1)", "sid"), "stats.online", ["V(limit=1)", "sid"]),
    (calls.unique("V(limit=1)"), "stats.unique", ["V(limit=1)"]),
    (calls.admin_stats(), "admin.stats", ["admin-key-0123456"]),
    (calls.admin_publish({"type": "T", "action": "delete", "obj": {"id": 1}}), "admin.publish",
     ["admin-key-0123456", [{"type": "T", "action": "delete", "obj": {"id": 1}}]]),
    (calls.admin_session("sid"), "admin.session", ["admin-key-0123456", "sid"]),
    (calls.admin_subscribe("sid"), "admin.subscribe", ["sid", "admin-key-0123456"]),
    (calls.admin_unsubscribe("sid"), "admin.unsubscribe", ["sid", "admin-key-0123456"]),
]


@pytest.mark.parametrize("call, method, params", RPC, ids=[r[1] for r in RPC])
def test_each_json_rpc_call_is_one_post_with_the_keys(call, method, params):
    request = call.request
    assert (request.method, request.url) == ("POST", BASE + "/api/jsonrpc")
    assert request.headers["Authorization"] == "Bearer pk-1"
    assert request.headers["X-Api-Key"] == "site-1"
    assert request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    expected = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        expected["params"] = params
    assert body == expected
    assert call.name == method


def test_publish_and_its_helpers_send_a_json_array_to_api_publish():
    stream = {"id": 1, "title": "Кошки"}
    cases = [
        (calls.publish({"type": "Stream", "action": "upsert", "obj": stream}),
         [{"type": "Stream", "action": "upsert", "obj": stream}]),
        (calls.publish(c for c in [{"type": "A", "action": "delete", "obj": {"id": 2}}]),
         [{"type": "A", "action": "delete", "obj": {"id": 2}}]),
        (calls.upsert("Stream", stream), [{"type": "Stream", "action": "upsert", "obj": stream}]),
        (calls.upsert_many("Stream", [stream, {"id": 2}]),
         [{"type": "Stream", "action": "upsert", "obj": stream},
          {"type": "Stream", "action": "upsert", "obj": {"id": 2}}]),
        (calls.delete("Stream", 1), [{"type": "Stream", "action": "delete", "obj": {"id": 1}}]),
        # interest routing: the old routing values of a move, the routing fields of a delete
        (calls.upsert("Stream", stream, was={"user_id": 7}),
         [{"type": "Stream", "action": "upsert", "obj": stream, "was": {"user_id": 7}}]),
        (calls.delete("Stream", 1, route={"user_id": 7}),
         [{"type": "Stream", "action": "delete", "obj": {"id": 1, "user_id": 7}}]),
        (calls.delete_many("Msg", ["a", "b"], id_field="key"),
         [{"type": "Msg", "action": "delete", "obj": {"key": "a"}},
          {"type": "Msg", "action": "delete", "obj": {"key": "b"}}]),
    ]
    for call, changes in cases:
        assert (call.request.method, call.request.url) == ("POST", BASE + "/api/publish")
        assert call.request.headers["Authorization"] == "Bearer pk-1"
        assert json.loads(call.request.body) == changes
        assert "Кошки".encode() in calls.upsert("Stream", stream).request.body   # UTF-8, not \\u


def test_segment_calls():
    upload = calls.upload_segment("vip list", b"phone\n1\n", hashed="md5")
    assert upload.request.url == BASE + "/api/segments/vip%20list?hashed=md5"
    assert upload.request.headers["Content-Type"] == "text/csv"
    assert isinstance(upload.request.body, Upload) and upload.request.body.size == 8
    assert upload.request.timeout == 3600.0
    listing = calls.segments().request
    assert (listing.method, listing.url, listing.body) == ("GET", BASE + "/api/segments", None)
    assert "Content-Type" not in listing.headers
    gone = calls.delete_segment("a/b").request
    assert (gone.method, gone.url) == ("DELETE", BASE + "/api/segments/a%2Fb")
    with pytest.raises(BadInput):
        calls.upload_segment("vip", b"", hashed="sha1")


def test_what_json_cannot_carry_is_refused_before_anything_is_sent():
    for bad in [{"id": math.nan}, {"id": math.inf}, {"title": "\ud800"}, {"id": object()}]:
        with pytest.raises(BadInput):
            calls.upsert("Stream", bad)
    for not_changes in ["a string", b"bytes", 42]:
        with pytest.raises(BadInput):
            calls.publish(not_changes)


def test_admin_calls_need_an_admin_key_and_keys_must_be_header_safe():
    bare = Calls("http://127.0.0.1:8080")
    with pytest.raises(Unauthorized):
        bare.admin_stats()
    assert "Authorization" not in bare.rpc("x").request.headers
    for bad in ["two words", "line\r\nX-Evil: 1", ""]:
        with pytest.raises(ValueError):
            Calls("http://127.0.0.1:8080", publish_key=bad)
    for url in ["ftp://h", "http://", "http://h/?a=1", "h:8080"]:
        with pytest.raises(ValueError):
            Calls(url)


# -- reading answers ------------------------------------------------------------------

def test_results_are_read_into_python_values():
    assert calls.bf_add("k", "a").read(ok(1)) is True
    assert calls.bf_exists("k", "a").read(ok(0)) is False
    full = calls.bf_madd("k", ["a", "b"]).read(ok([1, {"error": {
        "code": 1010, "message": "non scaling filter is full"}}]))
    assert full[0] is True and isinstance(full[1], Rejected) and full[1].code == 1010
    assert calls.bf_mexists("k", ["a", "b"]).read(ok([1, 0])) == [True, False]
    assert calls.online().read(ok(3)) == 3
    assert calls.admin_subscribe("s").read(ok(["$admin.NodeStats", [{"id": "n"}]])) == \
        ("$admin.NodeStats", [{"id": "n"}])
    assert calls.admin_session("s").read(ok(None)) is None
    assert calls.publish([]).read(answer(200, {"accepted": 2})) == 2
    assert calls.segments().read(answer(200, {"segments": [{"name": "a"}]})) == [{"name": "a"}]
    assert calls.delete_segment("a").read(answer(200, {"deleted": True, "name": "a"})) is True
    assert calls.delete_segment("a").read(answer(404, {"error": {
        "code": "not_found", "message": "no segment a"}})) is False
    with pytest.raises(NotFound):       # a node without the route
        calls.delete_segment("a").read(answer(404, {"error": "not found"}))
    assert calls.health().read(answer(503, {"status": "unavailable"})) == {"status": "unavailable"}
    with pytest.raises(ServerError):
        calls.online().read(ok("three"))


def test_a_refused_publish_carries_its_per_change_details():
    with pytest.raises(BadInput) as caught:
        calls.publish([]).read(answer(400, {"error": "malformed change", "details": [
            "change 1: 'action' must be one of upsert, insert, update, delete",
            "change 3: 'obj' must be a JSON object"]}))
    e = caught.value
    assert (e.status, e.message) == (400, "malformed change")
    assert e.changes == {1: "'action' must be one of upsert, insert, update, delete",
                         3: "'obj' must be a JSON object"}
    assert "change 3" in str(e)


def test_a_refused_segment_file_carries_its_code_line_and_counts():
    with pytest.raises(BadInput) as caught:
        calls.segments().read(answer(400, {"error": {
            "code": "too_few_unique", "message": "too few", "line": 12, "valid": 3,
            "invalid": 1, "duplicates": 0}}))
    e = caught.value
    assert (e.code, e.line, e.data["valid"]) == ("too_few_unique", 12, 3)


@pytest.mark.parametrize("status, body, kind, retryable", [
    (200, {"jsonrpc": "2.0", "error": {"code": -32602, "message": "bad"}, "id": 1}, BadInput, False),
    (200, {"jsonrpc": "2.0", "error": {"code": -32601, "message": "no"}, "id": 1}, NotFound, False),
    (200, {"jsonrpc": "2.0", "error": {"code": 1010, "message": "item exists"}, "id": 1},
     Rejected, False),
    (200, {"jsonrpc": "2.0", "error": {"code": 1011, "message": "redis"}, "id": 1},
     Unavailable, True),
    (200, {"jsonrpc": "2.0", "error": {"code": 1003, "message": "no"}, "id": 1},
     Unauthorized, False),
    (200, {"jsonrpc": "2.0", "error": {"code": -32603, "message": "internal"}, "id": 1},
     ServerError, False),
    (429, {"jsonrpc": "2.0", "error": {"code": 1007, "message": "rate limited"}, "id": 1},
     RateLimited, True),
    (403, {"jsonrpc": "2.0", "error": {"code": 1003, "message": "key"}, "id": None},
     Unauthorized, False),
    (413, {"jsonrpc": "2.0", "error": {"code": -32600, "message": "large"}, "id": None},
     BadInput, False),
    (502, b"<html>bad gateway</html>", ServerError, False),
    (503, b"<html>down</html>", Unavailable, True),
])
def test_errors_by_kind(status, body, kind, retryable):
    with pytest.raises(kind) as caught:
        calls.bf_add("k", "a").read(answer(status, body))
    assert caught.value.retryable is retryable
    assert caught.value.status == status


def test_retry_after_is_seconds_or_a_date_counted_from_the_answers_date():
    assert retry_after(answer(429, {}, retry_after="3")) == 3.0
    assert retry_after(answer(429, {}, retry_after="Tue, 01 Dec 2026 10:00:05 GMT",
                              date="Tue, 01 Dec 2026 10:00:00 GMT")) == 5.0
    assert retry_after(answer(429, {}, retry_after="Tue, 01 Dec 2026 10:00:05 GMT")) is None
    for junk in ["-1", "1.5e9", "soon", "9" * 20]:
        assert retry_after(answer(429, {}, retry_after=junk)) is None
    with pytest.raises(RateLimited) as caught:
        calls.segments().read(answer(429, {"error": {"code": "busy", "message": "busy"}},
                                     retry_after="7"))
    assert caught.value.retry_after == 7.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["error", "code", "message", "result", "details", "segments",
                         "accepted", "deleted", "x"]), inner, max_size=4), max_leaves=12)
readers = [calls.bf_add("k", "a"), calls.bf_madd("k", ["a"]), calls.bf_info("k"),
           calls.publish([]), calls.segments(), calls.delete_segment("a"), calls.health(),
           calls.admin_subscribe("s"), calls.rpc("x")]


@given(st.sampled_from(readers), st.integers(100, 599),
       json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=20))
def test_any_answer_is_a_result_or_an_error_retried_only_for_429_and_503(call, status, body):
    """Whatever a node (or a proxy before it) answers, a reader gives a
    result or raises a PushengineError; the policy retries only 429, 503 and
    their JSON-RPC twins (1007, 1011) in an answer that is not another 4xx."""
    try:
        call.read(Response(status, {}, body))
    except PushengineError as e:
        wait = RetryPolicy(jitter=0).delay(1, e, 0.0, 0.0)
        if wait is not None:
            assert status in (429, 503) or (e.code in (1007, 1011) and not 400 <= status < 500)
        if 400 <= status < 500 and status != 429:
            assert wait is None


def test_kinds_cover_every_documented_rpc_code():
    for code in (-32700, -32600, -32601, -32602, -32603, 1001, 1002, 1003, 1004, 1005, 1007,
                 1010, 1011):
        assert errors.kind_of_code(code, 200) is not PushengineError
