// The event transports (transport-*.js) and their choice (events.js): fake
// transports for the chooser's rules, and the real WebSocket, SSE and
// long-poll transports against a fake engine and fake browser streams.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Session } from "../../static/js/session.js";
import {
  Events, TRANSPORTS, parseTransport, unusableTransports,
} from "../../static/js/events.js";
import { Transport, TransportError, Dispatcher, apiBase } from "../../static/js/transport.js";
import { socketUrl } from "../../static/js/transport-ws.js";
import { ViewList } from "../../static/js/viewlist.js";
import { FakeEngine, settle } from "./fakeengine.mjs";
import { fakeNetwork } from "./fakestreams.mjs";
import { eventsHooks } from "./eventshooks.mjs";

const running = eventsHooks();

function handler() {
  const list = new ViewList({ order: "-n" });
  return {
    list,
    states: 0,
    events: [],
    setState(state) { this.states += 1; list.setState(state); },
    apply(ev) { this.events.push(ev); list.apply(ev); },
  };
}

const LIVE = "stream.subscribe_public_live";
const ids = (h) => h.list.items.map((o) => o.id);
const wait = (ms) => new Promise((r) => setTimeout(r, ms));

/** Wait (in small steps) until `predicate()` holds. */
async function until(predicate, what = "the condition", ms = 2000) {
  const end = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await wait(2);
  }
}

// -- the chooser, with fake transports ---------------------------------------------

/** Fake transport classes whose behaviour a test sets per name. */
function fakeTransports(behaviour) {
  const made = [];
  const make = (name) => class extends Transport {
    get name() { return name; }
    static available() { return behaviour[name] !== "missing"; }
    _begin() {
      made.push(this);
      this.attempts = (this.attempts ?? 0) + 1;
      const b = behaviour[name];
      setTimeout(() => {
        if (!this.running) return;
        if (b === "works") this._connected();
        else if (b === "breaks") this._transportFailed(new TransportError(`${name} is broken here`));
        else if (b === "works-then-breaks") {
          if (this.attempts === 1) this._connected();
          else this._transportFailed(new TransportError(`${name} broke`));
        }
      }, 0);
    }
  };
  const classes = Object.fromEntries(TRANSPORTS.map((n) => [n, make(n)]));
  return { classes, made };
}

function chooser(behaviour, options = {}) {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const { classes, made } = fakeTransports(behaviour);
  const events = new Events(session, { transports: classes, base: 1, max: 2, ...options });
  running.push(events);
  const log = { transports: [], states: [], fallbacks: [] };
  events.on("transport", (n) => log.transports.push(n));
  events.on("state", (s) => log.states.push(s));
  events.on("fallback", (from, to) => log.fallbacks.push([from, to]));
  return { events, session, made, log };
}

test("automatic choice: WebSocket first", async () => {
  const { events, log } = chooser({ ws: "works", sse: "works", longpoll: "works" });
  assert.equal(events.mode, "auto");
  events.start();
  await settle();
  assert.equal(events.transport, "ws");
  assert.deepEqual(log.transports, ["ws"]);
  assert.equal(events.state, "connected");
});

test("a transport that fails before it worked gives way to the next: ws -> sse -> longpoll", async () => {
  const { events, log } = chooser({ ws: "breaks", sse: "breaks", longpoll: "works" });
  events.start();
  await settle(10);
  assert.deepEqual(log.transports, ["ws", "sse", "longpoll"]);
  assert.deepEqual(log.fallbacks, [["ws", "sse"], ["sse", "longpoll"]]);
  assert.equal(events.transport, "longpoll");
  assert.equal(events.state, "connected");
  assert.ok(!log.states.includes("stopped"), "no 'stopped' while falling back");
  assert.deepEqual(events.given.map(([n]) => n), ["ws", "sse"]);
});

