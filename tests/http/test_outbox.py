"""The outbox over real loopback sockets (what a turn writes leaves at its
end, one send per connection, in order, nothing lost on close), and the fast
front's rule for it (answers to bytes just read wait for the turn's end; a
change waking a poll sends at once)."""
from __future__ import annotations

import json

import pytest_twisted
from twisted.internet.task import deferLater
from twisted.internet.testing import StringTransport

from pushengine.core.changes import Change
from pushengine.web import fastpath
from pushengine.web.outbox import Outbox
from tests.http.harness import ClockNode, Raw, http_request
from tests.http.loopback import connected, messages, write_mixed


def test_a_transport_that_is_not_a_socket_is_written_at_once():
    t = StringTransport()
    outbox = Outbox(clock=None)             # never asked for a turn's end
    outbox.write(t, b"abc")
    outbox.write(t, b"def")
    assert t.value() == b"abcdef" and not outbox.pending


@pytest_twisted.ensureDeferred
async def test_a_turns_writes_leave_together_at_its_end_in_order():
    from twisted.internet import reactor
    sent = messages(300)
    transport, client, done, port = await connected(sum(map(len, sent)))
    try:
        sends = []
        real = transport.writeSomeData
        transport.writeSomeData = lambda data: sends.append(len(data)) or real(data)
        outbox = Outbox(reactor)
        for m in sent[:100]:
            outbox.write(transport, m)
        assert sends == [] and outbox.pending     # nothing sent within the turn
        got = await deferLater(reactor, 0, lambda: None)
        assert len(sends) == 1                     # one send for the whole turn
        write_mixed(transport, sent[100:], outbox.write, every=7,
                    before_twisted=lambda: outbox.flush_one(transport))
        got = await done
        assert got == b"".join(sent)
    finally:
        client.transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_closing_sends_what_is_queued_first_and_abort_drops_it():
    from twisted.internet import reactor
    big = b"x" * (3 << 20)
    transport, client, done, port = await connected(len(big) + 1)
    try:
        outbox = Outbox(reactor)
        outbox.write(transport, big)
        outbox.write(transport, b"!")
        outbox.close(transport)
        got = await client.lost
        assert got == big + b"!"
        transport, client, done, _ = await connected(1)
        outbox.write(transport, b"never")
        outbox.abort(transport)
        got = await client.lost
        assert got == b"" and not outbox.pending
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_one_failing_connection_does_not_stop_the_others():
    from twisted.internet import reactor
    transport, client, done, port = await connected(2)
    bad, bad_client, _, bad_port = await connected(1)
    try:
        def broken(data):
            raise OSError("boom")
        bad.writeSomeData = broken
        outbox = Outbox(reactor)
        outbox.write(bad, b"x")
        outbox.write(transport, b"ok")
        got = await done
        assert got == b"ok"
    finally:
        for c in (client, bad_client):
            c.transport.loseConnection()
        for p in (port, bad_port):
            await p.stopListening()


def rpc(method: str, *params, id_: int = 1) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                       "params": list(params)}).encode()
    return http_request("POST", "/api/jsonrpc", body, {"Content-Type": "application/json"})


class Recorder:
    """Stands for the outbox and send_now: who wrote what."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def write(self, transport, data) -> None:
        self.calls.append(("turn's end", data))
        transport.write(data)

    def send_now(self, transport, data) -> None:
        self.calls.append(("now", data))
        transport.write(data)

    def flush_one(self, transport) -> None:
        pass

    def close(self, transport) -> None:
        transport.loseConnection()

    def forget(self, transport) -> None:
        pass


def test_answers_to_what_was_read_wait_and_woken_polls_go_now(monkeypatch):
    node = ClockNode("--client-rate", "0")
    factory = node.http_factory()
    recorder = Recorder()
    factory.outbox = recorder
    monkeypatch.setattr(fastpath, "send_now", recorder.send_now)
    raw = Raw(factory)
    raw.send(rpc("session.create"))
    sid = raw.responses()[0].json()["result"]
    view = node.catalog.methods["stream.subscribe_public_live"].name
    node.api.session_subscribe(sid, view, {}, 10)
    raw.send(rpc("session.get_events", sid, 30, 0, id_=2))
    assert [how for how, _ in recorder.calls] == ["turn's end"]
    node.engine.apply_changes([Change("Stream", "upsert", 1, {
        "id": 1, "live": True, "public": True, "user_id": 1,
        "created_at": "2030-01-01T00:00:00Z"})])
    assert [how for how, _ in recorder.calls] == ["turn's end", "now"]
    assert b'"seq":1' in recorder.calls[1][1]
