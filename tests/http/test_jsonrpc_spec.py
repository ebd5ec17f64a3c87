"""Every example of section 7 of the JSON-RPC 2.0 specification, literally
(https://www.jsonrpc.org/specification#examples), against the engine's
dispatcher with the specification's own methods, and through the real HTTP
transport of a node.

The specification's error messages are examples ("Method not found"): an
answer matches when everything but the text of ``message`` is equal and the
message is a non-empty string.
"""
from __future__ import annotations

import json

import pytest

from pushengine.api.rpc import Dispatcher, Method
from tests.http.harness import ClockNode, Http

# (what the client sends, what the server answers; None: nothing at all),
# copied from the specification's section 7 as it is written there
EXAMPLES = [
    ("rpc call with positional parameters",
     '{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}',
     '{"jsonrpc": "2.0", "result": 19, "id": 1}'),
    ("rpc call with positional parameters, reversed",
     '{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}',
     '{"jsonrpc": "2.0", "result": -19, "id": 2}'),
    ("rpc call with named parameters",
     '{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}',
     '{"jsonrpc": "2.0", "result": 19, "id": 3}'),
    ("rpc call with named parameters, reordered",
     '{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}',
     '{"jsonrpc": "2.0", "result": 19, "id": 4}'),
    ("a Notification",
     '{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}',
     None),
    ("a Notification without params",
     '{"jsonrpc": "2.0", "method": "foobar"}',
     None),
    ("rpc call of non-existent method",
     '{"jsonrpc": "2.0", "method": "foobar", "id": "1"}',
     '{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}'),
    ("rpc call with invalid JSON",
     '{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
     '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}'),
    ("rpc call with invalid Request object",
     '{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
     '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}'),
    ("rpc call Batch, invalid JSON",
     """[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]""",
     '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}'),
    ("rpc call with an empty Array",
     '[]',
     '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}'),
    ("rpc call with an invalid Batch (but not empty)",
     '[1]',
     """[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]"""),
    ("rpc call with invalid Batch",
     '[1,2,3]',
     """[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]"""),
    ("rpc call Batch",
     """[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]""",
     """[
        {"jsonrpc": "2.0", "result": 7, "id": "1"},
        {"jsonrpc": "2.0", "result": 19, "id": "2"},
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
    ]"""),
    ("rpc call Batch (all notifications)",
     """[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]""",
     None),
]


def spec_methods(calls: list) -> dict[str, Method]:
    """The methods the specification's examples call."""
    def record(name):
        def method(*args):
            calls.append((name, args))
            return None
        return method

    def subtract(minuend, subtrahend):
        return minuend - subtrahend

    return {
        "subtract": Method(subtract),
        "sum": Method(lambda *xs: sum(xs), ["a", "b", "c"], 0),
        "update": Method(record("update"), ["a", "b", "c", "d", "e"], 0),
        "notify_hello": Method(record("notify_hello"), ["n"], 1),
        "notify_sum": Method(record("notify_sum"), ["a", "b", "c"], 0),
        "get_data": Method(lambda: ["hello", 5]),
    }


def without_messages(value):
    """The answer with each error message checked and replaced by a marker."""
    if isinstance(value, list):
        return [without_messages(v) for v in value]
    if isinstance(value, dict):
        out = dict(value)
        if isinstance(out.get("error"), dict):
            error = dict(out["error"])
            assert isinstance(error.get("message"), str) and error["message"], value
            error["message"] = "..."
            out["error"] = error
        return out
    return value


def check(answer: bytes | None, expected: str | None) -> None:
    if expected is None:
        assert answer is None, answer
        return
    assert answer is not None
    got = json.loads(answer)
    want = json.loads(expected)
    assert without_messages(got) == without_messages(want)
    # every member the specification shows, and no other (no legacy fault fields)
    for one in (got if isinstance(got, list) else [got]):
        assert one["jsonrpc"] == "2.0" and "id" in one
        assert ("result" in one) != ("error" in one)
        assert set(one) <= {"jsonrpc", "result", "error", "id"}