test("a transport given up is remembered for the page's life", async () => {
  const first = chooser({ ws: "breaks", sse: "works", longpoll: "works" });
  first.events.start();
  await settle(10);
  assert.equal(first.events.transport, "sse");
  assert.deepEqual(unusableTransports(), ["ws"]);
  // Another Events on the same page does not try WebSocket again.
  const second = chooser({ ws: "works", sse: "works", longpoll: "works" });
  second.events.start();
  await settle();
  assert.deepEqual(second.log.transports, ["sse"]);
  // Unless told to forget (or not to remember).
  const third = chooser({ ws: "works", sse: "works", longpoll: "works" }, { remember: false });
  third.events.start();
  await settle();
  assert.equal(third.events.transport, "ws");
});

test("a transport that worked once is kept when it fails later: back-off, no fallback", async () => {
  const { events, made, log } = chooser({ ws: "works-then-breaks", sse: "works", longpoll: "works" });
  events.start();
  await settle();
  assert.equal(events.state, "connected");
  const ws = made[0];
  ws._retry(new Error("the engine went away")); // as a socket closing does
  await settle(10);
  assert.equal(events.transport, "ws");
  assert.deepEqual(log.transports, ["ws"]);
  assert.ok(log.states.includes("retrying"));
  assert.ok(ws.attempts >= 2);
});

test("a forced transport is never given up", async () => {
  const { events, made, log } = chooser({ ws: "breaks", sse: "works", longpoll: "works" }, { transport: "ws" });
  events.start();
  await settle(20);
  assert.equal(events.mode, "ws");
  assert.deepEqual(log.transports, ["ws"]);
  assert.equal(events.transport, "ws");
  assert.equal(events.state, "retrying");
  assert.ok(made.length >= 2, "it tries again after the back-off");
  assert.deepEqual(unusableTransports(), []);
});

test("each transport can be forced", async () => {
  for (const name of TRANSPORTS) {
    const { events } = chooser({ ws: "works", sse: "works", longpoll: "works" }, { transport: name });
    events.start();
    await settle();
    assert.equal(events.transport, name);
    assert.equal(events.state, "connected");
    events.stop();
    assert.equal(events.state, "stopped");
  }
});

test("transports missing from the environment are skipped", async () => {
  const { events, log } = chooser({ ws: "missing", sse: "works", longpoll: "works" });
  events.start();
  await settle();
  assert.deepEqual(log.transports, ["sse"]);
  // Without WebSocket, EventSource and an Api URL (node, a custom Api): long-polling.
  const engine = new FakeEngine();
  const plain = new Events(new Session(engine), { ws: { WebSocket: undefined }, sse: { EventSource: undefined } });
  assert.deepEqual(plain.candidates(), ["longpoll"]);
});

test("parseTransport and the transport option", () => {
  assert.equal(parseTransport("ws"), "ws");
  assert.equal(parseTransport("WebSocket"), "ws");
  assert.equal(parseTransport("sse"), "sse");
  assert.equal(parseTransport("EventSource"), "sse");
  assert.equal(parseTransport("longpoll"), "longpoll");
  assert.equal(parseTransport("long-polling"), "longpoll");
  assert.equal(parseTransport(""), "auto");
  assert.equal(parseTransport(null), "auto");
  assert.equal(parseTransport("carrier pigeon"), "auto");
  const session = new Session(new FakeEngine());
  assert.throws(() => new Events(session, { transport: "pigeon" }), TypeError);
  assert.equal(new Events(session, { transport: "auto" }).mode, "auto");
  assert.equal(new Events(session, { transport: "sse" }).mode, "sse");
});

test("URLs beside the JSON-RPC endpoint", () => {
  assert.equal(apiBase("/api/jsonrpc"), "/api/");
  assert.equal(apiBase("https://push.example/v2/api/jsonrpc?x=1"), "https://push.example/v2/api/");
  assert.equal(socketUrl("/api/ws", "http://h:8080/examples/live.html"), "ws://h:8080/api/ws");
  assert.equal(socketUrl("/api/ws?apikey=k", "https://h/examples/"), "wss://h/api/ws?apikey=k");
  assert.equal(socketUrl("wss://other/ws"), "wss://other/ws");
});

