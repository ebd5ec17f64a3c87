// Every call and wait is await-able and cancelled by an AbortSignal: the
// Deferred's own cancel, the fetch aborted, the socket's pending call dropped.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Deferred, CancelledError, TimeoutError, abortable, succeed } from "../../static/js/deferred.js";
import { Api } from "../../static/js/api.js";
import { Session } from "../../static/js/session.js";
import { Events, EventsStoppedError } from "../../static/js/events.js";
import { SUBPROTOCOL } from "../../static/js/transport-ws.js";
import { View } from "../../static/js/view.js";
import { ViewList } from "../../static/js/viewlist.js";
import { FakeEngine, settle } from "./fakeengine.mjs";
import { fakeNetwork } from "./fakestreams.mjs";
import { eventsHooks } from "./eventshooks.mjs";

const running = eventsHooks();

const LIVE = "stream.subscribe_public_live";
const isCancelled = (reason) => (e) => {
  assert.ok(e instanceof CancelledError, `${e}`);
  if (reason !== undefined) assert.equal(e.cause, reason);
  return true;
};

function handler() {
  const list = new ViewList({ order: "-n" });
  return {
    list, events: [],
    setState(state) { list.setState(state); },
    apply(ev) { this.events.push(ev); list.apply(ev); },
  };
}

// -- abortable -----------------------------------------------------------------

test("abortable: the signal cancels the Deferred, its canceller runs, the reason is the cause", async () => {
  let cancelled = 0;
  const d = new Deferred(() => { cancelled += 1; });
  const controller = new AbortController();
  assert.equal(abortable(d, controller.signal), d);
  const reason = new Error("the user left");
  controller.abort(reason);
  assert.equal(cancelled, 1);
  await assert.rejects(d, isCancelled(reason));
});

test("abortable: an aborted signal cancels at once; without a signal nothing changes", async () => {
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(abortable(new Deferred(), controller.signal), isCancelled());
  const d = abortable(new Deferred(), null);
  d.callback(3);
  assert.equal(await d, 3);
});

test("abortable: a Deferred that fired first lets go of the signal", async () => {
  const controller = new AbortController();
  let listeners = 0;
  const signal = controller.signal;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = (...a) => { listeners += 1; add(...a); };
  signal.removeEventListener = (...a) => { listeners -= 1; remove(...a); };
  const d = abortable(succeed(1), signal);
  assert.equal(listeners, 0);
  assert.equal(await d, 1);
  controller.abort(); // nothing left to cancel
  assert.equal(d.result, 1);
});

// -- Api -----------------------------------------------------------------------

test("Api.call with a signal: the fetch is aborted and the call fails with CancelledError", async () => {
  let seen = null;
  const fetch = (url, init) => new Promise((resolve, reject) => {
    seen = init.signal;
    init.signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
  });
  const api = new Api({ fetch, timeout: 0 });
  const controller = new AbortController();
  const call = api.call("session.get_events", ["sid", 30, 0], { signal: controller.signal });
  await settle(1);
  assert.equal(seen.aborted, false);
  controller.abort("gone");
  assert.equal(seen.aborted, true, "the request itself is aborted");
  await assert.rejects(call, isCancelled("gone"));
});

// -- Session -------------------------------------------------------------------

test("Session: await open, subscribe and call; a signal cancels the call in flight", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const sid = await session.open();
  assert.equal(sid, "sid1");
  const h = handler();
  engine.states.set(FakeEngine.keyOf(LIVE, [10]), [{ id: 1, n: 1 }]);
  const sub = await session.subscribe(LIVE, [10], h);
  assert.equal(sub.key, FakeEngine.keyOf(LIVE, [10]));
  assert.deepEqual(h.list.items, [{ id: 1, n: 1 }]);

  // A subscribe whose answer is held: aborting it fails it, the subscription is not made here.
  const release = engine.holdAnswers("stream.subscribe_user");
  const controller = new AbortController();
  const pending = session.subscribe("stream.subscribe_user", [7, 10], handler(), { signal: controller.signal });
  await settle(1);
  controller.abort();
  await assert.rejects(pending, isCancelled());
  release();
  await settle();
  assert.equal(session.subscriptions.length, 1);
  assert.equal(session.subscribing, 0);

  // A signal aborted before the call: nothing is sent.
  const before = engine.calls.length;
  const aborted = AbortSignal.abort();
  await assert.rejects(session.call("stats.online", [], { signal: aborted }), isCancelled());
  await assert.rejects(session.authorize("jwt", { signal: aborted }), isCancelled());
  await settle();
  assert.equal(engine.calls.length, before);
});

