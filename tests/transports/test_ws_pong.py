"""A pong read alone is noted without wsproto (transports/websocket.py), and
never when its bytes belong to another frame."""
from __future__ import annotations

import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.events import Pong

from pushengine.transports import websocket
from tests.transports.test_ws_raw import Client, ClockNode


def test_a_pong_read_alone_is_noted_without_wsproto() -> None:
    node = ClockNode()
    c = Client(node)
    socket = c.socket
    node.clock.advance(12.5)

    def not_here(data: bytes) -> None:
        raise AssertionError("the pong went to wsproto")
    real, socket.conn.receive_data = socket.conn.receive_data, not_here
    socket.dataReceived(c.ws.send(Pong(b"")))
    assert socket.last_pong == node.clock.seconds() == 12.5
    socket.conn.receive_data = real
    assert "result" in c.call("session.create")          # and the socket reads on


def frame_ending_like_a_pong(call_id: int = 1) -> bytes:
    """A masked text frame (a call, six spaces after its JSON) whose last six
    bytes on the wire are 0x8A 0x80 and four more: a pong's shape."""
    payload = json.dumps({"jsonrpc": "2.0", "id": call_id, "method": "session.create"}).encode() \
        + b" " * 6
    n = len(payload)
    key = bytearray(4)
    key[(n - 6) % 4] = 0x20 ^ 0x8A
    key[(n - 5) % 4] = 0x20 ^ 0x80
    key[(n - 4) % 4], key[(n - 3) % 4] = 0x5A, 0x33
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    assert n < 126 and masked[-6:-4] == b"\x8a\x80"
    return struct.pack("!BB", 0x81, 0x80 | n) + bytes(key) + masked


def test_the_end_of_another_frame_shaped_like_a_pong_goes_to_wsproto() -> None:
    node = ClockNode()
    c = Client(node)
    frame = frame_ending_like_a_pong()
    c.socket.dataReceived(frame[:-6])
    assert not websocket._between_frames(c.socket.conn)
    c.socket.dataReceived(frame[-6:])
    node.clock.advance(0)
    assert [m["id"] for m in c.messages()] == [1]


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(["call", "pong", "tricky"]), min_size=1, max_size=8),
       cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=12))
def test_calls_are_answered_however_the_bytes_are_cut(kinds, cuts) -> None:
    """Calls and pongs in any order, cut into reads anywhere: every call is
    answered once, in order, and a pong never eats another frame's bytes."""
    node = ClockNode()
    c = Client(node)
    wire = b""
    calls = 0
    for kind in kinds:
        if kind == "pong":
            wire += c.ws.send(Pong(b""))
        elif kind == "call":
            wire += c.frame("session.create")
            calls += 1
        else:
            c.ids += 1
            wire += frame_ending_like_a_pong(c.ids)
            calls += 1
    at = 0
    for cut in cuts + [len(wire)]:
        if at >= len(wire):
            break
        c.socket.dataReceived(wire[at:at + cut])
        at += cut
        node.clock.advance(0)
    node.clock.advance(0)
    answered = [m["id"] for m in c.messages() if "id" in m]
    assert answered == list(range(1, calls + 1))