// -- the real transports against a fake engine ---------------------------------------

/** A session with one subscription, and Events over `transport` through fake streams. */
async function setup(transport, { engineOptions = {}, options = {}, rpc = false } = {}) {
  const engine = new FakeEngine();
  Object.assign(engine, engineOptions);
  if (rpc) engine.channel = null;
  const net = fakeNetwork(engine);
  const session = new Session(engine);
  const h = handler();
  const sub = await session.subscribe(LIVE, [10], h);
  const events = new Events(session, {
    transport, base: 1, max: 4, random: () => 1,
    ws: { url: "ws://engine.test/api/ws", WebSocket: net.WebSocket, openTimeout: 500, attachTimeout: 500 },
    sse: { url: "/api/events", EventSource: net.EventSource, fetch: net.fetch },
    ...options,
  });
  running.push(events);
  const states = [];
  events.on("state", (s, info) => states.push(info.delay === undefined ? s : `${s} ${info.delay}`));
  return { engine, net, session, h, sub, events, states };
}

for (const transport of TRANSPORTS) {
  test(`${transport}: events reach the view in order, duplicates skipped`, async () => {
    const { engine, sub, h, events } = await setup(transport);
    events.start();
    await until(() => events.state === "connected", "connected");
    engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
    engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
    engine.push(sub.key, { action: "update", obj: { id: 1, n: 3 }, old: { id: 1, n: 1 } });
    await until(() => events.lastSeq === 3, "seq 3");
    assert.deepEqual(ids(h), [1, 2]);
    engine.push(sub.key, { action: "delete", obj: { id: 2, n: 2 } });
    await until(() => events.lastSeq === 4, "seq 4");
    assert.deepEqual(ids(h), [1]);
    assert.equal(events.transport, transport);
    // The same events again (a resent answer, a replayed stream): skipped.
    events.dispatch([{ key: sub.key, seq: 2, action: "insert", obj: { id: 2, n: 2 } }]);
    assert.deepEqual(ids(h), [1]);
    assert.deepEqual(h.events.map((e) => e.seq), [1, 2, 3, 4]);
  });

  test(`${transport}: the engine restarts: back-off, a new session, the view restored`, async () => {
    const { engine, sub, h, session, events, states } = await setup(transport);
    events.start();
    await until(() => events.state === "connected", "connected");
    engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
    await until(() => events.lastSeq === 1, "seq 1");
    engine.down = true;
    engine.restart();
    await until(() => events.state === "retrying", "retrying");
    await wait(20);
    engine.states.set(sub.key, [{ id: 7, n: 7 }]);
    engine.down = false;
    await until(() => session.sid === "sid2" && events.state === "connected", "a new session", 3000);
    assert.deepEqual(ids(h), [7], "the new state replaced the old");
    assert.equal(h.states, 2);
    engine.push(sub.key, { action: "insert", obj: { id: 8, n: 8 } });
    await until(() => events.lastSeq === 1 && ids(h).length === 2, "seq 1 of the new session");
    assert.deepEqual(ids(h), [8, 7]);
    assert.equal(events.transport, transport, "the transport that worked is kept");
    const delays = states.filter((s) => s.startsWith("retrying")).map((s) => Number(s.split(" ")[1]));
    assert.ok(delays.length >= 1);
    assert.deepEqual(delays.slice(0, 3), [1, 2, 4].slice(0, Math.min(3, delays.length)), "exponential back-off");
  });

  test(`${transport}: destroying the session stops it`, async () => {
    const { engine, session, events } = await setup(transport);
    events.start();
    await until(() => events.state === "connected", "connected");
    await session.destroy();
    await settle();
    assert.equal(events.state, "stopped");
    assert.equal(events.running, false);
    assert.equal(engine.sessions.size, 0);
    assert.deepEqual(engine.streams, []);
  });
}

