"""The dispatcher's shortcut for ``session.get_events`` (``Method.shortcut``).

A shortcut is a branch of the dispatcher's one path: it must give exactly
the generic answer and leave exactly its state, or decline: a hypothesis
test sends the same generated calls to two nodes in the same state, one with
the shortcut and one without, and compares the answers (bytes, status,
Retry-After), the sessions and the error counters. The unit tests pin what
the shortcut promises on its own: it is taken, a call is admitted once, a
refusal runs nothing, a parked poll answers later or not at all.
"""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail

from pushengine.api.caller import Caller
from pushengine.core.changes import Change
from pushengine.core.errors import BadParams, RateLimited
from pushengine.core.events import RawJSON
from pushengine.api.rpc import NOTHING, Dispatcher, Method, RpcAnswer
from tests.http.test_fronts import FRONTS, answers, rpc_bytes
from tests.http.harness import ClockNode

CALLER = Caller("127.0.0.1", loopback=True)


def node_with_events(shortcut: bool) -> tuple[ClockNode, str]:
    node = ClockNode("--client-rate", "0")
    if not shortcut:
        for name, method in node.dispatcher.methods.items():
            method.shortcut = None
    sid = node.api.session_create(CALLER)
    node.api.session_subscribe(sid, node.catalog.methods["stream.subscribe_public_live"].name,
                               {}, 50)
    node.engine.apply_changes([Change("Stream", "upsert", i, {
        "id": i, "title": f"s{i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2030-01-01T00:00:0{i}Z"}) for i in range(3)])
    return node, sid


SID = object()            # stands for the node's session id in generated params

ids = st.one_of(st.integers(-2 ** 60, 2 ** 60), st.integers(-3, 3), st.text(max_size=5),
                st.text(alphabet="ab\"\\", max_size=3), st.none(), st.booleans(),
                st.floats(allow_nan=True), st.just("x" * 1025))
timeouts = st.one_of(st.sampled_from([0, 0.0, -1, 1e9, 1e10, math.inf, math.nan, 2 ** 70,
                                      True, None, "0", 5, 0.5]), st.floats(0, 2))
acks = st.one_of(st.integers(-2, 5), st.sampled_from([None, True, False, 1.0, 10 ** 20, "1"]))
sids = st.sampled_from([SID, SID, SID, "nope", 7, None, ["x"]])
params = st.one_of(
    st.tuples(sids, timeouts).map(list),
    st.tuples(sids, timeouts, acks).map(list),
    st.tuples(sids, timeouts, acks, st.just(1)).map(list),
    st.tuples(sids).map(list),
    st.fixed_dictionaries({"sid": sids, "timeout": timeouts}),
    st.none(), st.just("x"))


@st.composite
def calls(draw):
    call = {"method": draw(st.sampled_from(["session.get_events", "session.get_events",
                                            "stats.online", ["session.get_events"]]))}
    form = draw(st.sampled_from(["modern", "modern", "legacy", "bad-version"]))
    if form != "legacy":
        call["jsonrpc"] = "2.0" if form == "modern" else "1.0"
    if draw(st.integers(0, 9)):
        call["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        call["params"] = draw(params)
    if not draw(st.integers(0, 9)):
        call["extra"] = 1
    return call


def body_for(call: dict, sid: str) -> bytes:
    def put(value):
        if value is SID:
            return sid
        if isinstance(value, list):
            return [put(v) for v in value]
        if isinstance(value, dict):
            return {k: put(v) for k, v in value.items()}
        return value
    return json.dumps(put(call), ensure_ascii=False).encode("utf-8", "surrogatepass")


def settle(node: ClockNode, answer):
    """The answer, letting a parked poll's timeout pass."""
    if isinstance(answer, Deferred):
        node.clock.advance(100)
        got = []
        answer.addBoth(got.append)
        assert got, "a parked poll was not answered at its timeout"
        return got[0]
    return answer


def state(node: ClockNode, sid: str) -> tuple:
    session = node.engine.sessions.sessions.get(sid)
    return (session is not None and (session.log.sent, session.log.pending, session.log.last_seq),
            dict(node.rpc_errors), node.engine.sessions.waiting)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(calls(), min_size=1, max_size=3))
def test_the_shortcut_answers_as_the_generic_path(sequence) -> None:
    fast, fast_sid = node_with_events(shortcut=True)
    slow, slow_sid = node_with_events(shortcut=False)
    for call in sequence:
        a = settle(fast, fast.dispatcher.handle(body_for(call, fast_sid), CALLER))
        b = settle(slow, slow.dispatcher.handle(body_for(call, slow_sid), CALLER))
        assert a == b, (call, a, b)
        assert type(a) is type(b)
        assert state(fast, fast_sid) == state(slow, slow_sid), call


