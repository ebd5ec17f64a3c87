"""The JSON-RPC transport of POST /api/jsonrpc: framing, batches, the legacy
form, notifications and the protocol error codes (SPEC section 3)."""
from __future__ import annotations

import json

import pytest
from twisted.internet.defer import fail

from tests.http.harness import ClockNode, Http, Rpc

PATH = "/api/jsonrpc"


def post(http: Http, body: bytes | str | object):
    reply = http.post(PATH, body)
    assert reply.content_type.startswith("application/json"), reply
    return reply


def error_of(answer: dict) -> int:
    assert answer.get("jsonrpc") == "2.0", answer
    assert "result" not in answer, answer
    return answer["error"]["code"]


# -- framing -------------------------------------------------------------------

def test_single_call_answer_has_version_result_and_id(http: Http) -> None:
    answer = post(http, {"jsonrpc": "2.0", "method": "session.create", "id": "a-1"}).json()
    assert set(answer) == {"jsonrpc", "result", "id"}
    assert answer["id"] == "a-1"
    assert isinstance(answer["result"], str)


def test_named_params(http: Http, rpc: Rpc, sid: str) -> None:
    answer = post(http, {"jsonrpc": "2.0", "method": "session.get_events",
                         "params": {"sid": sid, "timeout": 0}, "id": 7}).json()
    assert answer == {"jsonrpc": "2.0", "result": [], "id": 7}
    answer = post(http, {"jsonrpc": "2.0", "method": "session.subscribe",
                         "params": {"sid": sid, "view": "PublicLiveStreamView",
                                    "params": {}, "limit": 3}, "id": 8}).json()
    assert answer["result"] == ["PublicLiveStreamView(limit=3)", []]


def test_batch_answers_each_call_in_order(http: Http, node: ClockNode) -> None:
    batch = [{"jsonrpc": "2.0", "method": "session.create", "id": i} for i in range(3)]
    batch.append({"jsonrpc": "2.0", "method": "no.such", "id": 3})
    answers = post(http, batch).json()
    assert [a["id"] for a in answers] == [0, 1, 2, 3]
    assert len({a["result"] for a in answers[:3]}) == 3
    assert error_of(answers[3]) == -32601
    assert len(node.engine.sessions.sessions) == 3


def test_batch_with_notifications_leaves_them_out(http: Http, node: ClockNode) -> None:
    answers = post(http, [{"jsonrpc": "2.0", "method": "session.create"},
                          {"jsonrpc": "2.0", "method": "session.create", "id": 1}]).json()
    assert [a["id"] for a in answers] == [1]
    assert len(node.engine.sessions.sessions) == 2


def test_notification_runs_and_answers_204(http: Http, node: ClockNode) -> None:
    reply = http.post(PATH, {"jsonrpc": "2.0", "method": "session.create"})
    assert reply.code == 204 and reply.body == b""
    assert len(node.engine.sessions.sessions) == 1
    # a failing notification says nothing either
    reply = http.post(PATH, {"jsonrpc": "2.0", "method": "no.such"})
    assert reply.code == 204 and reply.body == b""
    reply = http.post(PATH, [{"jsonrpc": "2.0", "method": "session.create"}] * 2)
    assert reply.code == 204 and reply.body == b""
    assert len(node.engine.sessions.sessions) == 3


# -- the legacy form -------------------------------------------------------------

def test_legacy_result_is_a_one_element_list(http: Http, node: ClockNode) -> None:
    answer = post(http, {"method": "session.create", "params": [], "id": 1}).json()
    assert isinstance(answer, list) and len(answer) == 1
    assert answer[0] in node.engine.sessions.sessions
    # no id at all is still a call, not a notification, in the legacy form
    answer = post(http, {"method": "stats.online"}).json()
    assert answer == [1]


def test_legacy_error_is_a_fault(http: Http) -> None:
    answer = post(http, {"method": "session.get_events", "params": ["nope", 0], "id": 1}).json()
    assert answer == {"faultCode": 1001, "faultString": answer["faultString"]}
    assert answer["faultString"]
    answer = post(http, {"method": "no.such", "params": []}).json()
    assert answer["faultCode"] == -32601


def test_legacy_and_modern_calls_mix_in_a_batch(http: Http) -> None:
    answers = post(http, [{"method": "stats.online"},
                          {"jsonrpc": "2.0", "method": "stats.online", "id": 2},
                          {"method": "no.such"}]).json()
    assert answers[0] == [0]
    assert answers[1] == {"jsonrpc": "2.0", "result": 0, "id": 2}
    assert answers[2]["faultCode"] == -32601


# -- protocol errors ---------------------------------------------------------------

@pytest.mark.parametrize("body", [b"{", b"nonsense", b"", b"\xef\xbb\xbf{}",
                                  b'{"jsonrpc": "2.0", "method": "x", "id": 1',
                                  b"[" * 100000 + b"]" * 100000])