test("ws: a cut socket is opened again and attached after the last seq: nothing lost, nothing twice", async () => {
  const { engine, net, sub, h, events } = await setup("ws");
  events.start();
  await until(() => events.state === "connected", "connected");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
  await until(() => events.lastSeq === 2, "seq 2");
  net.sockets[0].cut();
  await until(() => events.state === "retrying", "retrying");
  engine.push(sub.key, { action: "insert", obj: { id: 3, n: 3 } }); // while away: queued
  await until(() => events.state === "connected", "connected again");
  await until(() => events.lastSeq === 3, "seq 3");
  assert.equal(net.sockets.length, 2);
  const attach = net.sockets[1].sent.find((c) => c.method === "session.attach");
  assert.deepEqual(attach.params, ["sid1", 2], "resumed after the last seq received");
  assert.deepEqual(h.events.map((e) => e.seq), [1, 2, 3]);
  assert.deepEqual(ids(h), [3, 2, 1]);
});

test("ws: error 1001 on attach: a new session on the same socket", async () => {
  const { engine, net, sub, h, session, events } = await setup("ws");
  engine.restart(); // before the socket attaches: the session is unknown
  engine.states.set(sub.key, [{ id: 5, n: 5 }]);
  events.start();
  await until(() => events.state === "connected" && session.sid === "sid2", "attached to sid2");
  assert.equal(net.sockets.length, 1, "the socket was kept");
  assert.deepEqual(net.sockets[0].sent.filter((c) => c.method === "session.attach").map((c) => c.params),
    [["sid1", 0], ["sid2", 0]]);
  assert.deepEqual(ids(h), [5]);
  engine.push(sub.key, { action: "insert", obj: { id: 6, n: 6 } });
  await until(() => ids(h).length === 2, "the event");
  assert.deepEqual(ids(h), [6, 5]);
});

test("ws: calls go over the socket while it carries the session", async () => {
  const { engine, net, session, events } = await setup("ws", { rpc: true });
  events.start();
  await until(() => events.state === "connected", "connected");
  assert.equal(engine.channel, events.current, "the transport took the Api's channel");
  const h2 = handler();
  const before = engine.calls.length;
  const sub2 = await session.subscribe("stream.subscribe_user", [7, 10], h2);
  assert.ok(sub2.key);
  const overSocket = net.sockets[0].sent.map((c) => c.method);
  assert.ok(overSocket.includes("stream.subscribe_user"), overSocket.join());
  assert.equal(engine.calls.slice(before).filter((c) => c.options.via !== "ws").length, 0, "no HTTP call");
  engine.push(sub2.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => h2.list.items.length === 1, "the event of the new subscription");
  // session.destroy stays HTTP (it must work while the page unloads).
  await session.destroy();
  assert.ok(engine.calls.some((c) => c.method === "session.destroy" && c.options.via !== "ws"));
  assert.equal(engine.channel, null, "the channel was given back");
});

test("ws: an error answer over the socket fails the call with RpcError", async () => {
  const { engine, session, events } = await setup("ws", { rpc: true });
  events.start();
  await until(() => events.state === "connected", "connected");
  engine.failNext("stream.subscribe_user", Object.assign(new Error("limit reached"), { code: 1004 }));
  await assert.rejects(session.subscribe("stream.subscribe_user", [7, 10], handler()),
    (e) => e.name === "RpcError" && e.code === 1004);
});

test("auto: a WebSocket that never opens gives way to SSE, which resumes the seq", async () => {
  const { engine, net, sub, h, events } = await setup("auto");
  net.ws = "refuse";
  events.start();
  await until(() => events.state === "connected", "connected");
  assert.equal(events.transport, "sse");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => ids(h).length === 1, "the event over SSE");
  assert.deepEqual(unusableTransports(), ["ws"]);
});

test("auto: a WebSocket that opens but closes before any message gives way to SSE", async () => {
  const { engine, net, sub, h, events } = await setup("auto");
  net.ws = "drop";
  const fallbacks = [];
  events.on("fallback", (from, to) => fallbacks.push(`${from}->${to}`));
  events.start();
  await until(() => events.transport === "sse" && events.state === "connected", "SSE connected");
  assert.deepEqual(fallbacks, ["ws->sse"]);
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => ids(h).length === 1, "the event over SSE");
});

