"""Generated hostile input against a node's real resources (hypothesis).

Whatever a client sends — JSON-RPC bodies, publish bodies, AMQP message
bodies — the node answers no 5xx, writes no traceback, every answer is JSON a
strict parser accepts, and afterwards a normal session works as before.
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from pushengine.core.changes import decode_changes
from tests.http.harness import ClockNode, Http, Rpc

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def strict(body: bytes):
    """Parse an answer as a strict client would; an internal error (-32603)
    is a failure too: it means something got through that should not have."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    assert b'"code":-32603' not in body, body
    return json.loads(body.decode("utf-8"), parse_constant=refuse)


# text with what breaks naive JSON handling: lone surrogates, astral
# characters, control characters, quotes and backslashes
nasty_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\ud800", "x\udfffy", "\U0001F431", "\x00", '"', "\\", "кот", "$session.user",
                     "session.user", "", "x" * 2000]),
)
nasty_number = st.one_of(
    st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2 ** 53 + 1, -2 ** 53 - 1, 10 ** 400, -(10 ** 309)]))
scalars = st.one_of(st.none(), st.booleans(), nasty_number, nasty_text)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(nasty_text, inner, max_size=4), max_leaves=12)

METHODS = ["session.create", "session.destroy", "session.authorize", "session.subscribe",
           "session.unsubscribe", "session.get_events", "stats.online",
           "stream.subscribe_public_live", "stream.subscribe_user", "stream.subscribe_word",
           "stream.subscribe_near", "stream.subscribe_home", "no.such", ""]
calls = st.one_of(
    st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
                           "method": st.one_of(st.sampled_from(METHODS), nasty_text)},
                          optional={"id": st.one_of(scalars, st.lists(scalars, max_size=2)),
                                    "params": values}),
    st.fixed_dictionaries({"method": st.sampled_from(METHODS)}, optional={"params": values,
                                                                         "id": scalars}),
    values,
)


def encode(value) -> bytes:
    """JSON text of a generated value, lone surrogates and huge numbers
    included (json.dumps writes them; only the parser must refuse them)."""
    return json.dumps(value, ensure_ascii=True).encode()


splices = st.sampled_from([b"", b"NaN", b"Infinity", b"1e999", b"-1e999", b"[" * 70 + b"]" * 70,
                           b"\xff", b'"\\ud800"', b"{", b"]"])


def node_and_http():
    node = ClockNode("--client-rate", "0")
    return node, Http(node.web.resource())


def still_serves(http: Http) -> None:
    rpc = Rpc(http)
    sid = rpc("session.create")
    key, state = rpc("stream.subscribe_public_live", sid, 50)
    assert isinstance(state, list)
    assert rpc("session.get_events", sid, 0, 0) is not None


@FUZZ
@given(st.one_of(calls, st.lists(calls, min_size=1, max_size=5)), splices)
def test_generated_jsonrpc_bodies(body, splice) -> None:
    node, http = node_and_http()
    raw = encode(body)
    if splice:
        # splice something no encoder writes into the params or the end
        raw = raw.replace(b'"params": ', b'"params": ' + splice + b", ", 1) \
            if b'"params": ' in raw else raw + splice
    reply = http.post("/api/jsonrpc", raw)
    assert reply.code < 500, reply
    if reply.body:
        strict(reply.body)
    # let every parked poll time out, then the node serves a normal client
    node.clock.advance(100)
    still_serves(http)


# mostly well-formed live public streams with one nasty field: the ones that
# would reach every subscriber if the decoder let them through
change = st.fixed_dictionaries({
    "type": st.one_of(st.just("Stream"), st.just("Stream"), nasty_text),
    "action": st.sampled_from(["upsert", "upsert", "upsert", "insert", "delete", "drop"]),
    "obj": st.one_of(st.fixed_dictionaries(
        {"id": st.one_of(st.integers(0, 5), nasty_number, nasty_text), "public": st.just(True),
         "live": st.just(True), "title": nasty_text},
        optional={"viewers": nasty_number, "created_at": nasty_text, "nested": values}),
        values),
})


@FUZZ
@given(st.one_of(change, st.lists(change, max_size=5), values), splices)
def test_generated_publish_bodies(body, splice) -> None:
    node, http = node_and_http()
    rpc = Rpc(http)
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 50)
    raw = encode(body)
    if splice:
        raw = raw.replace(b'"obj": {', b'"obj": {"x": ' + splice + b", ", 1) \
            if b'"obj": {' in raw else raw + splice
    reply = http.post("/api/publish", raw)
    assert reply.code in (200, 400), reply
    strict(reply.body)
    # whatever was accepted can be sent: the events and states parse strictly
    events = http.post("/api/jsonrpc", rpc.body("session.get_events", [sid, 0, 0]))
    strict(events.body)
    state = http.post("/api/jsonrpc", rpc.body("stream.subscribe_public_live", [sid, 50]))
    strict(state.body)
    still_serves(http)


@FUZZ
@given(st.one_of(change, st.lists(change, max_size=5), values), splices)
def test_generated_amqp_bodies(body, splice) -> None:
    """The AMQP feed hands every message body to ``decode_changes``, then to
    the engine: nothing it accepts may break a session."""
    node, http = node_and_http()
    rpc = Rpc(http)
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 50)
    raw = encode(body) + splice
    changes, errors = decode_changes(raw, node.catalog.id_fields)
    assert changes or errors or raw == b"[]"
    node.engine.apply_changes(changes)
    strict(http.post("/api/jsonrpc", rpc.body("session.get_events", [sid, 0, 0])).body)
    strict(http.post("/api/jsonrpc", rpc.body("stream.subscribe_public_live", [sid, 50])).body)
    still_serves(http)


