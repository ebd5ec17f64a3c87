"""The shutdown's sequence (``app/shutdown.py``) on a Clock, with stand-ins
for the listener, the connections and the transports; and the node's top
service stopping through it (``logs.NodeServices``)."""
from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from pushengine.app.logs import NodeServices
from pushengine.app.shutdown import REASON, Shutdown
from tests.deferreds import fired, pending
from tests.http.harness import ClockNode


class Closer:
    """A transport: ``close_all`` fires when the test says its clients are gone."""

    def __init__(self, name: str, steps: list[str]) -> None:
        self.name = name
        self.steps = steps
        self.gone: Deferred[None] = Deferred()
        self.aborted = False

    def close_all(self, reason: str) -> Deferred[None]:
        assert reason == REASON
        self.steps.append(f"close {self.name}")
        return self.gone

    def abort_all(self) -> None:
        self.steps.append(f"abort {self.name}")
        self.aborted = True


class Parts:
    def __init__(self, delay: float = 0.0, timeout: float = 10.0) -> None:
        self.clock = Clock()
        self.steps: list[str] = []
        self.closers = [Closer(n, self.steps) for n in ("connections", "polls", "sse", "ws")]
        self.services_stopped: Deferred[None] = Deferred()
        self.shutdown = Shutdown(self.clock, delay, timeout, lambda: self.steps.append("draining"),
                                 self.stop_listening, self.closers)

    def stop_listening(self) -> Deferred[None]:
        self.steps.append("stop listening")
        return succeed(None)

    def stop_services(self) -> Deferred[None]:
        self.steps.append("stop services")
        return self.services_stopped


def test_not_ready_at_once_then_after_the_delay_stop_listening_and_close_every_transport() -> None:
    p = Parts(delay=5.0)
    done = p.shutdown.stop(p.stop_services)
    assert p.steps == ["draining"]
    p.clock.advance(4.9)
    assert p.steps == ["draining"]                 # serving as before
    p.clock.advance(0.1)
    assert p.steps == ["draining", "stop listening", "close connections", "close polls",
                       "close sse", "close ws"]
    for closer in p.closers[:-1]:
        closer.gone.callback(None)
    assert "stop services" not in p.steps          # a WebSocket is still open
    p.clock.advance(1.0)
    p.closers[-1].gone.callback(None)
    assert p.steps[-1] == "stop services" and pending(done)
    p.services_stopped.callback(None)
    assert fired(done) is None
    assert not any(c.aborted for c in p.closers) and not p.shutdown.cut


def test_what_is_still_open_at_the_deadline_is_cut_and_the_services_stop_in_time() -> None:
    p = Parts(delay=2.0, timeout=10.0)
    done = p.shutdown.stop(p.stop_services)
    p.closers[0].gone.callback(None)
    # the deadline less the services' share (a second) counts from the signal
    p.clock.advance(8.9)
    assert "stop services" not in p.steps
    p.clock.advance(0.1)
    assert [s for s in p.steps if s.startswith("abort")] == [
        "abort connections", "abort polls", "abort sse", "abort ws"]
    assert p.steps[-1] == "stop services" and p.shutdown.cut
    # a service that does not stop does not hold the process past the timeout
    p.clock.advance(0.9)
    assert pending(done)
    p.clock.advance(0.1)
    assert fired(done) is None


def test_a_transport_that_fails_to_close_does_not_stop_the_others() -> None:
    p = Parts()
    p.closers[1].close_all = lambda reason: (_ for _ in ()).throw(RuntimeError("boom"))
    done = p.shutdown.stop(p.stop_services)
    for closer in (p.closers[0], *p.closers[2:]):
        closer.gone.callback(None)
    assert p.steps[-1] == "stop services"
    p.services_stopped.callback(None)
    assert fired(done) is None


class Recorded(Service):
    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def stopService(self) -> Any:
        self.steps.append("service stopped")
        return super().stopService()


def test_the_node_services_stop_only_after_the_clients_are_let_go() -> None:
    p = Parts()
    services = NodeServices()
    Recorded(p.steps).setServiceParent(services)
    services.stop_through(p.shutdown.stop)
    services.startService()
    stopped = services.stopService()
    assert "service stopped" not in p.steps
    for closer in p.closers:
        closer.gone.callback(None)
    assert p.steps[-1] == "service stopped" and not services.running
    assert fired(stopped) is None


def test_draining_turns_the_ready_probe_503_and_leaves_the_live_probe() -> None:
    from tests.http.harness import Http
    node = ClockNode()
    http = Http(node.web.resource())
    assert http.get("/health/ready").code == 200
    node.draining()
    ready = http.get("/health/ready")
    assert ready.code == 503 and ready.json()["reason"] == "shutting down"
    assert http.get("/health/live").code == 200


def test_a_second_signal_cuts_what_is_open_at_once() -> None:
    p = Parts(delay=5.0)
    started: list[Shutdown] = []
    p.shutdown.on_start = started.append
    done = p.shutdown.stop(p.stop_services)
    assert started == [p.shutdown]          # where the second signal is wired
    p.clock.advance(1.0)
    p.shutdown.hurry()                      # during the drain delay: no more waiting
    assert p.steps[1:6] == ["stop listening", "close connections", "close polls", "close sse",
                            "close ws"]
    assert [s for s in p.steps if s.startswith("abort")] == [
        "abort connections", "abort polls", "abort sse", "abort ws"]
    assert p.steps[-1] == "stop services"
    assert fired(done) is None              # nor for the services
    assert p.clock.seconds() == 1.0 and p.shutdown.cut
