// session.js and events.js against a fake engine: subscribe, the poll loop
// with ack, dispatch by key, recovery from 1001 and from network errors.
import { test } from "node:test";
import assert from "node:assert/strict";

import { NetworkError, RpcError } from "../../static/js/api.js";
import { Session, SessionDestroyedError } from "../../static/js/session.js";
import { Events, backoffDelay } from "../../static/js/events.js";
import { ViewList } from "../../static/js/viewlist.js";
import { FakeEngine, settle } from "./fakeengine.mjs";
import { eventsHooks } from "./eventshooks.mjs";

eventsHooks();

/** A subscription handler that keeps a ViewList and records what it got. */
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

test("the session is created on first use and the state reaches the handler", async () => {
  const engine = new FakeEngine();
  engine.states.set(FakeEngine.keyOf(LIVE, [10]), [{ id: 1, n: 1 }]);
  const session = new Session(engine);
  const h = handler();
  const sub = await session.subscribe(LIVE, [10], h);
  assert.equal(session.sid, "sid1");
  assert.equal(sub.key, FakeEngine.keyOf(LIVE, [10]));
  assert.deepEqual(h.list.items, [{ id: 1, n: 1 }]);
  assert.deepEqual(engine.callsOf(LIVE)[0].params, ["sid1", 10]);
  assert.equal(engine.callsOf(LIVE)[0].options.session, "sid1", "?session= in the URL");
});

test("concurrent first calls create one session", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await Promise.all([session.subscribe(LIVE, [10], handler()), session.subscribe(LIVE, [5], handler()),
    session.open()]);
  assert.equal(engine.callsOf("session.create").length, 1);
});

test("events reach the handler by key, with ack, duplicates skipped", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const a = handler();
  const b = handler();
  const subA = await session.subscribe(LIVE, [10], a);
  const subB = await session.subscribe("stream.subscribe_user", [7, 10], b);
  const events = new Events(session, { timeout: 30 });
  events.start();
  await settle();
  assert.equal(engine.parked, 1, "one poll at a time");
  engine.push(subA.key, { action: "insert", obj: { id: 1, n: 5 } });
  engine.push(subB.key, { action: "insert", obj: { id: 2, n: 1 } });
  engine.push(subA.key, { action: "insert", obj: { id: 3, n: 9 } });
  await settle();
  assert.deepEqual(a.list.items.map((o) => o.id), [3, 1]);
  assert.deepEqual(b.list.items.map((o) => o.id), [2]);
  assert.equal(events.lastSeq, 3);
  const polls = engine.callsOf("session.get_events");
  assert.deepEqual(polls[0].params, ["sid1", 0, 0], "the first poll answers at once");
  assert.deepEqual(polls[1].params, ["sid1", 30, 0], "then long polls");
  assert.deepEqual(polls.at(-1).params, ["sid1", 30, 3], "the next poll acks what was processed");
  // The same events delivered again (an answer lost, resent) are skipped.
  events.dispatch([{ key: subA.key, seq: 3, action: "delete", obj: { id: 3 } }]);
  assert.deepEqual(a.list.items.map((o) => o.id), [3, 1]);
  events.stop();
});

test("an empty answer (poll timeout) starts the next poll", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await session.subscribe(LIVE, [10], handler());
  const events = new Events(session, { timeout: 30 });
  events.start();
  await settle();
  assert.equal(engine.callsOf("session.get_events").length, 2, "the quick first poll, then a parked one");
  engine.timeoutPolls();
  await settle();
  // The fake answers at once, not after 30 s: that looks like another poll
  // took over, and the loop waits a second instead of spinning.
  assert.equal(engine.callsOf("session.get_events").length, 2);
  await new Promise((r) => setTimeout(r, 1100));
  assert.equal(engine.callsOf("session.get_events").length, 3);
  assert.equal(events.state, "connected");
  events.stop();
});

test("error 1001 on a call: new session, authorized again, subscriptions restored, call retried", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const h = handler();
  await session.authorize("token-x");
  const sub = await session.subscribe(LIVE, [10], h);
  assert.equal(h.states, 1);
  engine.restart();
  engine.states.set(sub.key, [{ id: 9, n: 9 }]);
  const user = await session.authorize("token-y");
  assert.equal(session.sid, "sid2");
  assert.equal(user, "user-of-token-y");
  assert.equal(h.states, 2, "the handler got the state of the new subscription");
  assert.deepEqual(h.list.items, [{ id: 9, n: 9 }]);
  const authorizations = engine.callsOf("session.authorize").map((c) => c.params);
  assert.deepEqual(authorizations.at(-2), ["sid2", "token-y"], "the new session was authorized first");
  assert.ok(engine.sessions.get("sid2").keys.has(sub.key));
});

