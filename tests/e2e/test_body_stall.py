"""Bodies that never come, against the real process (SPEC section 18): one
client opens many connections that send ``Content-Length: 100`` and then
nothing. Past ``--max-client-connections`` its connections are refused at
once with a JSON 429, those it holds get a JSON 408 at ``--body-timeout``,
and another client (127.0.0.2) is served throughout."""
from __future__ import annotations

import http.client
import json
import socket
import time

import pytest

from tests.e2e.conftest import Engine, start

pytestmark = pytest.mark.e2e

CAP = 20
OPENED = 60
BODY_TIMEOUT = 4        # seconds: the connections are all opened well before it


@pytest.fixture
def engine(tmp_path) -> Engine:
    e = start(tmp_path, "--max-client-connections", str(CAP), "--body-timeout",
              str(BODY_TIMEOUT))
    yield e
    e.stop()
    log = e.log_text()
    assert "Unhandled" not in log and "Traceback" not in log, log[-5000:]


def read_all(sock: socket.socket, within: float) -> bytes:
    """What the node sends on ``sock`` until it closes it (or ``within`` s pass)."""
    sock.settimeout(within)
    data = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                return data
            data += part
    except (socket.timeout, ConnectionResetError):
        return data


def test_stalled_bodies_are_capped_and_cut_while_another_client_is_served(
        engine: Engine) -> None:
    socks = []
    opening = time.monotonic()
    for _ in range(OPENED):
        sock = socket.create_connection(("127.0.0.1", engine.port), timeout=5)
        sock.sendall(b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"a\":")
        socks.append(sock)
    other = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=5,
                                       source_address=("127.0.0.2", 0))
    started = time.monotonic()
    other.request("GET", "/health")
    reply = other.getresponse()
    assert reply.status == 200 and json.loads(reply.read())
    assert time.monotonic() - started < 1.0
    assert time.monotonic() - opening < BODY_TIMEOUT   # no held connection was cut yet
    answers = [read_all(sock, BODY_TIMEOUT + 5.0) for sock in socks]
    statuses = sorted(int(a.split(b" ", 2)[1]) for a in answers if a)
    assert statuses == [408] * CAP + [429] * (OPENED - CAP), statuses
    for answer in answers:
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    for sock in socks:
        sock.close()
