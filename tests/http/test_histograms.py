"""/metrics' histograms (SPEC 21) on a Clock: a call's time per method, a
subscription's initial-state time per store, a change's time to its events'
delivery per transport; the process's series and the build info."""
from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.defer import Deferred

from pushengine import __version__
from pushengine.core.changes import Change
from pushengine.core.timings import OTHER, Histogram, Timings
from pushengine.stores.memory import MemoryStore
from tests.http.harness import ClockNode, Http, Rpc


def scrape(http: Http) -> dict[tuple[str, tuple], float]:
    text = http.get("/metrics").body.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"node": "test-node", **labels}.items()))))


def stream(i: int) -> Change:
    return Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-01-01T00:00:{i:02d}Z"})


def test_a_histogram_counts_prometheus_buckets() -> None:
    h = Histogram((0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 1.0, 20.0):
        h.observe(v)
    assert h.cumulative() == [(0.1, 2), (1.0, 4), (10.0, 4), (float("inf"), 5)]
    assert h.count == 5 and abs(h.sum - 21.65) < 1e-9


def test_timings_keep_a_bounded_label_set() -> None:
    t = Timings("method", (1.0,), known=("a", "b"))
    for name in ("a", "a", "b", "x", "y" * 1000, "z"):
        t.observe(name, 0.5)
    assert {k: h.count for k, h in t} == {"a": 2, "b": 1, OTHER: 3}


def test_call_times_per_method_a_parked_poll_with_its_wait() -> None:
    node = ClockNode("--max-timeout", "60")
    http = Http(node.web.resource())
    rpc = Rpc(http)
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 5)
    parked = rpc.send("session.get_events", sid, 30, 0)
    node.clock.advance(2.0)
    assert not parked.done
    node.feed.publish([stream(1)])
    assert parked.json()["result"][0]["obj"]["id"] == 1
    rpc.error("no.such.method")
    rpc.error("another.unknown")
    m = scrape(http)
    name = "pushengine_rpc_call_seconds"
    assert sample(m, f"{name}_count", method="session.get_events") == 1
    assert sample(m, f"{name}_sum", method="session.get_events") == 2.0
    assert sample(m, f"{name}_bucket", method="session.get_events", le="1.0") == 0
    assert sample(m, f"{name}_bucket", method="session.get_events", le="2.5") == 1
    assert sample(m, f"{name}_count", method="session.create") == 1
    assert sample(m, f"{name}_bucket", method="session.create", le="0.0001") == 1
    # unknown names are one series, whatever they are
    assert sample(m, f"{name}_count", method="other") == 2
    assert not any(k[0].startswith(name) and ("method", "no.such.method") in k[1] for k in m)


def test_a_cancelled_poll_is_not_timed() -> None:
    node = ClockNode("--max-timeout", "60")
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    parked = rpc.send("session.get_events", sid, 30, 0)
    parked.deferred.cancel()
    node.clock.advance(1)
    assert node.call_timings.by_label.get("session.get_events") is None


class SlowStore(MemoryStore):
    """The in-process store answering after ``delay`` seconds of the node's clock."""

    kind = "http"
    delay = 1.5
    later: Any = None

    def query(self, view, params, limit) -> Deferred:
        d: Deferred = Deferred()
        answer = super().query(view, params, limit)
        self.later.callLater(self.delay, lambda: answer.chainDeferred(d))
        return d


def test_initial_state_time_per_store() -> None:
    store = SlowStore()
    node = ClockNode(store=store)
    store.later = node.clock
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    pending = rpc.send("stream.subscribe_public_live", sid, 5)
    node.clock.advance(1.5)
    assert pending.json()["result"][0] == "PublicLiveStreamView(limit=5)"
    # a second subscriber shares the loaded view: no store read
    other = rpc("session.create")
    rpc("stream.subscribe_public_live", other, 5)
    m = scrape(rpc.http)
    name = "pushengine_initial_state_seconds"
    assert sample(m, f"{name}_count", store="http") == 2
    assert sample(m, f"{name}_sum", store="http") == 1.5
    assert sample(m, f"{name}_bucket", store="http", le="0.0001") == 1
    assert sample(m, f"{name}_bucket", store="http", le="1.0") == 1
    assert sample(m, f"{name}_bucket", store="http", le="2.5") == 2


def test_the_in_process_store_is_labelled_memory() -> None:
    node = ClockNode()
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 5)
    assert sample(scrape(rpc.http), "pushengine_initial_state_seconds_count",
                  store="memory") == 1


def test_delivery_time_per_transport_from_the_changes_arrival() -> None:
    node = ClockNode("--max-timeout", "60")
    http = Http(node.web.resource())
    rpc = Rpc(http)
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 5)
    parked = rpc.send("session.get_events", sid, 30, 0)
    node.feed.publish([stream(1)])                # the engine's apply_changes
    assert parked.done
    name = "pushengine_delivery_seconds"
    m = scrape(http)
    assert sample(m, f"{name}_count", transport="longpoll") == 1
    # a session whose poll is not parked has no delivery: nothing is timed
    node.feed.publish([stream(2)])
    assert sample(scrape(http), f"{name}_count", transport="longpoll") == 1
    # the time counts from when the changes arrived (``flush(since)``)
    sessions = node.engine.sessions
    parked = rpc.send("session.get_events", sid, 30, 1)
    assert parked.done                            # event 2 was waiting
    parked = rpc.send("session.get_events", sid, 30, 2)
    node.engine.registry.apply(stream(3))
    sessions.flush(since=node.clock.seconds() - 0.003)
    assert parked.done
    m = scrape(http)
    assert sample(m, f"{name}_count", transport="longpoll") == 2
    assert sample(m, f"{name}_bucket", transport="longpoll", le="0.0025") == 1
    assert sample(m, f"{name}_bucket", transport="longpoll", le="0.005") == 2


def test_delivery_labels_are_the_transports() -> None:
    class Fake:
        holds_session = True

        def __init__(self, name: str | None) -> None:
            if name is not None:
                self.transport_name = name

        def notify(self, session) -> None:
            pass

        def close(self) -> None:
            pass
    node = ClockNode()
    sessions = node.engine.sessions
    for name in ("sse", "websocket", "carrier-pigeon", None):
        session = sessions.create()
        sessions.attach(session, Fake(name), None)
        sessions.dirty.add(session)
    sessions.flush(since=node.clock.seconds())
    assert {k: h.count for k, h in node.delivery_timings} == {
        "sse": 1, "websocket": 1, "other": 2}


def test_build_info_and_process_series() -> None:
    node = ClockNode()
    m = scrape(Http(node.web.resource()))
    assert sample(m, "pushengine_build_info", version=__version__) == 1
    assert sample(m, "process_resident_memory_bytes") > 0
    assert sample(m, "process_open_fds") > 0
    assert sample(m, "process_cpu_seconds_total") > 0