def test_parse_error(http: Http, body: bytes) -> None:
    reply = post(http, body)
    assert reply.code == 200
    answer = reply.json()
    assert error_of(answer) == -32700 and answer["id"] is None


def test_body_not_utf8_is_a_parse_error(http: Http) -> None:
    body = '{"jsonrpc": "2.0", "method": "session.create", "id": "ё"}'.encode("cp1251")
    answer = post(http, body).json()
    assert error_of(answer) == -32700


def test_empty_batch(http: Http) -> None:
    answer = post(http, []).json()
    assert error_of(answer) == -32600 and answer["id"] is None


def test_huge_batch_is_refused_whole(http: Http, node: ClockNode) -> None:
    batch = [{"jsonrpc": "2.0", "method": "session.create", "id": i} for i in range(10000)]
    answer = post(http, batch).json()
    assert isinstance(answer, dict) and error_of(answer) == -32600
    assert node.engine.sessions.sessions == {}


def test_batch_limit_is_configurable() -> None:
    node = ClockNode("--max-batch", "2")
    http = Http(node.web.resource())
    call = {"jsonrpc": "2.0", "method": "session.create", "id": 1}
    assert len(post(http, [call, call]).json()) == 2
    assert error_of(post(http, [call, call, call]).json()) == -32600
    assert len(node.engine.sessions.sessions) == 2


@pytest.mark.parametrize("call", [1, "session.create", None, True, [1]])
def test_call_that_is_not_an_object(http: Http, call: object) -> None:
    answers = post(http, [call, {"jsonrpc": "2.0", "method": "stats.online", "id": 1}]).json()
    assert error_of(answers[0]) == -32600 and answers[0]["id"] is None
    assert answers[1]["result"] == 0
    answer = post(http, json.dumps(call)).json()
    if isinstance(call, list):      # a batch of one bad call
        answer, = answer
    assert error_of(answer) == -32600


@pytest.mark.parametrize("call", [
    {"jsonrpc": "1.0", "method": "stats.online", "id": 1},
    {"jsonrpc": 2.0, "method": "stats.online", "id": 1},
    {"jsonrpc": None, "method": "stats.online", "id": 1},
    {"jsonrpc": "2.0", "id": 1},
    {"jsonrpc": "2.0", "method": 5, "id": 1},
    {"jsonrpc": "2.0", "method": "stats.online", "id": [1]},
    {"jsonrpc": "2.0", "method": "stats.online", "id": {"a": 1}},
    {"jsonrpc": "2.0", "method": "stats.online", "id": True},
    {"jsonrpc": "2.0", "method": "stats.online", "params": 5, "id": 1},
    {"jsonrpc": "2.0", "method": "stats.online", "params": "x", "id": 1},
])
def test_invalid_request(http: Http, call: dict) -> None:
    answer = post(http, call).json()
    assert error_of(answer) == -32600


def test_unknown_method(rpc: Rpc) -> None:
    assert rpc.error("session.nope").code == -32601
    assert rpc.error("x" * 10000).code == -32601
    assert rpc.error("__init__").code == -32601
    assert rpc.error("").code == -32601


@pytest.mark.parametrize("params", [
    [1, 2, 3, 4],                       # too many
    {"key": None, "other": 1},          # unknown name
])
def test_wrong_param_count_or_names(rpc: Rpc, params: object) -> None:
    answer = rpc.http.post(PATH, {"jsonrpc": "2.0", "method": "stats.online",
                                  "params": params, "id": 1}).json()
    assert error_of(answer) == -32602


def test_internal_error_tells_nothing(node: ClockNode, http: Http, rpc: Rpc, sid: str) -> None:
    def broken(view, params, limit):
        return fail(RuntimeError("secret detail of the store"))
    node.engine.registry.store.query = broken
    reply = http.post(PATH, rpc.body("stream.subscribe_public_live", [sid]))
    assert reply.code == 200
    answer = reply.json()
    assert answer["error"] == {"code": -32603, "message": "internal error"}
    assert b"secret detail" not in reply.body
    # the node goes on serving
    assert rpc("stats.online") == 1


def test_errors_are_counted_by_code(node: ClockNode, http: Http, rpc: Rpc) -> None:
    post(http, b"{")
    rpc.error("no.such")
    rpc.error("no.such")
    assert node.rpc_errors == {-32700: 1, -32601: 2}


def test_answers_are_utf8_json_without_escapes(http: Http, rpc: Rpc, sid: str) -> None:
    reply = http.post(PATH, rpc.body("stream.subscribe_word", [sid, "кошка"]))
    assert "кошка".encode() in reply.body
    assert json.loads(reply.body.decode("utf-8"))["result"][0].startswith("WordStreamView(")
