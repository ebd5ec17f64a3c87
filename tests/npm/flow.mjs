// The whole client flow with the npm package (@pushengine/client) installed
// from its tarball, in Node, against a running engine:
//
//   node flow.mjs http://127.0.0.1:PORT ws|sse|longpoll FIRST_ID
//
// FIRST_ID: the first stream id; a later run against the same engine takes
// higher ones (their streams are the newest, so they enter the view).
//
// A session, a view subscribed, insert/update/delete after publishes, the
// events stopped and started again (resume: ack, last_event_id, attach with
// the last seq), a WebSocket cut, calls cancelled by an AbortSignal, an
// RpcError, destroy. WebSocket and EventSource come from the `ws` and
// `eventsource` packages. Checks itself (node:assert); prints one JSON line
// with what it saw.
import assert from "node:assert/strict";
import { WebSocket } from "ws";
import { EventSource } from "eventsource";
import {
  Api, Session, Events, View, RpcError, CancelledError, ErrorCode, Deferred,
} from "@pushengine/client";
import { SUBPROTOCOL } from "@pushengine/client/transport-ws.js";

const [base, transport, first] = process.argv.slice(2);
const WAIT = { timeout: 15000 };
let nextId = Number(first);

Deferred.onUnhandledError = (failure) => {
  console.error("unhandled failure in a Deferred:", failure.value);
  process.exitCode = 1;
};

async function publish(...changes) {
  const r = await fetch(new URL("/api/publish", base), {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(changes),
  });
  assert.equal(r.status, 200, await r.text());
}

function stream(id, extra = {}) {
  return { type: "Stream", action: "upsert", obj: {
    id, title: `package stream ${id}`, user_id: 340699, live: true, public: true,
    // newer than every stream before it (ids grow from run to run): it enters the view
    created_at: new Date(Date.UTC(2031, 0, 1) + id * 1000).toISOString().replace(/\.\d+Z$/, "Z"),
    ...extra,
  } };
}

const ids = (view) => view.items.map((o) => o.id);

const api = new Api({ url: new URL("/api/jsonrpc", base).href });
const session = new Session(api);
const events = new Events(session, { transport, WebSocket, EventSource, base: 50, max: 500 });
const seen = [];
events.on("event", (ev) => { seen.push({ seq: ev.seq, action: ev.action }); });

// -- a session and a view --------------------------------------------------------
const sid = await session.open();
assert.equal(typeof sid, "string");
const view = new View({ session, method: "stream.subscribe_public_live", limit: 5, order: "-created_at" });
const sub = await view.subscribe();
assert.equal(sub.key, "PublicLiveStreamView(limit=5)");
assert.ok(view.ready);
events.start();
assert.equal(await events.connected(WAIT), transport);

// -- insert, update, delete ------------------------------------------------------
const a = nextId++;
const inserted = events.next({ key: sub.key, filter: (ev) => ev.action === "insert" && ev.obj.id === a, ...WAIT });
await publish(stream(a));
assert.equal((await inserted).obj.title, `package stream ${a}`);
await view.until((items) => items.some((o) => o.id === a), WAIT);

const updated = events.next({ key: sub.key, filter: (ev) => ev.action === "update", ...WAIT });
await publish(stream(a, { title: "renamed", viewers: 7 }));
const update = await updated;
assert.equal(update.obj.title, "renamed");
assert.equal(update.old.title, `package stream ${a}`);
await view.until((items) => items.find((o) => o.id === a)?.title === "renamed", WAIT);

const deleted = events.next({ key: sub.key, filter: (ev) => ev.action === "delete", ...WAIT });
await publish({ type: "Stream", action: "delete", obj: { id: a } });
assert.equal((await deleted).obj.id, a);
await view.until((items) => !items.some((o) => o.id === a), WAIT);

// -- resume: stopped, two inserts meanwhile, started again -------------------------
const b = nextId++;
const c = nextId++;
const lastBefore = events.lastSeq;
events.stop();
await publish(stream(b), stream(c));
events.start();
await events.connected(WAIT);
await view.until((items) => items.some((o) => o.id === b) && items.some((o) => o.id === c), WAIT);
assert.ok(events.lastSeq >= lastBefore + 2);

// -- WebSocket: the socket cut, events published while it is away --------------------
if (transport === "ws") {
  const d = nextId++;
  const socket = events.current.socket;
  const back = new Promise((resolve) => {
    const off = events.on("state", (state) => { if (state === "connected") { off(); resolve(); } });
  });
  socket.close(4000, "cut by the test");
  await publish(stream(d));
  await back;
  await view.until((items) => items.some((o) => o.id === d), WAIT);
  assert.notEqual(events.current.socket, socket, "a new socket");
  // A call over the socket cancelled by its signal: dropped from the pending calls.
  assert.ok(api.channel, "calls go over the socket");
  const controller = new AbortController();
  const call = session.call("stats.online", [], { signal: controller.signal });
  assert.equal(events.current.pendingCalls, 1);
  controller.abort(new Error("not wanted"));
  await assert.rejects(call, (e) => e instanceof CancelledError && e.cause.message === "not wanted");
  assert.equal(events.current.pendingCalls, 0);
  assert.equal(SUBPROTOCOL, "pushengine.jsonrpc");
  assert.equal(events.current.offerSubprotocol, true, "the subprotocol is offered by default");
  assert.equal(events.current.socket.protocol, SUBPROTOCOL, "and the engine answers it");
}

// -- each event once, in order, with no gap ------------------------------------------
const seqs = seen.map((e) => e.seq);
assert.deepEqual(seqs, seqs.map((_, i) => seqs[0] + i), `seq in order, none twice, none missing: ${seqs}`);

// -- a long call (a long-poll of a second session) aborted by its signal ---------------
const other = await api.call("session.create");
const controller = new AbortController();
const started = Date.now();
const poll = api.call("session.get_events", [other, 10, 0], { session: other, signal: controller.signal });
setTimeout(() => controller.abort(), 200);
await assert.rejects(poll, (e) => e instanceof CancelledError);
const abortedAfter = Date.now() - started;
assert.ok(abortedAfter < 5000, `aborted after ${abortedAfter} ms`);
assert.equal(await api.call("session.destroy", [other], { session: other }), true);

// -- errors ------------------------------------------------------------------------------
await assert.rejects(session.call("session.subscribe", ["NoSuchView", {}, 5]),
  (e) => e instanceof RpcError && e.code === ErrorCode.UNKNOWN_VIEW);

// -- the end -----------------------------------------------------------------------------
assert.equal(await session.destroy(), true);
assert.equal(events.state, "stopped");
console.log(JSON.stringify({
  transport, sid, key: sub.key, actions: seen.map((e) => e.action).filter((x) => x !== "ping"), seqs,
  items: ids(view), abortedAfter,
}));