test("Session.open with a signal cancels only that wait: the session is still made", async () => {
  const engine = new FakeEngine();
  const release = engine.holdAnswers(null); // session.create answers wait
  const session = new Session(engine);
  const controller = new AbortController();
  const first = session.open({ signal: controller.signal });
  const second = session.open();
  controller.abort();
  await assert.rejects(first, isCancelled());
  release();
  assert.equal(await second, "sid1");
  assert.equal(session.sid, "sid1");
});

// -- WebSocket: the pending call dropped ---------------------------------------

async function wsSetup(wsOptions = {}) {
  const engine = new FakeEngine();
  engine.channel = null;
  const net = fakeNetwork(engine);
  const session = new Session(engine);
  const events = new Events(session, {
    transport: "ws", base: 1, max: 4, random: () => 1,
    WebSocket: net.WebSocket,
    ws: { url: "ws://engine.test/api/ws", openTimeout: 500, attachTimeout: 500, ...wsOptions },
  });
  running.push(events);
  return { engine, net, session, events };
}

test("ws: a call over the socket given a signal is dropped from the socket's pending calls", async () => {
  const { engine, net, session, events } = await wsSetup();
  events.start();
  assert.equal(await events.connected(), "ws");
  const release = engine.holdAnswers("stream.subscribe_user");
  const controller = new AbortController();
  const pending = session.subscribe("stream.subscribe_user", [7, 10], handler(), { signal: controller.signal });
  await settle(2);
  assert.ok(net.sockets[0].sent.some((c) => c.method === "stream.subscribe_user"), "sent over the socket");
  assert.equal(events.current.pendingCalls, 1);
  controller.abort();
  await assert.rejects(pending, isCancelled());
  assert.equal(events.current.pendingCalls, 0, "the pending call was dropped");
  release();
  await settle();
  assert.equal(session.subscriptions.length, 0, "its late answer is ignored");
});

test("ws: the subprotocol is offered unless offerSubprotocol is false", async () => {
  const offering = await wsSetup();
  offering.events.start();
  await offering.events.connected();
  assert.deepEqual(offering.net.sockets[0].protocols, [SUBPROTOCOL]);
  assert.equal(SUBPROTOCOL, "pushengine.jsonrpc");
  const plain = await wsSetup({ offerSubprotocol: false });
  plain.events.start();
  await plain.events.connected();
  assert.equal(plain.net.sockets[0].argumentCount, 1, "new WebSocket(url): nothing offered");
});

test("Events takes the WebSocket and EventSource classes as options of its own", () => {
  const engine = new FakeEngine();
  const net = fakeNetwork(engine);
  const api = { url: "http://engine.test/api/jsonrpc", call: (...a) => engine.call(...a) };
  const session = new Session(api);
  const events = new Events(session, { WebSocket: net.WebSocket, EventSource: net.EventSource });
  assert.equal(events.options.ws.WebSocket, net.WebSocket);
  assert.equal(events.options.sse.EventSource, net.EventSource);
  assert.deepEqual(events.candidates(), ["ws", "sse", "longpoll"]);
  const none = new Events(session, {});
  assert.deepEqual(none.candidates(), ["longpoll"], "node without them: long-polling only");
  const own = new Events(session, { WebSocket: net.WebSocket, ws: { WebSocket: null } });
  assert.equal(own.options.ws.WebSocket, null, "the transport's own option wins");
});

// -- Events: connected, next, iterate ------------------------------------------

async function longpollSetup() {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const h = handler();
  const sub = await session.subscribe(LIVE, [10], h);
  const events = new Events(session, { transport: "longpoll", base: 1, max: 4 });
  running.push(events);
  return { engine, session, h, sub, events };
}