@pytest.mark.parametrize("name, request_text, expected", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_section_7_example(name: str, request_text: str, expected: str | None) -> None:
    calls: list = []
    dispatcher = Dispatcher(spec_methods(calls))
    check(dispatcher.handle(request_text.encode("utf-8")).body, expected)


def test_the_notifications_of_the_examples_ran() -> None:
    calls: list = []
    dispatcher = Dispatcher(spec_methods(calls))
    for _, request_text, _ in EXAMPLES:
        dispatcher.handle(request_text.encode("utf-8"))
    assert ("update", (1, 2, 3, 4, 5)) in calls
    assert calls.count(("notify_hello", (7,))) == 2
    assert ("notify_sum", (1, 2, 4)) in calls


# -- the same rules through a node's HTTP transport, with the engine's methods -------

@pytest.fixture
def http() -> Http:
    return Http(ClockNode().web.resource())


def post(http: Http, text: str):
    reply = http.post("/api/jsonrpc", text)
    assert reply.content_type.startswith("application/json"), reply
    return reply


def test_the_example_batch_shape_through_http(http: Http) -> None:
    """The specification's mixed batch with the engine's own methods: each
    element answered on its own, ``{"foo": "boo"}`` in the 2.0 form."""
    reply = post(http, json.dumps([
        {"jsonrpc": "2.0", "method": "stats.online", "id": "1"},
        {"jsonrpc": "2.0", "method": "session.create"},
        {"jsonrpc": "2.0", "method": "stats.online", "params": [], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "session.create", "id": "9"},
    ]))
    assert reply.code == 200
    answers = reply.json()
    assert [a["id"] for a in answers] == ["1", "2", None, "5", "9"]
    assert answers[0]["result"] == 0 and answers[1]["result"] == 1  # in order: one created between
    assert without_messages(answers[2]) == {"jsonrpc": "2.0", "error": {
        "code": -32600, "message": "..."}, "id": None}
    assert answers[3]["error"]["code"] == -32601
    assert isinstance(answers[4]["result"], str)


@pytest.mark.parametrize("text, expected", [(r, e) for _, r, e in EXAMPLES
                                            if e is not None and "-326" in e and "result" not in e])
def test_the_error_examples_through_http(http: Http, text: str, expected: str) -> None:
    check(post(http, text).body, expected)


def test_all_notifications_answer_nothing_through_http(http: Http) -> None:
    reply = http.post("/api/jsonrpc", '[{"jsonrpc": "2.0", "method": "session.create"}, '
                                      '{"jsonrpc": "2.0", "method": "no.such"}]')
    assert reply.code == 204 and reply.body == b""


@pytest.mark.parametrize("call, id_", [
    ({"jsonrpc": "1.0", "method": "session.create", "id": 1}, 1),
    ({"jsonrpc": "2.0", "method": 5, "id": "x"}, "x"),
    ({"jsonrpc": "2.0", "id": 7}, 7),
    ({"jsonrpc": 2.0, "method": "session.create", "id": 3.5}, 3.5),
    ({"method": 1, "id": 4}, 4),
    ({"params": [], "id": "p"}, "p"),
    ({"jsonrpc": "2.0", "method": "session.create", "id": {"no": 1}}, None),
    ({"jsonrpc": "2.0", "method": "session.create", "id": [1]}, None),
    ({"jsonrpc": "2.0", "method": "session.create", "id": True}, None),
    ({"jsonrpc": "2.0", "method": "session.create", "id": 2 ** 60}, None),
])
def test_a_readable_id_is_echoed_in_every_error(http: Http, call: dict, id_) -> None:
    for body in (call, [call, {"jsonrpc": "2.0", "method": "stats.online", "id": "ok"}]):
        answer = post(http, json.dumps(body)).json()
        first = answer[0] if isinstance(body, list) else answer
        assert first == {"jsonrpc": "2.0", "error": {"code": -32600,
                                                     "message": first["error"]["message"]},
                         "id": id_}
        if isinstance(body, list):
            assert answer[1] == {"jsonrpc": "2.0", "result": 0, "id": "ok"}


def test_the_legacy_form_is_only_for_a_string_method_without_jsonrpc(http: Http) -> None:
    answers = post(http, json.dumps([
        {"method": "stats.online", "params": []},
        {"method": "no.such", "params": []},
        {"foo": "boo"},
        {"jsonrpc": "1.0", "method": "stats.online", "id": 1},
    ])).json()
    assert answers[0] == [0]
    assert answers[1]["faultCode"] == -32601 and set(answers[1]) == {"faultCode", "faultString"}
    assert answers[2]["jsonrpc"] == "2.0" and answers[2]["error"]["code"] == -32600
    assert answers[2]["id"] is None
    assert answers[3]["jsonrpc"] == "2.0" and answers[3]["id"] == 1
