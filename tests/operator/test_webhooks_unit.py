"""Webhooks on a Clock (SPEC section 16): the node's session events POSTed
to a receiver behind ``treq.testing.StubTreq``, which fails when told."""
from __future__ import annotations

import json

import jwt
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from pushengine.webhooks.sender import SIGNATURE_HEADER, WebhookSender, sign, verify
from tests.http.harness import ClockNode, Http, Rpc

SECRET = "hook-secret"
JWT_SECRET = "jwt-secret-of-at-least-thirty-two-bytes"


class Receiver(Resource):
    """Records every POST; answers 500 to the first ``fail`` of them."""

    isLeaf = True

    def __init__(self, fail: int = 0) -> None:
        super().__init__()
        self.fail = fail
        self.attempts = 0
        self.accepted: list[dict] = []
        self.bad_signatures = 0

    def render_POST(self, request) -> bytes:
        self.attempts += 1
        body = request.content.read()
        if not verify(SECRET, body, request.getHeader(SIGNATURE_HEADER)):
            self.bad_signatures += 1
        if self.attempts <= self.fail:
            request.setResponseCode(500)
            return b"down"
        self.accepted.append(json.loads(body))
        return b"ok"


class HookNode(ClockNode):
    def __init__(self, receiver: Resource, *argv: str) -> None:
        self.stub = StubTreq(receiver)
        super().__init__("--webhook-url", "http://backend.test/hook", "--webhook-secret", SECRET,
                         "--secret", JWT_SECRET, "--session-timeout", "30", *argv)

    def _webhook_client(self):
        return self.stub

    def settle(self, seconds: float = 0.0, steps: int = 1) -> None:
        for _ in range(steps):
            self.stub.flush()
            self.clock.advance(seconds)
            self.stub.flush()


def token(user: str) -> str:
    return jwt.encode({"sub": user}, JWT_SECRET, algorithm="HS256")


def lifecycle(node: HookNode) -> tuple[str, str]:
    rpc = Rpc(Http(node.web.resource()))
    a = rpc("session.create")
    b = rpc("session.create")
    rpc("session.authorize", a, token("alice"))
    rpc("session.subscribe", a, "PublicLiveStreamView", {}, 10)   # changed, not a new event
    rpc("session.authorize", a, token("alice"))                  # the same user: nothing new
    rpc("session.destroy", a)
    node.clock.advance(31)                                       # b expires
    return a, b


def test_every_event_once_signed_in_order_per_session() -> None:
    receiver = Receiver()
    node = HookNode(receiver)
    a, b = lifecycle(node)
    node.settle()
    assert receiver.bad_signatures == 0
    got = [(e["event"], e["session"], e["user"]) for e in receiver.accepted]
    assert [x for x in got if x[1] == a] == [
        ("session.created", a, None), ("session.authorized", a, "alice"),
        ("session.destroyed", a, "alice")]
    assert [x for x in got if x[1] == b] == [("session.created", b, None),
                                             ("session.expired", b, None)]
    for e in receiver.accepted:
        assert e["node"] == "test-node" and isinstance(e["time"], float)
        assert set(e) == {"event", "session", "user", "node", "time"}


def test_a_failing_backend_is_retried_with_capped_backoff() -> None:
    receiver = Receiver(fail=10**6)
    node = HookNode(receiver)
    a, b = lifecycle(node)
    sender = node.webhooks
    node.settle()
    # (the first back-off steps passed while session b was waiting to expire)
    assert receiver.accepted == [] and sender.failures >= 1 and sender.paused is not None
    delays = []
    for _ in range(8):
        delay = sender.paused.getTime() - node.clock.seconds()
        delays.append(delay)
        node.settle(delay)
    assert delays[0] == 0.5 * 2 ** (sender.failures - 9)
    for before, after in zip(delays, delays[1:]):
        assert after == min(30.0, 2 * before)                         # doubled, capped
    assert delays[-2:] == [30.0, 30.0]
    assert receiver.accepted == [] and sender.queued == 5
    receiver.fail = 0                                                # the backend is back
    node.settle(30.0, steps=3)
    got = [(e["event"], e["session"]) for e in receiver.accepted]
    assert len(set(got)) == len(got) == 5                             # each once
    assert [e for e, s in got if s == a] == ["session.created", "session.authorized",
                                             "session.destroyed"]
    assert [e for e, s in got if s == b] == ["session.created", "session.expired"]
    assert sender.queued == 0 and sender.failures == 0 and sender.failed >= 8
    assert receiver.bad_signatures == 0


