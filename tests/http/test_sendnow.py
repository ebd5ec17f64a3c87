"""send_now over real loopback sockets: order kept, nothing lost, the
buffered and the closing cases left to Twisted."""
from __future__ import annotations

import pytest_twisted
from twisted.internet.testing import StringTransport

from pushengine.web.sendnow import send_now
from tests.http.loopback import connected, messages, write_mixed


def test_a_transport_that_is_not_a_socket_gets_a_plain_write():
    t = StringTransport()
    send_now(t, b"abc")
    send_now(t, b"def")
    assert t.value() == b"abcdef"


@pytest_twisted.ensureDeferred
async def test_messages_arrive_whole_and_in_order_mixed_with_buffered_writes():
    sent = messages(400)
    transport, client, done, port = await connected(sum(map(len, sent)))
    try:
        write_mixed(transport, sent, send_now, every=5)
        got = await done
        assert got == b"".join(sent)
    finally:
        client.transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_closing_connection_is_left_to_twisted():
    transport, client, done, port = await connected(10 ** 9)
    try:
        send_now(transport, b"before")
        transport.loseConnection()
        assert transport.disconnecting
        send_now(transport, b"after")       # closing: Twisted's write, which flushes it first
        got = await client.lost
        assert got == b"beforeafter"
    finally:
        client.transport.loseConnection()
        await port.stopListening()
