"""Hostile WebSocket clients against ``twistd -n pushengine`` (SPEC 18): one
that pings and never reads, one that floods tiny invalid frames, one that
holds a socket with no session and answers no ping. The node's memory stays
bounded and another client is served meanwhile."""
from __future__ import annotations

import http.client
import json
import select
import socket
import statistics
import time

import pytest

from tests.e2e.conftest import start

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("wshostile"), "--idle-timeout", "1",
              "--client-rate", "100")
    yield e
    e.stop()


@pytest.fixture(scope="module")
def slow_rate_engine(tmp_path_factory):
    """A node whose call rate is low enough that a flood passes it however
    slowly a loaded machine lets the node read (5 calls/s, bursts of 10)."""
    e = start(tmp_path_factory.mktemp("wsflood"), "--client-rate", "5")
    yield e
    e.stop()


def ws_open(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /api/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert b" 101 " in head
    return sock


def frame(opcode: int, payload: bytes) -> bytes:
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\x00" * 4 + payload


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def health_ms(port: int, count: int = 20) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    for _ in range(count):
        t = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        out.append((time.perf_counter() - t) * 1000)
    conn.close()
    return out


def test_a_client_that_pings_and_never_reads_is_no_longer_read(engine) -> None:
    """Before: every ping's pong was buffered in the node (+86 MiB in 20 s).
    Now the node stops reading once the unsent pongs pass the bound: the
    client's sends block long before 64 MiB, and the node's memory stays."""
    sock = ws_open(engine.port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    before = rss_kib(engine.process.pid)
    pings = frame(9, b"p" * 125) * 512
    sent = 0
    while sent < 64 << 20:
        _, writable, _ = select.select([], [sock], [], 2.0)
        if not writable:
            break                           # the node stopped reading: what we wanted
        try:
            sent += sock.send(pings)
        except BlockingIOError:
            continue
    grown = rss_kib(engine.process.pid) - before
    assert sent < 64 << 20, "the node read 64 MiB of pings from a client that reads nothing"
    assert grown < 32 * 1024, grown
    assert max(health_ms(engine.port)) < 500
    sock.close()


def test_a_flood_of_invalid_frames_is_refused_for_the_rate_then_closed(
        slow_rate_engine) -> None:
    """Before: parse errors did not count against --client-rate; a flood
    of them was answered for ever. Now error 1007, then the close."""
    engine = slow_rate_engine
    sock = ws_open(engine.port)
    sock.settimeout(10)
    try:
        for _ in range(50):
            sock.sendall(frame(1, b"x") * 100)
    except OSError:
        pass
    got = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            break
        got += data
    assert b'"code":1007' in got
    assert b"\x88" in got and b"\x03\xf0" in got     # a close frame, code 1008
    assert statistics.median(health_ms(engine.port)) < 100


def test_a_socket_with_no_session_that_answers_no_ping_is_closed(engine) -> None:
    sock = ws_open(engine.port)
    sock.settimeout(15)
    got = b""
    t = time.monotonic()
    while True:
        data = sock.recv(65536)
        if not data:
            break
        got += data
    assert time.monotonic() - t < 10
    assert b"\x89\x00" in got and b"\x88" in got       # pinged, then closed


def test_a_socket_that_answers_pings_with_a_session_stays(engine) -> None:
    from tests.transports.wsclient import WsClient
    ws = WsClient(engine.port)
    ws.call("session.create")
    t = time.monotonic()
    while ws.pings < 3 and time.monotonic() - t < 10:
        ws._pump()
    assert ws.pings >= 3 and ws.closed is None
    assert json.dumps(ws.call("stats.online"))
    ws.close()