def poll_methods(run=None, func_answer="generic", seen=None):
    """A method whose shortcut prepares ``run`` (None: declines) and whose
    own function answers ``func_answer``."""
    seen = seen if seen is not None else []

    def func(*params):
        seen.append(("func", params))
        return func_answer

    def shortcut(params, caller):
        seen.append(("shortcut", params))
        return run
    return {"poll": Method(func, ["a", "b"], 1, shortcut=shortcut)}, seen


def test_a_taken_call_never_reaches_the_method() -> None:
    methods, seen = poll_methods(run=lambda reply: RawJSON('[{"seq":1}]'))
    d = Dispatcher(methods)
    assert d.handle(b'{"jsonrpc":"2.0","id":7,"method":"poll","params":[1]}') == \
        RpcAnswer(b'{"jsonrpc":"2.0","result":[{"seq":1}],"id":7}')
    assert d.handle(b'{"id":"q","method":"poll","params":[1]}').body == b'[[{"seq":1}]]'
    assert [kind for kind, _ in seen] == ["shortcut", "shortcut"]


def test_a_declined_call_is_answered_by_the_method() -> None:
    methods, seen = poll_methods(run=None)
    d = Dispatcher(methods)
    assert d.handle(b'{"jsonrpc":"2.0","id":7,"method":"poll","params":[1]}').body == \
        b'{"jsonrpc":"2.0","result":"generic","id":7}'
    assert seen == [("shortcut", [1]), ("func", (1,))]


def test_shapes_the_shortcut_never_sees() -> None:
    """Only valid calls with positional params reach a shortcut."""
    methods, seen = poll_methods(run=lambda reply: 1)
    d = Dispatcher(methods)
    for body in [b'{"jsonrpc":"2.0","id":1,"method":"poll","params":{"a":1}}',
                 b'{"jsonrpc":"2.0","id":1,"method":"poll"}',
                 b'{"jsonrpc":"2.0","id":true,"method":"poll","params":[1]}',
                 b'{"jsonrpc":"2.0","id":9007199254740993,"method":"poll","params":[1]}',
                 b'{"jsonrpc":"1.0","id":1,"method":"poll","params":[1]}',
                 b'[{"jsonrpc":"2.0","id":[1],"method":"poll","params":[1]}]']:
        d.handle(body)
    assert not [kind for kind, _ in seen if kind == "shortcut"]


@pytest.mark.parametrize("body, answer", [
    (b'{"jsonrpc":"2.0","method":"poll","params":[1]}', None),            # notification
    (b'{"jsonrpc":"2.0","id":1.5,"method":"poll","params":[1]}',
     b'{"jsonrpc":"2.0","result":1,"id":1.5}'),
    (b'{"jsonrpc":"2.0","id":"\xc3\xa9","method":"poll","params":[1]}',
     '{"jsonrpc":"2.0","result":1,"id":"\u00e9"}'.encode()),
    (b'{"jsonrpc":"2.0","id":1,"method":"poll","params":[1],"x":0}',
     b'{"jsonrpc":"2.0","result":1,"id":1}'),
    (b'[{"jsonrpc":"2.0","id":1,"method":"poll","params":[1]},{"id":2,"method":"poll",'
     b'"params":[2]}]', b'[{"jsonrpc":"2.0","result":1,"id":1},[1]]'),
])
def test_every_valid_call_with_positional_params_may_take_the_shortcut(body, answer) -> None:
    """One path: a notification, any valid id, extra members, the calls of a
    batch reach the shortcut like the plainest call, and are answered as the
    method would answer them."""
    for run in (lambda reply: 1, None):
        methods, seen = poll_methods(run=run, func_answer=1)
        got = Dispatcher(methods).handle(body)
        assert got.body == answer
        assert "shortcut" in [kind for kind, _ in seen]
        assert ("func" in [kind for kind, _ in seen]) == (run is None)


def test_a_call_is_admitted_once_whichever_path_answers_it() -> None:
    admitted = []
    for run in (lambda reply: 1, None):
        methods, _ = poll_methods(run=run)
        admitted.clear()
        d = Dispatcher(methods, admit=lambda caller, n: admitted.append(n) or 0)
        d.handle(b'{"jsonrpc":"2.0","id":1,"method":"poll","params":[1]}')
        assert admitted == [1]


def test_a_refused_call_runs_nothing() -> None:
    ran = []
    methods, _ = poll_methods(run=lambda reply: ran.append(1))
    d = Dispatcher(methods, admit=lambda caller, n: 2.5)
    answer = d.handle(b'{"jsonrpc":"2.0","id":4,"method":"poll","params":[1]}')
    assert answer.status == 429 and answer.retry_after == 2.5
    assert json.loads(answer.body) == {"jsonrpc": "2.0", "id": 4, "error": {
        "code": 1007, "message": json.loads(answer.body)["error"]["message"]}}
    assert not ran


