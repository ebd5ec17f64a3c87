// View: a subscription whose objects are kept in a ViewList and rendered into
// a DOM container. The container's children are the rendered objects, one node
// per object, in view order; a node is kept as long as its object is in the
// view: an object that changed is updated in place (updateItem), one that moved
// is moved, and only entering objects get new nodes. A `reset` (and the state
// of a subscription made again in a new session) is applied as a difference:
// the node of an object that did not change is left as it is.
//
//   class MyView extends View {
//     renderItem(obj) { const li = document.createElement("li"); li.textContent = obj.title; return li; }
//     updateItem(node, obj) { node.textContent = obj.title; }
//   }
//   const view = new MyView({ container, session, method: "stream.subscribe_public_live", limit: 10 });
//   await view.subscribe();      // Events (events.js) then keeps it current
//   await view.until((items) => items.length > 0, { signal });
//
// Emits "change" (event or {action: "state"}) after each change and "error"
// (failure) when the engine refused the subscription when it was restored.

import { Deferred, abortable } from "./deferred.js";
import { Emitter } from "./emitter.js";
import { ViewList, field, sameValue } from "./viewlist.js";

/** @typedef {import("./api.js").Item} Item */
/** @typedef {import("./api.js").PushEvent} PushEvent */
/** @typedef {import("./viewlist.js").Order} Order */
/** @typedef {import("./deferred.js").Failure} Failure */
/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./session.js").Subscription} Subscription */

/**
 * What a View emits: "change" after each change (the event, or {action:
 * "state"} for a new state), "error" when the engine refused the
 * subscription when it was restored.
 * @typedef {object} ViewEvents
 * @property {[change: PushEvent | {action: "state"}]} change
 * @property {[failure: Failure]} error
 */

/**
 * Make `container`'s children the nodes of `items` in order, reusing
 * `nodes` (a Map id -> node, updated in place). `make(obj)` builds a node,
 * `update(node, obj, old)` updates one for a changed object (returning a
 * replacement node or nothing); an object equal to the one rendered
 * (`rendered`, a Map id -> object) is not updated. Returns {entered, updated}
 * node lists.
 * @template {object} T
 * @param {Element} container
 * @param {T[]} items
 * @param {Map<unknown, Element>} nodes
 * @param {Map<unknown, T>} rendered
 * @param {{idField?: string, make: (obj: T) => Element, update: (node: Element, obj: T, old: T) => Element | void | undefined}} options
 * @returns {{entered: Element[], updated: Element[]}}
 */
