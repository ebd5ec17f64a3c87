"""``/health/live`` and ``/health/ready`` on both HTTP fronts (SPEC 21), on a Clock.

Live: 200 while the node answers HTTP. Ready: 200 while the change feed is
up, or has been down for less than ``--ready-grace``; 503 after that, when
the feed has never been up, and from the moment shutdown begins.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from pushengine.app.tap import Options
from tests.http.harness import ClockNode, Raw, http_request

FRONTS = ["fast", "twisted"]


class SwitchFeed:
    """A change feed whose state the test sets."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.sink: Any = None

    def start(self, sink: Any) -> None:
        self.sink = sink

    def stop(self) -> None:
        return None

    def health(self) -> dict:
        return {"up": self.up, "kind": "switch"}

    def stats(self) -> dict:
        return {"connected": int(self.up)}

    def publish(self, changes: Any) -> None:
        self.sink.apply_changes(changes)


class Probe:
    def __init__(self, front: str, *argv: str, up: bool = True) -> None:
        self.feed = SwitchFeed(up)
        self.node = ClockNode("--http", front, *argv, feed=self.feed)
        self.factory = self.node.http_factory()

    def get(self, path: str, method: str = "GET"):
        raw = Raw(self.factory)
        raw.send(http_request(method, path, b""))
        self.node.clock.advance(0)
        (reply,) = raw.responses()
        return reply

    def ready(self) -> tuple[int, Any]:
        reply = self.get("/health/ready")
        return reply.code, json.loads(reply.body)

    def live(self) -> int:
        return self.get("/health/live").code


@pytest.mark.parametrize("front", FRONTS)
def test_probes_answer_small_json_and_no_caching(front: str) -> None:
    p = Probe(front)
    for path in ("/health/live", "/health/ready"):
        reply = p.get(path)
        assert reply.code == 200
        assert json.loads(reply.body) == {"status": "ok"}
        assert reply.header("content-type").startswith("application/json")
        assert reply.header("cache-control") == "no-store"
        head = p.get(path, "HEAD")
        assert head.code == 200 and head.body == b""


@pytest.mark.parametrize("front", FRONTS)
def test_ready_rides_out_a_feed_outage_within_the_grace(front: str) -> None:
    p = Probe(front, "--ready-grace", "10")
    assert p.ready() == (200, {"status": "ok"})
    p.feed.up = False
    assert p.ready()[0] == 200               # seen down now: the grace starts
    p.node.clock.advance(9.5)
    assert p.ready() == (200, {"status": "ok"})
    assert p.live() == 200
    p.node.clock.advance(1)
    code, body = p.ready()
    assert code == 503
    assert body["status"] == "unavailable"
    assert "down for 10 s" in body["reason"]
    assert p.live() == 200                   # the process serves: live all along
    # /health keeps its details and says both
    health = p.get("/health")
    report = json.loads(health.body)
    assert health.code == 503 and report["live"] is True and report["ready"] is False
    assert report["ready_reason"] == body["reason"] and report["feed"]["up"] is False
    p.feed.up = True                         # back: ready at once
    assert p.ready() == (200, {"status": "ok"})
    assert json.loads(p.get("/health").body)["ready"] is True
    p.feed.up = False                        # a new outage has a new grace
    assert p.ready()[0] == 200
    p.node.clock.advance(5)
    assert p.ready()[0] == 200


@pytest.mark.parametrize("front", FRONTS)
def test_the_grace_counts_from_the_periodic_sample(front: str) -> None:
    """The node samples the feed each second: an outage no probe saw still
    counts from when the sample saw it."""
    p = Probe(front, "--ready-grace", "10")
    p.feed.up = False
    p.node.readiness.sample()
    p.node.clock.advance(30)
    assert p.ready()[0] == 503


@pytest.mark.parametrize("front", FRONTS)
def test_zero_grace_is_not_ready_as_soon_as_the_feed_is_down(front: str) -> None:
    p = Probe(front, "--ready-grace", "0")
    assert p.ready()[0] == 200
    p.feed.up = False
    assert p.ready()[0] == 503


@pytest.mark.parametrize("front", FRONTS)
def test_a_feed_never_up_is_not_ready(front: str) -> None:
    p = Probe(front, "--ready-grace", "10", up=False)
    code, body = p.ready()
    assert code == 503 and "not been up" in body["reason"]
    assert p.live() == 200
    p.feed.up = True
    assert p.ready()[0] == 200


@pytest.mark.parametrize("front", FRONTS)
def test_draining_is_not_ready_at_once(front: str) -> None:
    p = Probe(front)
    assert p.ready()[0] == 200
    p.node.draining()
    assert p.ready() == (503, {"status": "unavailable", "reason": "shutting down"})
    assert p.live() == 200
    p.node.clock.advance(100)
    assert p.ready()[0] == 503               # for good, feed up or not
    assert json.loads(p.get("/health").body)["ready"] is False


def test_ready_grace_is_an_option_with_its_environment_variable() -> None:
    o = Options(environ={"PUSHENGINE_READY_GRACE": "7.5"})
    o.parseOptions([])
    assert o["ready-grace"] == 7.5
    o = Options(environ={})
    o.parseOptions([])
    assert o["ready-grace"] == 30.0
    for bad in ("-1", "nan", "inf", "x"):
        with pytest.raises(Exception):
            Options(environ={}).parseOptions(["--ready-grace", bad])
