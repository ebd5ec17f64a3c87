"""The WebSocket on the fast front, on the raw connection (SPEC section 10).

``GET /api/ws`` with an upgrade is not relayed to twisted.web: the fast
front runs the same checks and handshake on the request it parsed, answers
101 and hands the socket to ``WsConnection``. Raw bytes in on a
``StringTransport``, the node on a ``Clock``, frames read with wsproto.
"""
from __future__ import annotations

import base64
import hashlib
import json

import pytest
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import CloseConnection, Ping, TextMessage

from pushengine.core.changes import Change
from pushengine.transports.websocket import WsConnection
from tests.http.harness import ClockNode, Raw, http_request

KEY = base64.b64encode(b"0123456789abcdef").decode()
ACCEPT = base64.b64encode(hashlib.sha1(
    KEY.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())   # RFC 6455 section 4.2.2


def upgrade(query: str = "", headers: dict | None = None, path: str = "/api/ws") -> bytes:
    lines = [f"GET {path}{'?' + query if query else ''} HTTP/1.1", "Host: 127.0.0.1",
             "Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {KEY}",
             "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: pushengine.jsonrpc"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class Client:
    """A client socket on the fast front: frames out, frames back."""

    def __init__(self, node: ClockNode, first: bytes = b"", query: str = "",
                 headers: dict | None = None, socket: bool = True) -> None:
        self.node = node
        self.raw = Raw(node.http_factory())
        if socket:
            self.raw.transport.protocol = self.raw.protocol   # as a TCP connection has it
        self.ws = Connection(ConnectionType.CLIENT)
        self.ids = 0
        self.inbox: list[dict] = []     # every message read, in order
        self.raw.send(upgrade(query, headers) + first)
        self.read = len(self.head())

    def head(self) -> bytes:
        head, sep, _ = self.raw.transport.value().partition(b"\r\n\r\n")
        assert sep, self.raw.transport.value()
        return head + sep

    def frame(self, method: str, *params) -> bytes:
        self.ids += 1
        call = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": list(params)}
        return self.ws.send(TextMessage(json.dumps(call)))

    @property
    def socket(self) -> WsConnection:
        return self.raw.protocol.stream

    def call(self, method: str, *params):
        # the socket's protocol, or the channel when the transport has none
        target = getattr(self.raw.transport, "protocol", None) or self.raw.protocol
        target.dataReceived(self.frame(method, *params))
        self.node.clock.advance(0)
        return [m for m in self.messages() if m.get("id") == self.ids][-1]

    def pushed(self) -> list[int]:
        """The seqs of every event pushed so far."""
        self.messages()
        return [e["seq"] for m in self.inbox if m.get("method") == "events"
                for e in m["params"]]

    def events(self) -> list:
        data = self.raw.transport.value()[self.read:]
        self.read += len(data)
        self.ws.receive_data(data)
        return list(self.ws.events())

    def messages(self) -> list[dict]:
        new = [json.loads(e.data) for e in self.events() if isinstance(e, TextMessage)]
        self.inbox += new
        return new


def publish(node: ClockNode, *ids: int) -> None:
    node.engine.apply_changes([Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-01-01T00:00:{i % 60:02d}Z"}) for i in ids])


def test_the_handshake_then_the_socket_is_the_connections_protocol() -> None:
    node = ClockNode("--max-client-connections", "0")
    c = Client(node)
    head = c.head()
    assert head.startswith(b"HTTP/1.1 101 ")
    assert b"Sec-WebSocket-Accept: " + ACCEPT in head.replace(b"sec-websocket-accept",
                                                                b"Sec-WebSocket-Accept")
    assert b"pushengine.jsonrpc" in head
    socket = c.raw.transport.protocol
    assert isinstance(socket, WsConnection) and c.raw.transport.producer is socket
    channel = c.raw.protocol
    assert channel.behind is None and channel.parser is None and channel.stream is socket


def test_a_first_call_in_the_upgrades_bytes_and_events_after_it() -> None:
    node = ClockNode()
    client = Connection(ConnectionType.CLIENT)
    create = client.send(TextMessage(json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": []})))
    c = Client(node, first=create)
    c.ids = 1
    c.ws = client
    node.clock.advance(0)
    sid = [m for m in c.messages() if m.get("id") == 1][0]["result"]
    assert c.call("stream.subscribe_public_live", sid, 10)["result"]
    publish(node, 1, 2)
    assert c.pushed() == [1, 2]
    assert node.engine.sessions.get(sid).delivery is c.socket


def test_get_events_is_refused_on_the_socket_and_pings_keep_it_alive() -> None:
    node = ClockNode()
    c = Client(node)
    sid = c.call("session.create")["result"]
    assert c.call("session.get_events", sid, 0)["error"]["code"] == -32601
    node.clock.advance(45)
    assert any(isinstance(e, Ping) for e in c.events())


def test_resume_with_attach_replays_after_the_last_seq() -> None:
    node = ClockNode()
    first = Client(node)
    sid = first.call("session.create")["result"]
    first.call("stream.subscribe_public_live", sid, 10)
    publish(node, 1, 2, 3)
    first.raw.transport.protocol.connectionLost(Failure(ConnectionDone()))
    again = Client(node)
    assert "result" in again.call("session.attach", sid, 1)
    assert again.pushed() == [2, 3]


def refusal(front: str, *argv: str, query: str = "", headers: dict | None = None,
            data: bytes | None = None):
    node = ClockNode("--http", front, *argv)
    raw = Raw(node.http_factory())
    raw.send(data if data is not None else upgrade(query, headers))
    reply = raw.response()
    return reply.code, reply.json()


@pytest.mark.parametrize("argv,query,headers", [
    (("--api-key", "k1"), "", None),
    (("--api-key", "k1"), "apikey=nope", None),
    (("--cors-origin", "https://app.example"), "", {"Origin": "https://evil.example"}),
])
def test_refusals_are_the_same_json_on_both_fronts(argv, query, headers) -> None:
    fast = refusal("fast", *argv, query=query, headers=headers)
    assert fast == refusal("twisted", *argv, query=query, headers=headers)
    assert fast[0] == 403 and set(fast[1]["error"]) == {"code", "message"}


def test_another_version_and_no_upgrade_are_426_on_both_fronts() -> None:
    other = upgrade().replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8")
    plain = http_request("GET", "/api/ws")
    for data in (other, plain):
        fast = refusal("fast", data=data)
        assert fast == refusal("twisted", data=data)
        assert fast[0] == 426 and fast[1]["error"]["code"] == -32600


def test_a_key_in_the_query_upgrades() -> None:
    node = ClockNode("--api-key", "k1")
    assert Client(node, query="apikey=k1").head().startswith(b"HTTP/1.1 101 ")


def test_a_disconnect_detaches_and_releases_the_count() -> None:
    node = ClockNode("--session-timeout", "30")
    c = Client(node)
    sid = c.call("session.create")["result"]
    assert node.policy.connections.open == {"127.0.0.1": 1}
    node.clock.advance(100)
    assert sid in node.engine.sessions.sessions
    c.raw.transport.protocol.connectionLost(Failure(ConnectionDone()))
    assert node.policy.connections.open == {}
    assert node.engine.sessions.get(sid).delivery is None
    node.clock.advance(31)
    assert sid not in node.engine.sessions.sessions


def test_a_slow_consumer_gets_no_events_until_it_drains() -> None:
    node = ClockNode()
    c = Client(node)
    sid = c.call("session.create")["result"]
    c.call("stream.subscribe_public_live", sid, 10)
    assert c.raw.transport.producer is c.socket
    c.raw.transport.producer.pauseProducing()       # unsent bytes passed the bound
    publish(node, 1, 2)
    assert c.pushed() == []
    c.raw.transport.producer.resumeProducing()
    node.clock.advance(0)
    assert c.pushed() == [1, 2]


def test_attaching_elsewhere_closes_the_old_socket() -> None:
    node = ClockNode()
    old = Client(node)
    sid = old.call("session.create")["result"]
    new = Client(node)
    assert "result" in new.call("session.attach", sid, 0)
    closes = [e for e in old.events() if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1000 and old.raw.closing
    assert node.engine.sessions.get(sid).delivery is new.socket


def test_without_the_sockets_protocol_the_channel_hands_bytes_on() -> None:
    node = ClockNode()
    c = Client(node, socket=False)              # a transport without ``protocol``
    assert not hasattr(c.raw.transport, "protocol")
    assert "result" in c.call("session.create")       # through the channel
    c.raw.protocol.connectionLost(Failure(ConnectionDone()))
    assert c.socket is None and node.policy.connections.open == {}


def test_headers_h11_refuses_are_a_json_400_on_both_fronts() -> None:
    twice = upgrade().replace(b"Host: 127.0.0.1\r\n", b"Host: a\r\nHost: b\r\n")
    fast = refusal("fast", data=twice)
    assert fast == refusal("twisted", data=twice)
    assert fast == (400, {"error": {"code": -32600, "message": "bad request headers"}})


def test_the_ping_frame_is_the_one_wsproto_builds() -> None:
    """The heartbeat sends two constant bytes instead of framing a Ping per
    socket: the same bytes wsproto's server writes for ``Ping(b"")``, with
    and without permessage-deflate (control frames are never compressed)."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request
    from wsproto.extensions import PerMessageDeflate

    from pushengine.transports.websocket import PING_FRAME

    for extensions in ([], [PerMessageDeflate()]):
        server, client = WSConnection(ConnectionType.SERVER), WSConnection(ConnectionType.CLIENT)
        server.receive_data(client.send(Request(host="x", target="/", extensions=extensions)))
        next(server.events())
        client.receive_data(server.send(AcceptConnection(extensions=[PerMessageDeflate()]
                                                         if extensions else [])))
        list(client.events())
        assert server.send(Ping(b"")) == PING_FRAME
        client.receive_data(PING_FRAME)
        assert [type(e) for e in client.events()] == [Ping]
