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

// -- expiry, batches, change events (user.public_profiles) ------------------------------

function clock(start = 1000) {
  const c = { t: start, now: () => c.t };
  return c;
}

test("a profile older than the ttl is loaded again; peek keeps the old one meanwhile", async () => {
  const c = clock();
  let name = "Anna";
  let calls = 0;
  const cache = new UserCache((id) => { calls += 1; return { id, name }; }, { ttl: 5000, now: c.now });
  assert.deepEqual(await cache.get(1), { id: 1, name: "Anna" });
  name = "Anna Smirnova";
  c.t += 4999;
  assert.equal((await cache.get(1)).name, "Anna", "still fresh");
  assert.ok(cache.isFresh(1));
  c.t += 1;
  assert.ok(!cache.isFresh(1));
  assert.equal(cache.peek(1).name, "Anna");
  assert.equal((await cache.get(1)).name, "Anna Smirnova");
  assert.equal(calls, 2);
});

test("a change event when a profile arrives or changes, not when it stays the same", async () => {
  const c = clock();
  let name = "Boris";
  const cache = new UserCache((id) => ({ id, name }), { ttl: 10, now: c.now });
  const seen = [];
  cache.on("change", (id, profile, old) => seen.push([id, profile?.name, old?.name]));
  await cache.get(2);
  c.t += 10;
  await cache.get(2); // reloaded, same profile: no event
  name = "Boris Ivanov";
  c.t += 10;
  await cache.get(2);
  assert.deepEqual(seen, [[2, "Boris", undefined], [2, "Boris Ivanov", "Boris"]]);
});

test("a failed reload keeps the last profile", async () => {
  const c = clock();
  let fail = false;
  const cache = new UserCache((id) => {
    if (fail) throw new Error("down");
    return { id };
  }, { ttl: 10, now: c.now });
  await cache.get(3);
  fail = true;
  c.t += 20;
  assert.deepEqual(await cache.get(3), { id: 3 });
  assert.ok(!cache.isFresh(3), "tried again next time");
});

test("batch mode: the ids of one turn go in one load, in chunks, unknown users are null", async () => {
  const loads = [];
  const cache = new UserCache((ids) => {
    loads.push(ids);
    return ids.map((id) => (id === 404 ? null : { id }));
  }, { batch: 3 });
  const got = cache.getMany([1, 2, 404, 4, 1, 5]);
  assert.deepEqual(await got, [{ id: 1 }, { id: 2 }, null, { id: 4 }, { id: 1 }, { id: 5 }]);
  assert.deepEqual(loads, [[1, 2, 404], [4, 5]]);
  assert.equal(cache.requests, 2);
  assert.equal(cache.loads, 5);
  assert.equal(cache.peek(404), null);
  assert.deepEqual(await cache.get(404), null);
  assert.equal(cache.requests, 2, "null is remembered too");
});

test("batch mode: loads in flight are bounded by the manager", async () => {
  const pending = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const cache = new UserCache((ids) => {
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const d = new Deferred();
    pending.push({ ids, d });
    return d.addBoth((r) => { inFlight -= 1; return r; });
  }, { batch: 2, concurrency: 2 });
  const all = cache.getMany([1, 2, 3, 4, 5, 6, 7]);
  await tick(0);
  assert.equal(inFlight, 2);
  while (pending.length) {
    const { ids, d } = pending.shift();
    d.callback(ids.map((id) => ({ id })));
    await tick(0);
    assert.ok(inFlight <= 2);
  }
  assert.equal((await all).length, 7);
  assert.equal(maxInFlight, 2);
});

test("batch mode: a loader that answers the wrong number of profiles fails those gets", async () => {
  const cache = new UserCache((ids) => [{ id: ids[0] }], { batch: 10 });
  await assert.rejects(cache.getMany([1, 2]), /profiles for 2 ids/);
});

test("forApi asks user.public_profiles and reads -32601 as no profiles", async () => {
  const calls = [];
  const api = {
    call(method, params) {
      calls.push([method, params]);
      const d = new Deferred();
      if (params[0].includes(99)) d.errback(Object.assign(new Error("unknown method"), { code: -32601 }));
      else d.callback(params[0].map((id) => ({ id, name: `u${id}` })));
      return d;
    },
  };
  const cache = UserCache.forApi(api, { ttl: 1000 });
  assert.deepEqual(await cache.getMany([1, 2]), [{ id: 1, name: "u1" }, { id: 2, name: "u2" }]);
  assert.deepEqual(calls, [["user.public_profiles", [[1, 2]]]]);
  assert.deepEqual(await cache.get(99), null);
});

test("refresh loads only what is missing or expired", async () => {
  const c = clock();
  const loads = [];
  const cache = new UserCache((ids) => { loads.push(ids); return ids.map((id) => ({ id })); },
    { batch: 100, ttl: 100, now: c.now });
  await cache.getMany([1, 2]);
  c.t += 50;
  await cache.get(3);
  c.t += 60; // 1 and 2 expired, 3 not
  await cache.refresh([1, 2, 3, 4, null, 1]);
  assert.deepEqual(loads, [[1, 2], [3], [1, 2, 4]]);
});