export function reconcile(container, items, nodes, rendered, { idField = "id", make, update }) {
  /** @type {Element[]} */
  const entered = [];
  /** @type {Element[]} */
  const updated = [];
  /** @type {Map<unknown, Element>} */
  const keep = new Map();
  for (const obj of items) {
    const id = field(obj, idField);
    let node = nodes.get(id);
    const old = rendered.get(id);
    if (node === undefined) {
      node = make(obj);
      entered.push(node);
    } else if (old !== obj && (old === undefined || !sameValue(old, obj))) {
      const replacement = update(node, obj, /** @type {T} */ (old));
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

/**
 * The options of a View.
 * @template {object} [T=Item]
 * @typedef {object} ViewOptions
 * @property {Element | null} [container]  where to render (none: no rendering)
 * @property {Session | null} [session]
 * @property {string | null} [method]   e.g. "stream.subscribe_user"
 * @property {unknown[]} [params]       the method's params between sid and limit
 * @property {number} [limit]           passed as the last param
 * @property {Order | null} [order]     the view's order, e.g. "-created_at"
 * @property {string} [idField]
 * @property {((obj: T) => Element) | null} [renderItem]  instead of overriding
 * @property {((node: Element, obj: T, old: T) => Element | void) | null} [updateItem]
 */

/**
 * A subscription rendered into a DOM container (or, without one, just kept).
 * @template {object} [T=Item]
 * @extends {Emitter<ViewEvents & import("./emitter.js").EventMap>}
 */
export class View extends Emitter {
  /** @param {ViewOptions<T>} [options] */
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
    /** @type {ViewList<T>} */
    this.list = new ViewList({ order, idField, limit });
    /** @type {Subscription | null} */
    this.subscription = null;
    /** Whether it has its first state. */
    this.ready = false;
    this.closed = false;
    /** @private @type {Map<unknown, Element>} */
    this._nodes = new Map();
    /** @private @type {Map<unknown, T>} */
    this._rendered = new Map();
    if (renderItem) this.renderItem = renderItem;
    if (updateItem) this.updateItem = updateItem;
    if (container) container.replaceChildren();
  }

  /** The objects, in view order. */
  get items() {
    return this.list.items;
  }

  /** The engine's key of the view, once subscribed. */
  get key() {
    return this.subscription?.key ?? null;
  }

  /**
   * Subscribe (method with [...params, limit]); fires with the Subscription.
   * `signal` cancels the call.
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<Subscription>}
   */
  subscribe({ signal = null } = {}) {
    if (!this.session || !this.method) {
      throw new TypeError("a View needs a session and a method to subscribe");
    }
    this.closed = false;
    return this.session.subscribe(this.method, [...this.params, this.limit], this, { signal })
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

  /**
   * Stop the subscription; the view no longer changes (also when its
   * subscribe is still on its way). Fires with true when the engine was told.
   * @returns {Deferred<boolean> | null}
   */
  unsubscribe() {
    this.closed = true;
    const sub = this.subscription;
    this.subscription = null;
    return sub ? sub.unsubscribe() : null;
  }

  /**
   * A Deferred that fires with the items once `predicate(items)` holds (at
   * once when it does now): checked on the first state and after every
   * change. The default predicate waits for the first state. `signal` (or
   * `timeout`, ms) cancels the wait.
   * @param {(items: T[], view: View<T>) => boolean} [predicate]
   * @param {{signal?: AbortSignal | null, timeout?: number}} [options]
   * @returns {Deferred<T[]>}
   */
  until(predicate = () => this.ready, { signal = null, timeout = 0 } = {}) {
    /** @type {(() => void) | null} */
    let off = null;
    /** @type {Deferred<T[]>} */
    const d = new Deferred(() => off?.());
    const check = () => {
      if (d.called || !this.ready) return;
      let ok = false;
      try {
        ok = predicate(this.items, this);
      } catch (e) {
        off?.();
        d.errback(e);
        return;
      }
      if (ok) {
        off?.();
        d.callback(this.items);
      }
    };
    off = this.on("change", check);
    check();
    if (timeout && !d.called) d.addTimeout(timeout);
    return abortable(d, signal);
  }

  // -- the handler interface of session.js / events.js ----------------------

  /**
   * A new state (the subscribe answer, or the state of the subscription made
   * again): applied as a difference.
   * @param {Item[]} state
   * @param {Subscription | null} [sub]
   */
  setState(state, sub = null) {
    if (this.closed) return;
    if (sub) this.subscription = sub;
    this.list.setState(/** @type {T[]} */ (state));
    this.ready = true;
    this.render(null);
    this.emit("change", { action: "state" });
  }

  /**
   * One event of the subscription.
   * @param {PushEvent} ev
   */
  apply(ev) {
    if (this.closed || ev.action === "ping") return;
    if (this.list.apply(ev)) this.render(ev);
    this.emit("change", ev);
  }

  /** @param {Failure} failure */
  onError(failure) {
    this.emit("error", failure);
  }

  // -- rendering -------------------------------------------------------------

  /**
   * Build the node of an object. Override (or pass renderItem).
   * @param {T} obj
   * @returns {Element}
   */
  renderItem(obj) {
    const li = /** @type {Element} */ (this.container).ownerDocument.createElement("li");
    li.textContent = JSON.stringify(obj);
    return li;
  }

  /**
   * Update the node of a changed object; return a new node to replace it.
   * @param {Element} node
   * @param {T} obj
   * @param {T} old
   * @returns {Element | void}
   */
  updateItem(node, obj, old) { // eslint-disable-line no-unused-vars
    return this.renderItem(obj);
  }

  /**
   * Make the container show the list; the nodes that entered or changed
   * through an event (a reset too) get `pe-entered` / `pe-updated`.
   * @param {PushEvent | null} ev
   */
  render(ev) {
    if (!this.container) return;
    const { entered, updated } = reconcile(this.container, this.list.items, this._nodes, this._rendered, {
      idField: this.idField,
      make: (obj) => this.renderItem(obj),
      update: (node, obj, old) => this.updateItem(node, obj, old),
    });
    if (ev) {
      for (const node of entered) flash(node, "pe-entered");
      for (const node of updated) flash(node, "pe-updated");
    }
  }

  /**
   * The node of the object with this id, if it is shown.
   * @param {unknown} id
   * @returns {Element | undefined}
   */
  nodeFor(id) {
    return this._nodes.get(id);
  }
}

/**
 * Restart a CSS animation class on a node.
 * @param {Element} node
 * @param {string} cls
 */
export function flash(node, cls) {
  if (!node.classList) return;
  node.classList.remove(cls);
  void (/** @type {HTMLElement} */ (node)).offsetWidth; // let the browser see the removal
  node.classList.add(cls);
}
