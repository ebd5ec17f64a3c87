// viewlist.js: the ordered list of a view, checked against a brute-force model.
import { test, describe } from "node:test";
import assert from "node:assert/strict";

import { ViewList, makeComparator, compareValues, parseOrder, sameValue } from "../../static/js/viewlist.js";

/** A small deterministic random generator (so a failure can be replayed). */
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ids = (list) => list.map((o) => o.id);

describe("order", () => {
  test("parseOrder", () => {
    assert.deepEqual(parseOrder("-created_at"), [{ field: "created_at", sign: -1 }]);
    assert.deepEqual(parseOrder("a, -b"), [{ field: "a", sign: 1 }, { field: "b", sign: -1 }]);
    assert.deepEqual(parseOrder(["+a"]), [{ field: "a", sign: 1 }]);
  });

  test("descending with ties broken by id descending", () => {
    const cmp = makeComparator("-created_at");
    const objs = [
      { id: 1, created_at: "2026-11-30T03:00:00Z" },
      { id: 3, created_at: "2026-11-30T03:00:00Z" },
      { id: 2, created_at: "2026-11-30T04:00:00Z" },
    ];
    assert.deepEqual(ids([...objs].sort(cmp)), [2, 3, 1]);
  });

  test("ascending with ties broken by id ascending", () => {
    const cmp = makeComparator("viewers");
    const objs = [{ id: 5, viewers: 1 }, { id: 4, viewers: 1 }, { id: 1, viewers: 9 }];
    assert.deepEqual(ids([...objs].sort(cmp)), [4, 5, 1]);
  });

  test("null and missing values come first ascending, last descending", () => {
    assert.ok(compareValues(null, 0) < 0);
    assert.ok(compareValues(undefined, "a") < 0);
    assert.equal(compareValues(null, undefined), 0);
    assert.ok(compareValues(5, "5") < 0);
    const cmp = makeComparator("-ended_at");
    const objs = [{ id: 1, ended_at: null }, { id: 2, ended_at: "2026-01-01" }, { id: 3 }];
    assert.deepEqual(ids([...objs].sort(cmp)), [2, 3, 1]);
  });
});

describe("applying events", () => {
  const s = (id, t, extra = {}) => ({ id, created_at: `2026-11-30T0${t}:00:00Z`, ...extra });

  test("insert places the object in order", () => {
    const list = new ViewList({ order: "-created_at", limit: 10 });
    list.setState([s(3, 5), s(1, 3)]);
    list.apply({ action: "insert", obj: s(2, 4) });
    list.apply({ action: "insert", obj: s(9, 9) });
    list.apply({ action: "insert", obj: s(0, 1) });
    assert.deepEqual(ids(list.items), [9, 3, 2, 1, 0]);
  });

  test("update replaces the object and moves it", () => {
    const list = new ViewList({ order: "-created_at" });
    list.setState([s(3, 5), s(2, 4), s(1, 3)]);
    assert.ok(list.apply({ action: "update", obj: s(1, 6, { title: "new" }), old: s(1, 3) }));
    assert.deepEqual(ids(list.items), [1, 3, 2]);
    assert.equal(list.get(1).title, "new");
  });

  test("delete removes; delete of an unknown id does nothing", () => {
    const list = new ViewList({ order: "-created_at" });
    list.setState([s(3, 5), s(2, 4)]);
    assert.ok(list.apply({ action: "delete", obj: { id: 3 } }));
    assert.equal(list.apply({ action: "delete", obj: { id: 42 } }), false);
    assert.deepEqual(ids(list.items), [2]);
  });

  test("reset replaces everything; ping changes nothing", () => {
    const list = new ViewList({ order: "-created_at", limit: 2 });
    list.setState([s(3, 5)]);
    assert.equal(list.apply({ action: "ping" }), false);
    assert.ok(list.apply({ action: "reset", obj: [s(7, 7), s(6, 6), s(5, 5)] }));
    assert.deepEqual(ids(list.items), [7, 6], "cut to the limit");
  });

  test("tolerance: duplicate insert, update of an unknown id", () => {
    const list = new ViewList({ order: "-created_at" });
    list.setState([s(1, 1)]);
    list.apply({ action: "insert", obj: s(1, 2, { title: "twice" }) });
    list.apply({ action: "update", obj: s(5, 5) });
    assert.deepEqual(ids(list.items), [5, 1]);
    assert.equal(list.get(1).title, "twice");
  });

  test("the list never exceeds its limit", () => {
    const list = new ViewList({ order: "-created_at", limit: 3 });
    list.setState([s(1, 1), s(2, 2), s(3, 3), s(4, 4)]);
    assert.equal(list.length, 3);
    for (let i = 5; i < 9; i++) list.apply({ action: "insert", obj: s(i, i) });
    assert.deepEqual(ids(list.items), [8, 7, 6]);
    assert.equal(list.apply({ action: "insert", obj: s(0, 0) }), false, "past the end: not kept");
    assert.equal(list.length, 3);
  });

  test("setState drops duplicate ids", () => {
    const list = new ViewList({ order: "-created_at" });
    list.setState([s(1, 1), s(1, 1)]);
    assert.equal(list.length, 1);
  });

  test("without an order, inserts append and updates stay in place", () => {
    const list = new ViewList();
    list.setState([{ id: "a" }, { id: "b" }]);
    list.apply({ action: "insert", obj: { id: "c" } });
    list.apply({ action: "update", obj: { id: "a", x: 1 } });
    assert.deepEqual(ids(list.items), ["a", "b", "c"]);
    assert.equal(list.items[0].x, 1);
  });

  test("string ids and another id field", () => {
    const list = new ViewList({ order: "-n", idField: "key" });
    list.setState([{ key: "x", n: 1 }]);
    list.apply({ action: "insert", obj: { key: "y", n: 1 } });
    assert.deepEqual(list.items.map((o) => o.key), ["y", "x"]);
  });
});