test("error 1001 during the poll: the loop restores the session and starts seq again", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const h = handler();
  const sub = await session.subscribe(LIVE, [10], h);
  const events = new Events(session, { timeout: 30, base: 1, max: 5 });
  const states = [];
  events.on("state", (s) => states.push(s));
  events.start();
  await settle();
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  engine.push(sub.key, { action: "insert", obj: { id: 2, n: 2 } });
  await settle();
  assert.equal(events.lastSeq, 2);
  engine.restart(); // the parked poll is cut: a network error, then 1001
  engine.states.set(sub.key, [{ id: 5, n: 5 }]);
  await settle(20);
  assert.equal(session.sid, "sid2");
  assert.equal(events.lastSeq, 0);
  assert.deepEqual(h.list.items, [{ id: 5, n: 5 }]);
  engine.push(sub.key, { action: "insert", obj: { id: 6, n: 6 } });
  await settle();
  assert.deepEqual(h.list.items.map((o) => o.id), [6, 5]);
  assert.equal(events.lastSeq, 1, "seq of the new session");
  assert.deepEqual(engine.callsOf("session.get_events").at(-1).params, ["sid2", 30, 1]);
  assert.ok(states.includes("retrying"));
  assert.equal(events.state, "connected");
  events.stop();
});

test("network errors back off and the loop recovers", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const sub = await session.subscribe(LIVE, [10], handler());
  for (let i = 0; i < 3; i++) engine.failNext("session.get_events", new NetworkError("down"));
  const delays = [];
  const events = new Events(session, { base: 1, max: 4, random: () => 1 });
  events.on("state", (s, info) => { if (s === "retrying") delays.push(info.delay); });
  events.start();
  await settle(30);
  assert.deepEqual(delays, [1, 2, 4]);
  const polls = engine.callsOf("session.get_events").map((c) => c.params[1]);
  assert.deepEqual(polls, [0, 0, 0, 0, 30], "after a failure, a quick poll first");
  assert.equal(events.failures, 0);
  assert.equal(events.state, "connected");
  engine.push(sub.key, { action: "insert", obj: { id: 1, n: 1 } });
  await settle();
  assert.equal(events.lastSeq, 1);
  events.stop();
});

test("backoffDelay: exponential, capped, with jitter in the upper half", () => {
  assert.equal(backoffDelay(1, { base: 500, max: 30000 }, () => 0), 250);
  assert.equal(backoffDelay(1, { base: 500, max: 30000 }, () => 1), 500);
  assert.equal(backoffDelay(4, { base: 500, max: 30000 }, () => 1), 4000);
  assert.equal(backoffDelay(20, { base: 500, max: 30000 }, () => 1), 30000);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(3, { base: 100, max: 1000 });
    assert.ok(d >= 200 && d <= 400);
  }
});

test("destroy stops the loop and tells the engine", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await session.subscribe(LIVE, [10], handler());
  const events = new Events(session);
  events.start();
  await settle();
  assert.equal(engine.parked, 1);
  const polls = engine.callsOf("session.get_events").length;
  await session.destroy();
  await settle();
  assert.equal(events.running, false);
  assert.equal(events.state, "stopped");
  assert.equal(engine.sessions.size, 0);
  assert.equal(engine.callsOf("session.get_events").length, polls, "no poll after destroy");
  await assert.rejects(session.open(), SessionDestroyedError);
});

test("unsubscribe tells the engine; later events for the key are dropped", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  const h = handler();
  const sub = await session.subscribe(LIVE, [10], h);
  assert.equal(await sub.unsubscribe(), true);
  assert.equal(engine.sessions.get("sid1").keys.size, 0);
  const events = new Events(session);
  events.dispatch([{ key: sub.key, seq: 1, action: "insert", obj: { id: 1, n: 1 } }]);
  assert.equal(h.events.length, 0);
  assert.equal(session.subscriptions.length, 0);
});

test("an event that overtakes its subscribe answer is kept and delivered after the state", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await session.open();
  const events = new Events(session);
  const h = handler();
  const pending = session.subscribe(LIVE, [3], h);
  const key = FakeEngine.keyOf(LIVE, [3]);
  // The poll answer arrives before the subscribe answer.
  events.dispatch([{ key, seq: 1, action: "insert", obj: { id: 4, n: 4 } }]);
  assert.equal(h.events.length, 0);
  await pending;
  assert.equal(h.events.length, 1);
  assert.deepEqual(h.list.items.map((o) => o.id), [4]);
});

test("a subscribe answered by an engine that restarted meanwhile is made again in the new session", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await session.open();
  const h = handler();
  // The subscribe reaches the engine, but its answer is slow; meanwhile the
  // engine restarts and another call makes a new session.
  const release = engine.holdAnswers(LIVE);
  const d = session.subscribe(LIVE, [10], h);
  engine.restart();
  await session.authorize("t");
  assert.equal(session.sid, "sid2");
  release();
  const sub = await d;
  assert.equal(session.sid, "sid2");
  assert.ok(engine.sessions.get("sid2").keys.has(sub.key));
});

test("other RPC errors reach the caller", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  engine.failNext(LIVE, new RpcError(1004, "limit reached"));
  await assert.rejects(session.subscribe(LIVE, [10], handler()), (e) => e instanceof RpcError && e.code === 1004);
  assert.equal(session.subscriptions.length, 0);
});

test("refresh keeps the new token for a new session; another user's token is refused", async () => {
  const engine = new FakeEngine();
  const session = new Session(engine);
  await session.authorize("token-x");
  assert.equal(await session.refresh("token-x-new"), "user-of-token-x");
  await assert.rejects(session.refresh("token-y"), (e) => e.code === 1003);
  engine.restart();
  await session.authorize(session.token);
  const authorizations = engine.callsOf("session.authorize").map((c) => c.params[1]);
  assert.ok(authorizations.includes("token-x-new"), "the refreshed token authorizes a new session");
});