test("events.connected() fires once connected (at once after), fails when the events stop first", async () => {
  const { events } = await longpollSetup();
  const early = events.connected();
  events.start();
  assert.equal(await early, "longpoll");
  assert.equal(await events.connected(), "longpoll", "already connected");
  events.stop();
  const stopped = events.connected();
  events.start();
  events.stop();
  await assert.rejects(stopped, (e) => e instanceof EventsStoppedError);
  const controller = new AbortController();
  const aborted = events.connected({ signal: controller.signal });
  controller.abort();
  await assert.rejects(aborted, isCancelled());
  await assert.rejects(events.connected({ timeout: 5 }), (e) => e instanceof TimeoutError);
});

test("events.next() gives the next event (of a key, through a filter); a signal cancels it", async () => {
  const { engine, sub, events } = await longpollSetup();
  events.start();
  await events.connected();
  const next = events.next();
  const third = events.next({ filter: (ev) => ev.seq === 3 });
  const other = events.next({ key: "no such key" });
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
  engine.push(sub.key, { action: "delete", obj: { id: 1, n: 1 } });
  assert.deepEqual(await next, { key: sub.key, seq: 1, action: "insert", obj: { id: 1, n: 1 } });
  assert.equal((await third).action, "delete");
  const controller = new AbortController();
  const cancelled = abortable(other, controller.signal);
  controller.abort();
  await assert.rejects(cancelled, isCancelled());
  await assert.rejects(events.next({ signal: AbortSignal.abort() }), isCancelled());
});

test("events.iterate(): every event in order, kept while the loop body waits; ends on abort", async () => {
  const { engine, sub, events } = await longpollSetup();
  events.start();
  await events.connected();
  const controller = new AbortController();
  const seen = [];
  const loop = (async () => {
    for await (const ev of events.iterate({ key: sub.key, signal: controller.signal })) {
      seen.push(ev.seq);
      await new Promise((r) => setTimeout(r, 5)); // a slow body: later events wait for it
      if (seen.length === 4) controller.abort();
    }
    return "ended";
  })();
  for (let i = 1; i <= 6; i++) engine.push(sub.key, { action: "insert", obj: { id: i, n: i } });
  assert.equal(await loop, "ended");
  assert.deepEqual(seen, [1, 2, 3, 4]);
});

test("for await over Events ends when the events stop; break lets go of the listeners", async () => {
  const { engine, sub, events } = await longpollSetup();
  events.start();
  await events.connected();
  const seen = [];
  const loop = (async () => {
    for await (const ev of events) seen.push(ev.seq);
  })();
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await new Promise((r) => setTimeout(r, 10));
  events.stop();
  await loop;
  assert.deepEqual(seen, [1]);
  const listeners = () => events._listeners.get("event").size;
  const before = listeners();
  events.start();
  setTimeout(() => engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } }), 5);
  for await (const ev of events.iterate()) { // eslint-disable-line no-unreachable-loop
    assert.equal(ev.seq, 2);
    break;
  }
  assert.equal(listeners(), before);
});

// -- View.until ----------------------------------------------------------------

test("view.until(): fires when the items pass the predicate; a signal or a timeout cancels it", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const view = new View({ session, method: LIVE, limit: 10, order: "-n" });
  const ready = view.until();
  const two = view.until((items) => items.length === 2);
  const sub = await view.subscribe();
  assert.deepEqual(await ready, []);
  view.apply({ key: sub.key, seq: 1, action: "insert", obj: { id: 1, n: 1 } });
  assert.equal(two.called, false);
  view.apply({ key: sub.key, seq: 2, action: "insert", obj: { id: 2, n: 2 } });
  assert.deepEqual((await two).map((o) => o.id), [2, 1]);
  assert.deepEqual((await view.until((items) => items.length === 2)).length, 2, "true now: at once");
  const controller = new AbortController();
  const never = view.until(() => false, { signal: controller.signal });
  controller.abort();
  await assert.rejects(never, isCancelled());
  await assert.rejects(view.until(() => false, { timeout: 5 }), (e) => e instanceof TimeoutError);
  assert.equal(view._listeners.get("change").size, 0, "waits let go of the view");
  await assert.rejects(view.until(() => { throw new Error("bad predicate"); }), /bad predicate/);
});
