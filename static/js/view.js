// View: a subscription whose objects are kept in a ViewList and rendered into
// a DOM container. The container's children are the rendered objects, one node
// per object, in view order; a node is kept as long as its object is in the
// view: an object that changed is updated in place (updateItem), one that moved
// is moved, and only entering objects get new nodes.
//
//   class MyView extends View {
//     renderItem(obj) { const li = document.createElement("li"); li.textContent = obj.title; return li; }
//     updateItem(node, obj) { node.textContent = obj.title; }
//   }
//   const view = new MyView({ container, session, method: "stream.subscribe_public_live", limit: 10 });
//   view.subscribe();            // Events (events.js) then keeps it current
//
// Emits "change" (event or {action: "state"}) after each change and "error"
// (failure) when the engine refused the subscription when it was restored.

import { Emitter } from "./emitter.js";
import { ViewList } from "./viewlist.js";

/**
 * Make `container`'s children the nodes of `items` in order, reusing
 * `nodes` (a Map id -> node, updated in place). `make(obj)` builds a node,
 * `update(node, obj, old)` updates one for a changed object (returning a
 * replacement node or nothing). Returns {entered, updated} node lists.
 */
export function reconcile(container, items, nodes, rendered, { idField = "id", make, update }) {
  const entered = [];
  const updated = [];
  const keep = new Map();
  for (const obj of items) {
    const id = obj[idField];
    let node = nodes.get(id);
    if (node === undefined) {
      node = make(obj);
      entered.push(node);
    } else if (rendered.get(id) !== obj) {
      const replacement = update(node, obj, rendered.get(id));
      if (replacement && replacement !== node) {
        node.replaceWith(replacement);
        node = replacement;
      }
      updated.push(node);
    }
    keep.set(id, node);
    rendered.set(id, obj);
  }
  for (const [id, node] of nodes) {
    if (!keep.has(id)) {
      node.remove();
      rendered.delete(id);
    }
  }
  nodes.clear();
  for (const [id, node] of keep) nodes.set(id, node);
  let i = 0;
  for (const node of keep.values()) {
    const current = container.children[i] ?? null;
    if (current !== node) container.insertBefore(node, current);
    i += 1;
  }
  // Anything else in the container (left by someone else) goes.
  while (container.children.length > keep.size) {
    container.children[keep.size].remove();
  }
  return { entered, updated };
}

export class View extends Emitter {
  /**
   * @param {object} options
   * @param {Element} [options.container]  where to render (none: no rendering)
   * @param {Session} [options.session]
   * @param {string} [options.method]   e.g. "stream.subscribe_user"
   * @param {Array} [options.params]    the method's params between sid and limit
   * @param {number} [options.limit]    passed as the last param
   * @param {string} [options.order]    the view's order, e.g. "-created_at"
   * @param {string} [options.idField]
   * @param {Function} [options.renderItem]  (obj) => Element, instead of overriding
   * @param {Function} [options.updateItem]  (node, obj, old) => Element|undefined
   */
  constructor({
    container = null, session = null, method = null, params = [], limit = 10,
    order = null, idField = "id", renderItem = null, updateItem = null,
  } = {}) {
    super();
    this.container = container;
    this.session = session;
    this.method = method;
    this.params = params;
    this.limit = limit;
    this.idField = idField;
    this.list = new ViewList({ order, idField, limit });
    this.subscription = null;
    this.ready = false;
    this.closed = false;
    this._nodes = new Map();
    this._rendered = new Map();
    if (renderItem) this.renderItem = renderItem;
    if (updateItem) this.updateItem = updateItem;
    if (container) container.replaceChildren();
  }

  get items() {
    return this.list.items;
  }

  get key() {
    return this.subscription?.key ?? null;
  }

  /** Subscribe (method with [...params, limit]); fires with the Subscription. */
  subscribe() {
    this.closed = false;
    return this.session.subscribe(this.method, [...this.params, this.limit], this)
      .addCallback((sub) => {
        if (this.closed) {
          // unsubscribe() came while the subscribe was on its way.
          sub.unsubscribe().addErrback(() => undefined);
          return sub;
        }
        this.subscription = sub;
        return sub;
      });
  }

  /** Stop the subscription; the view no longer changes (also when its subscribe is still on its way). */
  unsubscribe() {
    this.closed = true;
    const sub = this.subscription;
    this.subscription = null;
    return sub ? sub.unsubscribe() : null;
  }

  // -- the handler interface of session.js / events.js ----------------------

  setState(state, sub = null) {
    if (this.closed) return;
    if (sub) this.subscription = sub;
    this.list.setState(state);
    this.ready = true;
    this.render(null);
    this.emit("change", { action: "state" });
  }

  apply(ev) {
    if (this.closed || ev.action === "ping") return;
    if (this.list.apply(ev)) this.render(ev);
    this.emit("change", ev);
  }

  onError(failure) {
    this.emit("error", failure);
  }

  // -- rendering -------------------------------------------------------------

  /** Build the node of an object. Override (or pass renderItem). */
  renderItem(obj) {
    const li = this.container.ownerDocument.createElement("li");
    li.textContent = JSON.stringify(obj);
    return li;
  }

  /** Update the node of a changed object; return a new node to replace it. */
  updateItem(node, obj) {
    return this.renderItem(obj);
  }

  render(ev) {
    if (!this.container) return;
    const { entered, updated } = reconcile(this.container, this.list.items, this._nodes, this._rendered, {
      idField: this.idField,
      make: (obj) => this.renderItem(obj),
      update: (node, obj, old) => this.updateItem(node, obj, old),
    });
    if (ev && ev.action !== "reset") {
      for (const node of entered) flash(node, "pe-entered");
      for (const node of updated) flash(node, "pe-updated");
    }
  }

  /** The node of the object with this id, if it is shown. */
  nodeFor(id) {
    return this._nodes.get(id);
  }
}

/** Restart a CSS animation class on a node. */
export function flash(node, cls) {
  if (!node.classList) return;
  node.classList.remove(cls);
  void node.offsetWidth; // let the browser see the removal
  node.classList.add(cls);
}