test("auto: an event stream refused by a proxy (502) gives way to long-polling", async () => {
  const { engine, net, sub, h, events } = await setup("auto");
  net.ws = "refuse";
  net.sse = 502;
  events.start();
  await until(() => events.transport === "longpoll" && events.state === "connected", "long-poll connected");
  assert.ok(net.probes.length >= 1, "the refusal was read");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => ids(h).length === 1, "the event over long-poll");
  assert.deepEqual(unusableTransports(), ["ws", "sse"]);
});

test("auto: an event stream with no answer at all gives way to long-polling", async () => {
  const { events, net } = await setup("auto");
  net.ws = "refuse";
  net.sse = "reset";
  events.start();
  await until(() => events.transport === "longpoll" && events.state === "connected", "long-poll connected");
});

test("auto: falling back mid-session keeps the seq: no event lost or repeated", async () => {
  // The transports share the dispatcher: SSE starts after what WebSocket delivered.
  const { engine, net, sub, h, events } = await setup("auto");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
  net.ws = "drop";
  events.start();
  await until(() => events.transport === "sse" && events.lastSeq === 2, "SSE with the queued events");
  engine.push(sub.key, { action: "insert", obj: { id: 3, n: 3 } });
  await until(() => events.lastSeq === 3, "seq 3");
  assert.deepEqual(h.events.map((e) => e.seq), [1, 2, 3]);
});

test("sse: a cut stream is opened again with last_event_id; a replaced one too", async () => {
  const { engine, net, sub, h, events } = await setup("sse");
  events.start();
  await until(() => events.state === "connected", "connected");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => events.lastSeq === 1, "seq 1");
  net.sources[0].cut();
  engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
  await until(() => net.sources.length === 2 && events.state === "connected", "a second stream");
  await until(() => events.lastSeq === 2, "seq 2");
  assert.match(net.sources[1].url, /[?&]session=sid1&last_event_id=1(&|$)/);
  assert.equal(net.sources[0].closed, true, "the browser's own reconnect is not used");
  assert.deepEqual(h.events.map((e) => e.seq), [1, 2]);
});

test("sse: a stream refused with 404/1001 restores the session and follows it", async () => {
  const { engine, net, sub, h, session, events, states } = await setup("sse");
  events.start();
  await until(() => events.state === "connected", "connected");
  engine.restart(); // the stream is cut; the reconnect gets 404
  engine.states.set(sub.key, [{ id: 4, n: 4 }]);
  await until(() => session.sid === "sid2" && events.state === "connected", "the new session", 3000);
  assert.ok(net.probes.some((u) => u.includes("session=sid1")), "the refusal was read");
  assert.match(net.sources.at(-1).url, /session=sid2&last_event_id=0/);
  assert.deepEqual(ids(h), [4]);
  engine.push(sub.key, { action: "insert", obj: { id: 5, n: 5 } });
  await until(() => ids(h).length === 2, "the event of the new session");
  assert.equal(events.transport, "sse");
  assert.ok(states.includes("connecting"));
});

test("sse: a new session made by another call moves the stream to it", async () => {
  const { engine, net, sub, session, events } = await setup("sse");
  events.start();
  await until(() => events.state === "connected", "connected");
  // The engine forgets the session without cutting the stream (as a node the
  // balancer no longer sends calls to); a call gets 1001 and makes a new one.
  engine.sessions.delete("sid1");
  await session.authorize("t");
  assert.equal(session.sid, "sid2");
  await until(() => net.sources.at(-1).url.includes("session=sid2"), "a stream of sid2");
  await until(() => events.state === "connected", "connected");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await until(() => events.lastSeq === 1, "seq 1 of sid2");
});