def test_the_queue_is_bounded_and_drops_are_counted_in_metrics() -> None:
    class Silent(Resource):
        isLeaf = True

        def render_POST(self, request):
            from twisted.web.server import NOT_DONE_YET
            return NOT_DONE_YET                                     # never answers

    node = HookNode(Silent(), "--webhook-queue", "20", "--max-client-sessions", "0",
                    "--client-rate", "0")
    http = Http(node.web.resource())
    rpc = Rpc(http)
    for _ in range(100):
        rpc("session.create")
    sender = node.webhooks
    assert sender.queued == 20 and sender.dropped == 80 and len(sender.busy) == 4
    # the engine goes on answering at once
    sid = rpc("session.create")
    assert rpc("session.get_events", sid, 0) == []
    text = http.get("/metrics").body.decode()
    assert "pushengine_webhooks_dropped_total{node=\"test-node\"} 81.0" in text
    assert "pushengine_webhooks_queued{node=\"test-node\"} 20.0" in text
    # POSTs that never answer time out and are retried; the queue stays bounded
    node.settle(10.0)
    assert sender.failed == 4 and sender.queued == 20


def test_a_full_lane_does_not_block_other_sessions() -> None:
    """One session's events are in order; other sessions' are sent beside them."""
    sent = []

    class Http:
        def post(self, url, data, headers):
            from twisted.internet.defer import Deferred
            d = Deferred()
            sent.append((json.loads(data), d))
            return d

        def content(self, response):
            from twisted.internet.defer import succeed
            return succeed(b"")

    class Response:
        code = 204

    sender = WebhookSender(Http(), "http://x/", "s", "n", Clock(), concurrency=2)
    for sid in ("a", "a", "a", "b"):
        sender.send("session.created", sid, None)
    assert [m["session"] for m, _ in sent] == ["a", "b"]          # a's second waits
    sent[0][1].callback(Response())
    assert [m["session"] for m, _ in sent] == ["a", "b", "a"]
    assert sender.sent == 1 and sender.queued == 3


