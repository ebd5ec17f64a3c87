"""WebSocket close reasons come from one table (SPEC section 22): a socket
is closed with a code and that code's reason of ``CLOSE_REASONS``, never
with the text of an error. Before, a text frame that was not UTF-8 was
closed with wsproto's words, "'utf-8' codec can't decode byte 0xed in
position 0: invalid continuation byte", on both fronts; a client's own close
had its reason echoed back."""
from __future__ import annotations

import zlib

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import CloseConnection, TextMessage
from wsproto.frame_protocol import FrameProtocol, Opcode

from pushengine.core.limits import CallRate
from pushengine.transports.deflate import ServerDeflate
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.websocket import CLOSE_REASONS, REFUSALS, WsConnection
from tests.http.harness import ClockNode, Raw
from tests.transports.test_websocket_budget import Dispatcher, Request, client_frames
from tests.transports.test_ws_raw import upgrade


def masked(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
    """One client frame built by hand (wsproto refuses to build a bad one)."""
    mask = b"\x01\x02\x03\x04"
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    head = bytes((first, 0x80 | n)) if n < 126 \
        else bytes((first, 0x80 | 126)) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


NOT_UTF8 = masked(0x1, b"\xed\xa0\x80 a lone surrogate, encoded")


def closes(data: bytes) -> list[CloseConnection]:
    """The close frames among the bytes a server wrote, as a client reads them."""
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(data)
    return [e for e in client.events() if isinstance(e, CloseConnection)]


def connect(**kw) -> tuple[WsConnection, StringTransport, Clock]:
    clock = kw.pop("clock", None) or Clock()
    deflate = kw.pop("deflate", None)
    conn = Connection(ConnectionType.SERVER, [deflate] if deflate else None)
    ws = WsConnection(conn, kw.pop("dispatcher", None) or Dispatcher(), None, clock,
                      kw.pop("max_message", 1 << 20), Request(), kw.pop("heartbeat", None),
                      deflate, kw.pop("idle", None))
    transport = StringTransport()
    ws.makeConnection(transport)
    return ws, transport, clock


def test_a_text_frame_that_is_not_utf8_is_closed_with_the_tables_reason() -> None:
    ws, transport, _ = connect()
    ws.dataReceived(NOT_UTF8)
    (close,) = closes(transport.value())
    assert (close.code, close.reason) == (1007, CLOSE_REASONS[1007])
    assert "codec" not in close.reason and ws.closed and transport.disconnecting


def test_a_clients_close_is_echoed_with_its_code_and_none_of_its_text() -> None:
    ws, transport, _ = connect()
    ws.dataReceived(client_frames(CloseConnection(4321, "whatever the client says here")))
    (close,) = closes(transport.value())
    assert close.code == 4321 and close.reason == ""


def bomb() -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = (c.compress(b" " * (4 << 20)) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]
    raw = FrameProtocol(client=True, extensions=[]).send_data(payload, fin=True)
    return bytes([raw[0] | 0x40]) + raw[1:]


def every_close() -> dict[str, tuple[int, bytes]]:
    """Each way this transport closes a socket: its code and what was written."""
    out = {}
    ws, transport, _ = connect()
    ws.dataReceived(NOT_UTF8)
    out["not UTF-8"] = (1007, transport.value())
    ws, transport, _ = connect()
    ws.dataReceived(masked(0x3, b"x"))                 # a reserved opcode
    out["bad opcode"] = (1002, transport.value())
    ws, transport, _ = connect()
    ws.dataReceived(masked(0x9, b"x" * 126))           # a control frame too long
    out["long ping"] = (1002, transport.value())
    ws, transport, _ = connect()
    ws.dataReceived(masked(0x1, b"{}", rsv1=True))    # RSV1 without deflate
    out["rsv1"] = (1002, transport.value())
    ws, transport, _ = connect(max_message=10)
    ws.dataReceived(client_frames(TextMessage("x" * 20)))
    out["too big"] = (1009, transport.value())
    deflate = ServerDeflate(1 << 10)
    deflate.accept("permessage-deflate")
    ws, transport, _ = connect(max_message=1 << 10, deflate=deflate)
    ws.dataReceived(bomb())
    out["bomb"] = (1009, transport.value())
    deflate = ServerDeflate(1 << 10)
    deflate.accept("permessage-deflate")
    ws, transport, _ = connect(max_message=1 << 10, deflate=deflate)
    ws.dataReceived(masked(0x1, b"\xff\xff\xff not deflate", rsv1=True))
    out["bad deflate"] = (1007, transport.value())
    clock = Clock()
    rate = CallRate(clock, 1, 1)
    d = Dispatcher(rate)
    ws, transport, _ = connect(dispatcher=d, clock=clock)
    for _ in range(REFUSALS + 2):
        ws.dataReceived(client_frames(TextMessage("{}")))
        clock.advance(0)
    out["rate"] = (1008, transport.value())
    clock = Clock()
    ws, transport, _ = connect(clock=clock, heartbeat=Heartbeat(clock, 1.0), idle=2.0)
    for _ in range(4):
        clock.advance(1)
    out["idle"] = (1001, transport.value())
    ws, transport, _ = connect()
    ws.close()
    out["moved"] = (1000, transport.value())
    return out


@pytest.mark.parametrize("name", list(every_close()))
def test_every_close_sends_its_codes_reason_from_the_table(name: str) -> None:
    code, written = every_close()[name]
    found = closes(written)
    assert [(c.code, c.reason) for c in found] == [(code, CLOSE_REASONS[code])]


def front_socket(front: str) -> Raw:
    node = ClockNode("--http", front)
    raw = Raw(node.http_factory())
    raw.transport.protocol = raw.protocol          # as a TCP connection has it
    raw.send(upgrade())
    assert raw.transport.value().startswith(b"HTTP/1.1 101 "), raw.transport.value()
    raw.transport.clear()
    return raw


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_on_both_fronts_a_frame_that_is_not_utf8_gets_no_decoder_text(front: str) -> None:
    raw = front_socket(front)
    target = raw.transport.protocol
    target.dataReceived(NOT_UTF8)
    (close,) = closes(raw.transport.value())
    assert (close.code, close.reason) == (1007, CLOSE_REASONS[1007])
    assert raw.closing
