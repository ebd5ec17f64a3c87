"""Chromium's own WebSocket offering the subprotocol ``pushengine.jsonrpc``
(SPEC 17): a browser refuses a handshake whose offered subprotocol is not
answered (1006), so this is the whole flow on a bare ``new WebSocket``: create
a session, subscribe, receive a published change as an event (compressed:
Chromium offers permessage-deflate)."""
from __future__ import annotations

import pytest

from tests.browser.test_examples import stream
from tests.waiting import wait_until

pytestmark = [pytest.mark.service, pytest.mark.e2e]

FLOW = """async (port) => {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/api/ws`, ["pushengine.jsonrpc"]);
  window.got = { answers: {}, events: [], protocol: null, closed: null };
  ws.onclose = (e) => { window.got.closed = e.code; };
  ws.onmessage = (m) => {
    const v = JSON.parse(m.data);
    if (v.method === "events") window.got.events.push(...v.params);
    else window.got.answers[v.id] = v;
  };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  window.got.protocol = ws.protocol;
  window.got.extensions = ws.extensions;
  window.ws = ws;
  const call = (id, method, params) => new Promise((resolve) => {
    ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    const wait = () => window.got.answers[id] ? resolve(window.got.answers[id]) : setTimeout(wait, 5);
    wait();
  });
  const sid = (await call(1, "session.create", [])).result;
  return (await call(2, "stream.subscribe_public_live", [sid, 10])).result[0];
}"""


def test_chromium_offering_the_subprotocol_runs_the_flow(engine, page):
    page.goto(f"{engine.base}/health")
    key = page.evaluate(FLOW, engine.port)
    assert page.evaluate("() => window.got.protocol") == "pushengine.jsonrpc"
    # Chromium offers permessage-deflate: its events arrive compressed
    assert page.evaluate("() => window.got.extensions").startswith("permessage-deflate")
    engine.upsert(stream(4242))
    wait_until(lambda: page.evaluate(
        "() => window.got.events.some((e) => e.obj && e.obj.id === 4242)"), 10)
    event = page.evaluate("() => window.got.events.find((e) => e.obj && e.obj.id === 4242)")
    assert event["key"] == key and page.evaluate("() => window.got.closed") is None
