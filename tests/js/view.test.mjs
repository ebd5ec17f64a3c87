// view.js: rendering a view into a container, keeping the nodes of unchanged objects.
import { test } from "node:test";
import assert from "node:assert/strict";

import { View } from "../../static/js/view.js";

/** Just enough DOM for View: elements with children, insertBefore, remove. */
class FakeElement {
  constructor(doc, tag) {
    this.ownerDocument = doc;
    this.tagName = tag.toUpperCase();
    this.children = [];
    this.parentNode = null;
    this.textContent = "";
    this.offsetWidth = 0;
    const classes = new Set();
    this.classList = {
      add: (c) => classes.add(c),
      remove: (c) => classes.delete(c),
      contains: (c) => classes.has(c),
    };
  }

  insertBefore(node, ref) {
    if (ref !== null && ref.parentNode !== this) throw new Error("ref is not a child");
    node.remove();
    const i = ref === null ? this.children.length : this.children.indexOf(ref);
    this.children.splice(i, 0, node);
    node.parentNode = this;
    this.ownerDocument.moves += 1;
  }

  remove() {
    if (!this.parentNode) return;
    const p = this.parentNode;
    p.children.splice(p.children.indexOf(this), 1);
    this.parentNode = null;
  }

  replaceWith(node) {
    const p = this.parentNode;
    node.remove();
    p.children.splice(p.children.indexOf(this), 1, node);
    node.parentNode = p;
    this.parentNode = null;
  }

  replaceChildren(...nodes) {
    for (const c of this.children) c.parentNode = null;
    this.children = [];
    for (const n of nodes) this.insertBefore(n, null);
  }
}

class FakeDocument {
  constructor() { this.moves = 0; }
  createElement(tag) { return new FakeElement(this, tag); }
}

function rng(seed) {
  let s = seed;
  return () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648;
}

function makeView(extra = {}) {
  const doc = new FakeDocument();
  const container = doc.createElement("ol");
  container.children.push(doc.createElement("p")); // left over: View clears it
  const counts = { made: 0, updated: 0 };
  const view = new View({
    container,
    order: "-n",
    limit: 5,
    renderItem(obj) {
      counts.made += 1;
      const li = doc.createElement("li");
      li.textContent = `${obj.id}:${obj.n}:${obj.title ?? ""}`;
      li.objId = obj.id;
      return li;
    },
    updateItem(node, obj) {
      counts.updated += 1;
      node.textContent = `${obj.id}:${obj.n}:${obj.title ?? ""}`;
    },
    ...extra,
  });
  return { doc, container, view, counts };
}

const shown = (container) => container.children.map((c) => c.objId);

test("the container shows the state in order", () => {
  const { container, view } = makeView();
  assert.equal(container.children.length, 0);
  view.setState([{ id: 1, n: 9 }, { id: 2, n: 5 }]);
  assert.deepEqual(shown(container), [1, 2]);
  assert.ok(view.ready);
});

test("an update in place touches only its node", () => {
  const { doc, container, view, counts } = makeView();
  view.setState([{ id: 1, n: 9 }, { id: 2, n: 5 }, { id: 3, n: 1 }]);
  const before = [...container.children];
  doc.moves = 0;
  view.apply({ action: "update", obj: { id: 2, n: 5, title: "renamed" } });
  assert.deepEqual([...container.children], before, "same nodes");
  assert.equal(doc.moves, 0, "nothing moved");
  assert.equal(counts.updated, 1);
  assert.equal(container.children[1].textContent, "2:5:renamed");
  assert.ok(container.children[1].classList.contains("pe-updated"));
});

test("insert, move and delete keep the other nodes", () => {
  const { container, view, counts } = makeView();
  view.setState([{ id: 1, n: 9 }, { id: 2, n: 5 }, { id: 3, n: 1 }]);
  const [n1, n2, n3] = container.children;
  view.apply({ action: "insert", obj: { id: 4, n: 7 } });
  assert.deepEqual(shown(container), [1, 4, 2, 3]);
  assert.ok(container.children[1].classList.contains("pe-entered"));
  view.apply({ action: "update", obj: { id: 3, n: 10 } });
  assert.deepEqual(shown(container), [3, 1, 4, 2]);
  assert.equal(container.children[0], n3, "a moved node is the same node");
  view.apply({ action: "delete", obj: { id: 1 } });
  assert.deepEqual(shown(container), [3, 4, 2]);
  assert.equal(n1.parentNode, null);
  assert.equal(container.children[2], n2);
  assert.equal(counts.made, 4);
});

test("the limit holds in the DOM", () => {
  const { container, view } = makeView();
  view.setState([]);
  for (let i = 0; i < 20; i++) {
    view.apply({ action: "insert", obj: { id: i, n: i } });
    assert.ok(container.children.length <= 5);
  }
  assert.deepEqual(shown(container), [19, 18, 17, 16, 15]);
});

test("a replacement node from updateItem takes the old node's place", () => {
  const { container, view } = makeView({
    updateItem(node, obj) {
      const li = node.ownerDocument.createElement("li");
      li.objId = obj.id;
      li.textContent = "replaced";
      return li;
    },
  });
  view.setState([{ id: 1, n: 2 }, { id: 2, n: 1 }]);
  view.apply({ action: "update", obj: { id: 1, n: 2, title: "x" } });
  assert.equal(container.children[0].textContent, "replaced");
  assert.deepEqual(shown(container), [1, 2]);
  assert.equal(view.nodeFor(1), container.children[0]);
});