def test_a_lone_call_refused_by_a_limit_is_a_429_and_a_batch_is_not() -> None:
    def limited(*params):
        raise RateLimited(retry_after=3.0)
    d = Dispatcher({"poll": Method(limited, ["a"], 1)})
    lone = d.handle(b'{"jsonrpc":"2.0","id":1,"method":"poll","params":[1]}')
    assert (lone.status, lone.retry_after) == (429, 3.0)
    assert json.loads(lone.body)["error"]["code"] == 1007
    batch = d.handle(b'[{"jsonrpc":"2.0","id":1,"method":"poll","params":[1]}]')
    assert (batch.status, batch.retry_after) == (200, None)
    assert json.loads(batch.body)[0]["error"]["code"] == 1007


def test_a_parked_call_answers_when_it_fires_or_not_at_all() -> None:
    parked = Deferred()
    methods, _ = poll_methods(run=lambda reply: parked)
    d = Dispatcher(methods)
    answer = d.handle(b'{"jsonrpc":"2.0","id":"p","method":"poll","params":[1]}')
    got = []
    answer.addCallback(got.append)
    parked.callback(RawJSON("[]"))
    assert got == [RpcAnswer(b'{"jsonrpc":"2.0","result":[],"id":"p"}')]
    cancelled = Deferred()
    methods, _ = poll_methods(run=lambda reply: cancelled)
    answer = Dispatcher(methods).handle(b'{"id":1,"method":"poll","params":[1]}')
    got = []
    answer.addCallback(got.append)
    answer.cancel()
    assert got == [NOTHING] and NOTHING.body is None    # the client went away


def test_a_prepared_call_that_waits_answers_through_then_once() -> None:
    """With ``then`` (the fast front), a prepared call gets a reply instead
    of returning a Deferred: what it returns serves to cancel, and calling
    the reply hands ``then`` the framed answer."""
    class Parked:
        cancelled = False

        def cancel(self) -> None:
            self.cancelled = True
    replies, parked = [], Parked()
    methods, _ = poll_methods(run=lambda reply: replies.append(reply) or parked)
    seen: list[RpcAnswer] = []
    answer = Dispatcher(methods).handle(
        b'{"jsonrpc":"2.0","id":"p","method":"poll","params":[1]}', None, seen.append)
    assert answer is parked and len(replies) == 1 and not seen
    replies[0](RawJSON('[{"seq":2}]'))
    assert seen == [RpcAnswer(b'{"jsonrpc":"2.0","result":[{"seq":2}],"id":"p"}')]
    # without then, the prepared call is run with no reply
    methods, _ = poll_methods(run=lambda reply: replies.append(reply) or 7)
    assert Dispatcher(methods).handle(b'{"jsonrpc":"2.0","id":1,"method":"poll",'
                                      b'"params":[1]}').body == b'{"jsonrpc":"2.0","result":7,"id":1}'
    assert replies[-1] is None


def test_failures_are_answered_as_errors_without_detail() -> None:
    errors = []
    for run in (lambda reply: 1 / 0, lambda reply: fail(ZeroDivisionError()),
                lambda reply: fail(BadParams("no"))):
        methods, _ = poll_methods(run=run)
        answer = Dispatcher(methods, on_error=errors.append).handle(
            b'{"jsonrpc":"2.0","id":3,"method":"poll","params":[1]}')
        if isinstance(answer, Deferred):
            got = []
            answer.addCallback(got.append)
            answer = got[0]
        error = json.loads(answer.body)["error"]
        assert "ZeroDivision" not in error["message"]
    assert errors == [-32603, -32603, -32602]


def test_the_connection_keeps_one_caller_but_headers_still_count() -> None:
    """The fast front finds a plain request's caller once per connection;
    a request with a forwarding header on the same connection is still its
    forwarded client, and a plain one after it the peer again."""
    argv = ("--trusted-proxies", "127.0.0.1/32", "--max-client-sessions", "1")
    forwarded = {"X-Forwarded-For": "203.0.113.5"}
    data = (rpc_bytes("session.create") + rpc_bytes("session.create", extra=forwarded)
            + rpc_bytes("session.create") + rpc_bytes("session.create", extra=forwarded))
    for front in FRONTS:
        _, _, got = answers(front, data, *argv)
        assert [code for code, _ in got] == [200, 200, 429, 429], (front, got)


def test_the_common_poll_takes_the_shortcut() -> None:
    node, sid = node_with_events(shortcut=True)

    def generic(*args):
        raise AssertionError("the generic method answered")
    node.dispatcher.methods["session.get_events"].func = generic
    answer = node.dispatcher.handle(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "session.get_events",
        "params": [sid, 0, 0]}).encode(), CALLER)
    assert [e["seq"] for e in json.loads(answer.body)["result"]] == [1, 2, 3]
    parked = node.dispatcher.handle(json.dumps({
        "id": 2, "method": "session.get_events", "params": [sid, 30, 3]}).encode(), CALLER)
    assert isinstance(parked, Deferred) and node.engine.sessions.waiting == 1