test("the dispatcher follows the session's generation", () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const d = new Dispatcher(session);
  session.generation = 1;
  assert.equal(d.sync(), 1);
  d.dispatch([{ key: "k", seq: 1, action: "ping" }, { key: "k", seq: 2, action: "ping" }], 1);
  assert.equal(d.lastSeq, 2);
  d.dispatch([{ key: "k", seq: 3, action: "ping" }], 0); // of a session replaced meanwhile
  assert.equal(d.lastSeq, 2);
  session.generation = 2;
  assert.equal(d.sync(), 2);
  assert.equal(d.lastSeq, 0);
});

// -- the engine's node shuts down (SPEC 21): no error, back at once ------------------

for (const transport of TRANSPORTS) {
  test(`${transport}: a node that goes away is no error: back at once, nothing lost`, async () => {
    const { engine, net, sub, h, events, states } = await setup(transport, { options: { reconnectSpread: 3 } });
    events.start();
    await until(() => events.state === "connected", "connected");
    engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
    await until(() => events.lastSeq === 1, "seq 1");
    const before = { sockets: net.sockets.length, sources: net.sources.length };
    engine.goAway();
    engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } }); // queued meanwhile
    await until(() => events.lastSeq === 2, "seq 2 after the reconnect");
    assert.equal(events.state, "connected");
    assert.ok(!states.some((s) => s.startsWith("retrying")), `no back-off: ${states}`);
    assert.deepEqual(h.events.map((e) => e.seq), [1, 2], "nothing lost, nothing twice");
    assert.equal(events.transport, transport, "the same transport");
    if (transport === "ws") {
      assert.equal(net.sockets.length, before.sockets + 1);
      const attach = net.sockets.at(-1).sent.find((c) => c.method === "session.attach");
      assert.deepEqual(attach.params, ["sid1", 1], "attached after the last seq received");
      assert.ok(states.includes("connecting 3"), `connecting again within the spread: ${states}`);
    } else if (transport === "sse") {
      assert.equal(net.sources.length, before.sources + 1);
      assert.match(net.sources.at(-1).url, /[?&]session=sid1&last_event_id=1(&|$)/);
      assert.equal(net.sources[before.sources - 1].closed, true, "closed at its going-away message");
      assert.ok(states.includes("connecting 3"), `connecting again within the spread: ${states}`);
    }
  });
}

test("ws: a call the engine had not run when it went away is sent again over HTTP", async () => {
  const { engine, net, session, events, states } = await setup("ws", { rpc: true, options: { reconnectSpread: 3 } });
  events.start();
  await until(() => events.state === "connected", "connected");
  assert.equal(engine.channel?.name, "ws", "calls go over the socket");
  net.sockets[0].goAway(); // its close frame is on its way: calls sent now are not run
  const user = await session.authorize("t");
  assert.equal(user, "user-of-t");
  const authorizations = engine.calls.filter((c) => c.method === "session.authorize");
  assert.equal(net.sockets[0].sent.filter((c) => c.method === "session.authorize").length, 1);
  assert.deepEqual(authorizations.map((c) => c.options.via), [undefined], "once, over HTTP");
  await until(() => events.state === "connected" && net.sockets.length === 2, "a new socket");
  assert.ok(!states.some((s) => s.startsWith("retrying")), `no back-off: ${states}`);
});

test("ws: a socket closed with 1001 while it attaches is opened again, not given up", async () => {
  const { net, events, states } = await setup("auto", { options: { reconnectSpread: 3 } });
  const Real = net.WebSocket;
  let first = true;
  net.WebSocket = class extends Real {
    send(text) {
      if (first && JSON.parse(text).method === "session.attach") {
        first = false;
        this.sent.push(JSON.parse(text));
        this.goAway(); // the node shuts down as the socket attaches
        return;
      }
      super.send(text);
    }
  };
  events.options.ws.WebSocket = net.WebSocket;
  events.start();
  await until(() => events.state === "connected" && net.sockets.length === 2, "attached on a second socket");
  assert.equal(events.transport, "ws", "no fallback to SSE");
  assert.ok(!states.some((s) => s.startsWith("retrying")), `no back-off: ${states}`);
});