test("random events: the DOM always equals the list, nodes live as long as their objects", () => {
  const random = rng(11);
  const { container, view } = makeView({ limit: 8 });
  view.setState([]);
  const nodeOf = new Map();
  for (let step = 0; step < 2000; step++) {
    const id = Math.floor(random() * 20);
    const r = random();
    if (r < 0.3) view.apply({ action: "delete", obj: { id } });
    else view.apply({ action: r < 0.6 ? "insert" : "update", obj: { id, n: Math.floor(random() * 10), title: String(step) } });
    assert.deepEqual(shown(container), view.items.map((o) => o.id));
    for (const node of container.children) {
      const text = `${node.objId}:${view.list.get(node.objId).n}:${view.list.get(node.objId).title ?? ""}`;
      assert.equal(node.textContent, text);
    }
    // A node stays the same while its object stays in the view.
    const now = new Map(container.children.map((n) => [n.objId, n]));
    for (const [oid, node] of now) {
      if (nodeOf.has(oid) && nodeOf.get(oid).parentNode === container) assert.equal(node, nodeOf.get(oid));
    }
    for (const [oid] of nodeOf) if (!now.has(oid)) nodeOf.delete(oid);
    for (const [oid, node] of now) nodeOf.set(oid, node);
  }
});

test("ping changes nothing; change events are emitted", () => {
  const { view } = makeView();
  const seen = [];
  view.on("change", (ev) => seen.push(ev.action));
  view.setState([{ id: 1, n: 1 }]);
  view.apply({ action: "ping" });
  view.apply({ action: "insert", obj: { id: 2, n: 2 } });
  assert.deepEqual(seen, ["state", "insert"]);
});

// -- a reset is applied as a difference -------------------------------------------

const copy = (list) => JSON.parse(JSON.stringify(list));

test("a reset keeps the node of every object that did not change, and redraws nothing else", () => {
  const { container, view, counts } = makeView();
  const state = [{ id: 1, n: 9, title: "a" }, { id: 2, n: 5, title: "b" }, { id: 3, n: 1, title: "c" }];
  view.setState(state);
  const [n1, n2, n3] = container.children;
  const made = counts.made;
  // The same objects again (new objects from the wire, equal in value), one changed, one new, one gone.
  view.apply({ action: "reset", obj: [{ title: "a", n: 9, id: 1 }, { id: 2, n: 5, title: "B" }, { id: 4, n: 0 }] });
  assert.deepEqual(shown(container), [1, 2, 4]);
  assert.equal(container.children[0], n1, "an unchanged object keeps its node");
  assert.equal(container.children[1], n2, "a changed one is updated in place");
  assert.equal(n3.parentNode, null, "a gone one is removed");
  assert.equal(counts.updated, 1, "only the changed object was redrawn");
  assert.equal(counts.made, made + 1, "only the new object got a node");
  assert.equal(n2.textContent, "2:5:B");
  assert.ok(!n1.classList.contains("pe-updated") && !n1.classList.contains("pe-entered"));
  assert.ok(n2.classList.contains("pe-updated"));
  assert.ok(container.children[2].classList.contains("pe-entered"));
});

test("a reset with nothing changed touches no node (also with the default updateItem, which replaces nodes)", () => {
  const doc = new FakeDocument();
  const container = doc.createElement("ol");
  const view = new View({ container, order: "-n", limit: 5 });
  const state = [{ id: 1, n: 2 }, { id: 2, n: 1 }];
  view.setState(state);
  const before = [...container.children];
  doc.moves = 0;
  let changes = 0;
  view.on("change", () => { changes += 1; });
  view.apply({ action: "reset", obj: copy(state) });
  assert.deepEqual([...container.children], before, "the same nodes");
  assert.equal(doc.moves, 0, "nothing moved");
  assert.equal(changes, 1, "the reset is still reported");
  // The state of a subscription made again (a new session) is a difference too.
  view.setState(copy(state));
  assert.deepEqual([...container.children], before);
  assert.equal(doc.moves, 0);
});

test("random resets: the DOM equals the list, unchanged objects keep their nodes, only changed ones are redrawn", () => {
  const random = rng(29);
  const { container, view, counts } = makeView({ limit: 8 });
  view.setState([]);
  for (let step = 0; step < 300; step++) {
    const before = new Map(container.children.map((node) => [node.objId, node]));
    const held = new Map(view.items.map((o) => [o.id, o]));
    // A new state: some of the held objects as they are, some changed, some new.
    const next = [];
    for (let id = 0; id < 12; id++) {
      const r = random();
      if (r < 0.4 && held.has(id)) next.push({ ...held.get(id) });
      else if (r < 0.6) next.push({ id, n: Math.floor(random() * 10), title: String(step) });
    }
    next.sort((a, b) => b.n - a.n || b.id - a.id);
    const updatedBefore = counts.updated;
    view.apply({ action: "reset", obj: next });
    assert.deepEqual(shown(container), next.slice(0, 8).map((o) => o.id));
    let changed = 0;
    for (const node of container.children) {
      const obj = view.list.get(node.objId);
      assert.equal(node.textContent, `${obj.id}:${obj.n}:${obj.title ?? ""}`);
      const old = held.get(node.objId);
      if (old && before.has(node.objId)) {
        assert.equal(node, before.get(node.objId), "a node stays while its object stays");
        if (JSON.stringify(old) !== JSON.stringify(obj)) changed += 1;
        else assert.equal(obj, old, "an equal object stays the same object");
      }
    }
    assert.equal(counts.updated - updatedBefore, changed, "updateItem ran for the changed objects alone");
  }
});
