// deferredmanager.js: at most N operations at once, the rest FIFO.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Deferred, CancelledError } from "../../static/js/deferred.js";
import { DeferredManager } from "../../static/js/deferredmanager.js";

const tick = (ms = 1) => new Promise((r) => setTimeout(r, ms));

test("never more than the limit in flight; FIFO start order; every result delivered", async () => {
  const manager = new DeferredManager(3);
  const pending = new Map();
  const started = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const op = (i) => {
    started.push(i);
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const d = new Deferred();
    pending.set(i, d);
    return d.addBoth((r) => { inFlight -= 1; return r; });
  };
  const results = [];
  for (let i = 0; i < 20; i++) manager.run(op, i).addCallback((r) => results.push(r));
  assert.equal(manager.running, 3);
  assert.equal(manager.waiting, 17);
  // Finish them in a scrambled order.
  const rnd = (() => { let s = 7; return () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648; })();
  while (results.length < 20) {
    const open = [...pending.entries()].filter(([, d]) => !d.called);
    assert.ok(open.length > 0 && open.length <= 3);
    const [i, d] = open[Math.floor(rnd() * open.length)];
    d.callback(`r${i}`);
    await tick(0);
  }
  assert.equal(maxInFlight, 3);
  assert.deepEqual(started, [...Array(20).keys()]);
  assert.deepEqual([...results].sort(), [...Array(20).keys()].map((i) => `r${i}`).sort());
  assert.equal(manager.running, 0);
  assert.equal(manager.waiting, 0);
});

test("failures are delivered and free their slot", async () => {
  const manager = new DeferredManager(1);
  const a = manager.run(() => { throw new Error("sync failure"); });
  const b = manager.run(() => Promise.reject(new Error("async failure")));
  const c = manager.run(() => "fine");
  await assert.rejects(a, /sync failure/);
  await assert.rejects(b, /async failure/);
  assert.equal(await c, "fine");
});

test("plain values and Promises work as operations", async () => {
  const manager = new DeferredManager(2);
  const out = await Promise.all([1, 2, 3, 4].map((i) => manager.run((x) => Promise.resolve(x * 2), i)));
  assert.deepEqual(out, [2, 4, 6, 8]);
});

test("cancelling a queued operation takes it out of the queue", async () => {
  const manager = new DeferredManager(1);
  const blocker = new Deferred();
  manager.run(() => blocker);
  let ran = false;
  const queued = manager.run(() => { ran = true; });
  assert.equal(manager.waiting, 1);
  queued.addErrback((f) => { f.trap(CancelledError); });
  queued.cancel();
  assert.equal(manager.waiting, 0);
  blocker.callback(null);
  await tick();
  assert.equal(ran, false);
  assert.equal(manager.running, 0);
});

test("cancelling a running operation cancels it and frees the slot", async () => {
  const manager = new DeferredManager(1);
  let cancelled = false;
  const running = manager.run(() => new Deferred(() => { cancelled = true; }));
  const next = manager.run(() => "next");
  running.addErrback((f) => { f.trap(CancelledError); return "was cancelled"; });
  running.cancel();
  assert.ok(cancelled);
  assert.equal(running.result, "was cancelled");
  assert.equal(await next, "next");
});

test("a bad limit is refused", () => {
  assert.throws(() => new DeferredManager(0), RangeError);
  assert.throws(() => new DeferredManager(1.5), RangeError);
});
