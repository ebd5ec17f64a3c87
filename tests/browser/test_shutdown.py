"""A page whose node is stopped with SIGTERM (SPEC 21), in headless Chromium.

Two nodes share a Redis of the test's own; the page reaches them through a
TCP forwarder standing for the balancer. When node A is to stop, the
forwarder sends new connections to node B (as a balancer does once A's
``/health/ready`` says 503) and A gets SIGTERM: its poll is answered ``[]``,
its SSE stream ends with ``going-away``, its WebSocket closes with 1001.
The page comes back at once through the forwarder, to B, where its session
resumes: same session id, the list as before, later changes shown, and
nothing the page would call an error (no "retrying", nothing in its console).
"""
from __future__ import annotations

import signal

import pytest

from tests.browser.conftest import EngineProcess
from tests.browser.test_examples import open_page, stream, wait_ids
from tests.cluster.conftest import RedisProcess
from tests.e2e.test_production import Forwarder

TRANSPORTS = ["ws", "sse", "longpoll"]


class Balanced:
    """What the page is given as its engine: the forwarder's address."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"


@pytest.fixture
def redis():
    server = RedisProcess().start()
    yield server
    server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_page_resumes_on_another_node_when_its_node_stops(tmp_path, page, redis, transport):
    url = f"redis://127.0.0.1:{redis.port}/0"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = EngineProcess(tmp_path / "a", "--redis", url, "--node-id", "node-a")
    b = EngineProcess(tmp_path / "b", "--redis", url, "--node-id", "node-b")
    forwarder = None
    try:
        a.start()
        b.start()
        forwarder = Forwarder(("127.0.0.1", a.port))
        for node in (a, b):
            node.upsert(stream(1), stream(2))
        open_page(page, Balanced(forwarder.port), f"/examples/live.html?transport={transport}")
        wait_ids(page, [2, 1])
        page.evaluate("() => { window.__states = [];"
                      " window.pushengine.events.on('state', (s) => window.__states.push(s)); }")
        sid = page.evaluate("() => window.pushengine.session.sid")

        forwarder.target = ("127.0.0.1", b.port)   # the balancer took A out
        a.process.send_signal(signal.SIGTERM)
        assert a.process.wait(15) in (0, -signal.SIGTERM)

        b.upsert(stream(3))
        wait_ids(page, [3, 2, 1], timeout=20)
        assert page.evaluate("() => window.pushengine.session.sid") == sid, "the session resumed"
        states = page.evaluate("() => window.__states")
        assert "retrying" not in states, states
        if transport != "longpoll":         # (a poll answered [] is no change of state)
            assert states[-1] == "connected", states
        assert page.evaluate("() => window.pushengine.events.transport") == transport
        page.watch.check()
    finally:
        if forwarder is not None:
            forwarder.cut()
        a.stop()
        b.stop()
    for node in (a, b):
        log = node.log_text()
        assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]