/**
 * The engine, brute force: a table of objects; a view is the first `limit`
 * objects passing `where`, in order. A change's events are the difference of
 * the view before and after: deletes (objects that left), then updates
 * (objects still in the view whose state changed), then inserts (objects that
 * entered, in view order).
 */
class Model {
  constructor({ where, order, limit }) {
    this.where = where;
    this.cmp = makeComparator(order);
    this.limit = limit;
    this.table = new Map();
  }

  view() {
    return [...this.table.values()].filter(this.where).sort(this.cmp).slice(0, this.limit);
  }

  change(fn) {
    const before = this.view();
    fn(this.table);
    const after = this.view();
    const b = new Map(before.map((o) => [o.id, o]));
    const a = new Map(after.map((o) => [o.id, o]));
    const events = [];
    for (const o of before) if (!a.has(o.id)) events.push({ action: "delete", obj: o });
    for (const o of after) {
      if (b.has(o.id) && JSON.stringify(b.get(o.id)) !== JSON.stringify(o)) {
        events.push({ action: "update", obj: o, old: b.get(o.id) });
      }
    }
    for (const o of after) if (!b.has(o.id)) events.push({ action: "insert", obj: o });
    return events;
  }
}

function randomStream(random, id) {
  return {
    id,
    title: `stream ${id}`,
    live: random() < 0.6,
    public: random() < 0.8,
    // Few distinct times so that ties (broken by id) are common.
    created_at: `2026-11-30T0${Math.floor(random() * 6)}:00:00Z`,
    viewers: Math.floor(random() * 5),
  };
}

describe("replaying random events equals the brute-force model", () => {
  for (const [limit, seed] of [[5, 1], [10, 2], [3, 3], [1, 4], [50, 5], [Infinity, 6], [7, 7], [4, 8]]) {
    test(`limit ${limit}, seed ${seed}`, () => {
      const random = rng(seed);
      const where = (o) => o.live && o.public;
      const model = new Model({ where, order: "-created_at", limit });
      // Initial table, then the client subscribes.
      for (let i = 0; i < 15; i++) model.table.set(i, randomStream(random, i));
      const list = new ViewList({ order: "-created_at", limit });
      list.setState(model.view());
      let events = 0;
      for (let step = 0; step < 1500; step++) {
        const r = random();
        const evs = model.change((table) => {
          const id = Math.floor(random() * 40);
          if (r < 0.2) {
            table.delete(id);
          } else if (r < 0.95) {
            const obj = table.has(id) && random() < 0.5
              ? { ...table.get(id), viewers: Math.floor(random() * 5), live: random() < 0.8 }
              : randomStream(random, id);
            table.set(id, obj);
          } else {
            // A batch of several changes at once.
            for (let k = 0; k < 4; k++) {
              const j = Math.floor(random() * 40);
              if (random() < 0.3) table.delete(j);
              else table.set(j, randomStream(random, j));
            }
          }
        });
        for (const ev of evs) list.apply(ev);
        events += evs.length;
        assert.deepEqual(list.items, model.view(), `diverged at step ${step}`);
        assert.ok(list.length <= limit);
      }
      assert.ok(events > 100, `enough events were exercised (${events})`);
    });
  }

  test("without a limit, any sequence of inserts, updates and deletes", () => {
    const random = rng(99);
    const cmp = makeComparator("-viewers,created_at");
    const table = new Map();
    const list = new ViewList({ order: "-viewers,created_at" });
    for (let step = 0; step < 3000; step++) {
      const id = Math.floor(random() * 60);
      const r = random();
      let ev;
      if (r < 0.25) {
        ev = { action: "delete", obj: { id } };
        table.delete(id);
      } else {
        const obj = randomStream(random, id);
        ev = { action: table.has(id) ? "update" : "insert", obj };
        table.set(id, obj);
      }
      list.apply(ev);
      assert.deepEqual(list.items, [...table.values()].sort(cmp));
    }
  });
});

describe("a new state as a difference", () => {
  test("equal objects keep the held object; setState says whether anything changed", () => {
    const list = new ViewList({ order: "-n", limit: 3 });
    assert.equal(list.setState([{ id: 1, n: 2, tags: ["x"] }, { id: 2, n: 1 }]), true);
    const [a, b] = list.items;
    assert.equal(list.setState([{ n: 2, tags: ["x"], id: 1 }, { id: 2, n: 1 }]), false, "nothing changed");
    assert.equal(list.items[0], a);
    assert.equal(list.items[1], b);
    assert.equal(list.apply({ action: "reset", obj: [{ id: 1, n: 2, tags: ["y"] }, { id: 2, n: 1 }] }), true);
    assert.notEqual(list.items[0], a);
    assert.equal(list.items[1], b);
    assert.equal(list.apply({ action: "reset", obj: [{ id: 2, n: 1 }] }), true, "one left");
    assert.deepEqual(list.items, [b]);
  });

  test("sameValue compares JSON values by value, keys in any order", () => {
    assert.ok(sameValue({ a: 1, b: [1, { c: null }] }, { b: [1, { c: null }], a: 1 }));
    assert.ok(!sameValue({ a: 1 }, { a: 1, b: undefined }));
    assert.ok(!sameValue([1, 2], { 0: 1, 1: 2 }));
    assert.ok(!sameValue({ a: "1" }, { a: 1 }));
    assert.ok(sameValue(NaN, NaN));
    assert.ok(!sameValue(null, {}));
  });
});
