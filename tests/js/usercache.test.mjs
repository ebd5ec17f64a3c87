// usercache.js: each user loaded once, a bounded number of loads in flight.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Deferred } from "../../static/js/deferred.js";
import { DeferredManager } from "../../static/js/deferredmanager.js";
import { UserCache } from "../../static/js/usercache.js";

const tick = (ms = 1) => new Promise((r) => setTimeout(r, ms));

/** A loader whose loads the test finishes by hand. */
function manualLoader() {
  const loads = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const loader = (id) => {
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const d = new Deferred();
    loads.push({ id, d });
    return d.addBoth((r) => { inFlight -= 1; return r; });
  };
  return {
    loader,
    loads,
    get inFlight() { return inFlight; },
    get maxInFlight() { return maxInFlight; },
    finish(id, value = { id, name: `user ${id}` }) {
      const load = loads.find((l) => l.id === id && !l.d.called);
      load.d.callback(value);
    },
  };
}

test("concurrent gets of one user make one load, and every caller gets the profile", async () => {
  const m = manualLoader();
  const cache = new UserCache(m.loader, { concurrency: 2 });
  const a = cache.get(7);
  const b = cache.get(7);
  const c = cache.get(7);
  assert.equal(m.loads.length, 1);
  m.finish(7);
  assert.deepEqual(await a, { id: 7, name: "user 7" });
  assert.deepEqual(await b, { id: 7, name: "user 7" });
  assert.deepEqual(await c, { id: 7, name: "user 7" });
  assert.equal(cache.loads, 1);
});

test("a loaded user is served from the cache", async () => {
  let calls = 0;
  const cache = new UserCache((id) => { calls += 1; return { id }; });
  assert.deepEqual(await cache.get(1), { id: 1 });
  assert.deepEqual(await cache.get(1), { id: 1 });
  assert.deepEqual(cache.peek(1), { id: 1 });
  assert.equal(calls, 1);
});

test("one caller's callbacks do not change what another gets", async () => {
  const m = manualLoader();
  const cache = new UserCache(m.loader);
  const a = cache.get(1).addCallback(() => "changed by a");
  const b = cache.get(1);
  m.finish(1);
  assert.equal(await a, "changed by a");
  assert.deepEqual(await b, { id: 1, name: "user 1" });
});

test("no more loads in flight than the bound; the rest wait their turn", async () => {
  const m = manualLoader();
  const cache = new UserCache(m.loader, { concurrency: 3 });
  const gets = [];
  for (let i = 0; i < 12; i++) gets.push(cache.get(i), cache.get(i));
  assert.equal(m.inFlight, 3);
  assert.equal(cache.manager.waiting, 9);
  for (let i = 0; i < 12; i++) {
    m.finish(i);
    await tick(0);
    assert.ok(m.inFlight <= 3);
  }
  const profiles = await Promise.all(gets);
  assert.equal(profiles.length, 24);
  assert.equal(m.maxInFlight, 3);
  assert.equal(m.loads.length, 12, "each user loaded once");
  assert.deepEqual(m.loads.map((l) => l.id), [...Array(12).keys()], "in the order asked");
});

test("a shared manager bounds several caches together", async () => {
  const m = manualLoader();
  const manager = new DeferredManager(2);
  const a = new UserCache(m.loader, { manager });
  const b = new UserCache(m.loader, { manager });
  a.get(1); a.get(2); b.get(3); b.get(4);
  assert.equal(m.inFlight, 2);
  m.finish(1); m.finish(2);
  await tick(0);
  assert.equal(m.inFlight, 2);
});

test("a failed load is not remembered: the next get tries again", async () => {
  let calls = 0;
  const cache = new UserCache((id) => {
    calls += 1;
    if (calls === 1) throw new Error("backend down");
    return { id };
  });
  await assert.rejects(cache.get(5), /backend down/);
  assert.equal(cache.peek(5), undefined);
  assert.deepEqual(await cache.get(5), { id: 5 });
  assert.equal(calls, 2);
});

test("at most maxSize profiles are kept, least recently used first out", async () => {
  const cache = new UserCache((id) => ({ id }), { maxSize: 2 });
  await cache.get(1);
  await cache.get(2);
  await cache.get(1); // 1 is now the most recent
  await cache.get(3);
  assert.equal(cache.peek(2), undefined);
  assert.deepEqual(cache.peek(1), { id: 1 });
  assert.deepEqual(cache.peek(3), { id: 3 });
});

test("getMany keeps the order; Promise loaders work", async () => {
  const cache = new UserCache((id) => Promise.resolve({ id }));
  assert.deepEqual(await cache.getMany([3, 1, 2, 1]), [{ id: 3 }, { id: 1 }, { id: 2 }, { id: 1 }]);
  assert.equal(cache.loads, 3);
});