def test_signature_helpers() -> None:
    body = b'{"event":"session.created"}'
    header = sign(SECRET, body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert verify(SECRET, body, header)
    assert not verify(SECRET, body + b" ", header)
    assert not verify("other", body, header)
    assert not verify(SECRET, body, None)


# -- SPEC 18: the queue is shared fairly; a backend that hangs shows -------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from twisted.internet.defer import Deferred, succeed  # noqa: E402


class HeldHttp:
    """POSTs that wait until the test answers them (or never)."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict, Deferred]] = []

    def post(self, url, data, headers):
        d: Deferred = Deferred()
        self.sent.append((json.loads(data), d))
        return d

    def content(self, response):
        return succeed(b"")


class Ok:
    code = 204


EVENT = st.sampled_from(["session.created", "session.authorized", "session.destroyed"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["flood-1", "flood-2", "ann", "bob", "cy"]),
                          st.integers(0, 30), EVENT, st.booleans()), max_size=300),
       st.integers(4, 30))
def test_one_clients_flood_cannot_push_out_the_others(calls, max_queue):
    """Property: the queue never holds more than max_queue events; an event
    is refused or pushed out only from a client that holds at least as many
    events as any other (the heaviest) — or, for an event that is not
    authorized, to make room for an authorized one of the same client; and
    an authorized event is pushed out only when its client holds nothing
    else that could go."""
    http = HeldHttp()
    clock = Clock()
    sender = WebhookSender(http, "http://x/", None, "n", clock, max_queue=max_queue,
                           concurrency=2, client_of=lambda sid: sid.split("/")[0])
    for client, n, event, answer in calls:
        before = {c: q.count for c, q in sender.clients.items()}
        # per client: the kinds of its events that could be pushed out (queued, not in flight)
        movable = {}
        for lane in sender.lanes.values():
            for e in lane:
                if e.state == 0 and (e.sid not in sender.busy or e is not lane[0]):
                    movable.setdefault(e.client, set()).add(e.authorized)
        queued = sender.queued
        dropped = sender.dropped
        kept = sender.send(event, f"{client}/{n}", None)
        assert sender.queued <= max_queue
        if queued >= max_queue:
            mine = before.get(client, 0)
            heaviest = max(before.values())
            after = {c: q.count for c, q in sender.clients.items()}
            if kept:
                losers = [c for c in before if after.get(c, 0) < before[c] + (c == client)]
                assert len(losers) == 1
                loser = losers[0]
                assert before[loser] == heaviest or (loser == client and
                                                     event == "session.authorized")
            else:
                authorized = event == "session.authorized"
                kinds = {False, True} if authorized else {False}
                assert mine == heaviest or not any(
                    movable.get(c, set()) & kinds for c in before if before[c] == heaviest)
                assert not (authorized and False in movable.get(client, set()))
            assert sender.dropped == dropped + 1
        if answer and http.sent:
            _, d = http.sent.pop(0)
            if not d.called:
                d.callback(Ok())
    assert sum(q.count for q in sender.clients.values()) == sender.queued
    assert sum(len(lane) for lane in sender.lanes.values()) == sender.queued


def test_a_flood_from_a_few_addresses_keeps_the_authorized_event_of_another() -> None:
    """Anonymous session.create/destroy floods from two addresses behind a
    trusted proxy fill the queue; a third client's events, authorized
    first, still reach the backend (before: dropped)."""
    class Silent(Resource):
        isLeaf = True

        def render_POST(self, request):
            from twisted.web.server import NOT_DONE_YET
            self.waiting.append(request)
            return NOT_DONE_YET
    silent = Silent()
    silent.waiting = []
    node = HookNode(silent, "--webhook-queue", "50", "--max-client-sessions", "0",
                    "--client-rate", "0", "--trusted-proxies", "127.0.0.1/32")
    http = Http(node.web.resource())

    def call(address, method, *params):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        return http.post("/api/jsonrpc", body, {"x-forwarded-for": address}).json()["result"]
    for i in range(300):
        flooder = "198.51.100.%d" % (1 + i % 2)
        call(flooder, "session.destroy", call(flooder, "session.create"))
    sid = call("203.0.113.7", "session.create")
    call("203.0.113.7", "session.authorize", sid, token("carol"))
    for i in range(300):
        flooder = "198.51.100.%d" % (1 + i % 2)
        call(flooder, "session.destroy", call(flooder, "session.create"))
    sender = node.webhooks
    assert sender.queued == 50
    mine = [e for e in sender.lanes.get(sid, ())]
    assert [json.loads(e.body)["event"] for e in mine] == ["session.created",
                                                          "session.authorized"]
    assert sender.clients["198.51.100.1"].count <= 25


def test_a_backend_that_stops_answering_shows_in_health_and_metrics() -> None:
    class Hangs(Resource):
        """Answers its headers and a first byte, then never finishes."""
        isLeaf = True

        def render_POST(self, request):
            from twisted.web.server import NOT_DONE_YET
            request.write(b"{")
            return NOT_DONE_YET
    node = HookNode(Hangs())
    http = Http(node.web.resource())
    rpc = Rpc(http)
    rpc("session.create")
    node.settle()
    health = http.get("/health").json()["webhooks"]
    assert health["failing"] is False and health["hanging"] is False
    node.settle(6.0)                            # half the 10 s timeout: it shows
    health = http.get("/health").json()["webhooks"]
    assert health["failing"] is True and health["hanging"] is True
    text = http.get("/metrics").body.decode()
    assert 'pushengine_webhooks_failing{node="test-node"} 1.0' in text
    assert 'pushengine_webhooks_oldest_in_flight_seconds{node="test-node"} 6.0' in text
    node.settle(5.0)                            # the timeout cuts it, headers or not
    health = http.get("/health").json()["webhooks"]
    assert health["failing"] is True and health["timeouts"] == 1
    assert health["last_error"] == "no answer within 10 s"
    assert node.webhooks.failed == 1