# -- WebSocket frames at a real engine socket -------------------------------------------

import os
import socket
import struct

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection, CloseConnection, Ping, Pong, Request as WsRequest, TextMessage)
from wsproto.extensions import PerMessageDeflate

payloads = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=60).map(lambda t: t.encode("utf-8")),
    st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\xaf", b"{", b"[]", b"[" * 300,
                     b'{"jsonrpc":"2.0","id":1,"method":"stats.online"}',
                     b'{"jsonrpc":"2.0","id":2,"method":"session.create"}',
                     b"\x00" * 130]),
)
frames = st.lists(st.tuples(
    st.booleans(),                              # FIN
    st.integers(0, 7),                          # RSV bits
    st.sampled_from([0, 1, 2, 8, 9, 10, 3, 7, 11, 15]),   # opcode, reserved ones too
    payloads,
    st.booleans(),                              # masked (a client must mask)
    st.sampled_from(["minimal", "16", "64"]),   # the length's form
), min_size=1, max_size=8)


def ws_frame(fin: bool, rsv: int, opcode: int, payload: bytes, masked: bool,
             form: str) -> bytes:
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    n, bit = len(payload), 0x80 if masked else 0
    if form == "64" or n > 65535:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    elif form == "16" or n > 125:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | n])
    if masked:
        key = os.urandom(4)
        head += key
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + payload


@pytest.fixture(scope="module")
def ws_engine(tmp_path_factory):
    from tests.e2e.conftest import start
    e = start(tmp_path_factory.mktemp("wsfuzz"), "--max-body", "4096")
    yield e
    e.stop()


@pytest.mark.e2e
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=frames, deflate=st.booleans())
def test_generated_websocket_frames(ws_engine, frames, deflate) -> None:
    """Random frames — opcodes, lengths, masks, fragmentation, invalid UTF-8,
    control frames, RSV bits, with and without deflate — at a real socket:
    nothing but JSON text, pongs, pings and a close comes back, and the node
    serves the next client."""
    sock = socket.create_connection(("127.0.0.1", ws_engine.port), timeout=5)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(WsRequest(host="127.0.0.1", target="/api/ws",
                                   extensions=[PerMessageDeflate()] if deflate else [])))
    got: list = []
    while not any(isinstance(e, AcceptConnection) for e in got):
        data = sock.recv(65536)
        assert data, "closed during the handshake"
        ws.receive_data(data)
        got += list(ws.events())
    try:
        sock.sendall(b"".join(ws_frame(*f) for f in frames)
                     + ws_frame(True, 0, 8, struct.pack("!H", 1000), True, "minimal"))
    except OSError:
        pass                                    # closed already: fine
    raw = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            assert not isinstance(e, socket.timeout), "the node neither answered nor closed"
            break
        if not data:
            break
        raw += data
    sock.close()
    ws.receive_data(raw)
    for event in ws.events():
        assert isinstance(event, (TextMessage, CloseConnection, Ping, Pong)), event
        if isinstance(event, TextMessage):
            strict(event.data.encode("utf-8"))
        if isinstance(event, CloseConnection):
            assert event.code in (1000, 1002, 1003, 1005, 1007, 1008, 1009) \
                or event.code < 1000, event
    assert ws_engine.call("stats.online") >= 0


# -- header names and values, at both fronts' bytes ------------------------------------

HEADER_NAMES = st.one_of(
    st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"Last-Event-ID", b"Upgrade",
                     b"Connection", b"Expect", b"X-Forwarded-For", b"Authorization", b"Origin",
                     b"Host", b"X-Api-Key", b"Content-Type"]),
    st.binary(min_size=1, max_size=40))
HEADER_VALUES = st.one_of(
    st.binary(max_size=60),
    st.sampled_from(["²", "١٢٣", "１２", "+12", "-1", "1_000", " 7 ", "0x10", "1e3", "chunked",
                     "websocket", "h2c", "100-continue", "Bearer \x00"]).map(
        lambda v: v.encode("utf-8")),
    st.sampled_from([b"\xb2", b"\xff\xfe", b"\x00", b"\r", b"\n"]),
    st.integers(min_value=1, max_value=6000).map(lambda n: b"9" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: b"0" * n + b"1"))
TARGETS = ["POST /api/jsonrpc", "GET /api/events?session=x", "GET /health", "POST /api/publish",
           "GET /api/ws", "OPTIONS /api/jsonrpc", "POST /api/segments/x"]


@FUZZ
@given(st.sampled_from(["fast", "twisted"]), st.sampled_from(TARGETS),
       st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), min_size=1, max_size=4))
def test_odd_header_names_and_values_get_json_or_a_clean_close(front, target, headers) -> None:
    from tests.http.harness import Raw
    node = ClockNode("--http", front, "--client-rate", "0")
    raw = Raw(node.http_factory())
    head = target.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(
        name + b": " + value + b"\r\n" for name, value in headers)
    raw.send(head + b"\r\n{}")
    node.clock.advance(0)
    node.clock.advance(60)                  # deadlines: a request that waits is cut
    for reply in raw.responses():           # (parses each answer: check() refuses HTML)
        assert reply.code < 500, reply
        if reply.code >= 400:
            assert reply.content_type.startswith("application/json"), reply
            strict(reply.body)
    # the node stays up: another client is served
    other = Raw(node.http_factory(), host="198.51.100.1")
    other.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    node.clock.advance(0)
    assert other.responses()[0].code == 200
