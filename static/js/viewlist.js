// ViewList: the ordered, limited list of a view's objects, kept from the
// initial state and the view's events. Pure logic, no DOM.
//
//   const list = new ViewList({ order: "-created_at", limit: 10 });
//   list.setState(state);
//   list.apply({ action: "insert", obj: {...} });
//   list.items;   // in view order
//
// Order follows the engine: a field, "-" for descending, ties broken by the id
// in the same direction ("-viewers,created_at" and arrays also work: the id
// then follows the direction of the first field). Missing and null values sort
// before every other value (so last in a descending order).
//
// Applying is tolerant, so that a duplicate or stale event cannot corrupt the
// list: insert of a known id replaces it, update of an unknown id inserts it,
// delete of an unknown id does nothing, and the list never grows past `limit`.
//
// A new state (a `reset` event, or the state of a subscription made again) is
// applied as a difference: an object equal to the one the list holds keeps
// the list's object, so a View sees it unchanged and leaves its node alone.

/** @typedef {import("./api.js").Item} Item */
/** @typedef {import("./api.js").PushEvent} PushEvent */

/**
 * An order: "-created_at", "a,-b", ["a", "-b"], or a comparator.
 * @typedef {string | string[] | ((a: Item, b: Item) => number)} Order
 */

/**
 * An object's field by name. A view's objects may be of any object type (a
 * TypeScript interface too, which has no index signature): they are read by
 * the field names the view is given.
 * @param {object} obj
 * @param {string} name
 * @returns {unknown}
 */
export function field(obj, name) {
  return /** @type {Item} */ (obj)[name];
}

/**
 * @param {unknown} v
 * @returns {number}
 */
function typeRank(v) {
  if (v === null || v === undefined) return 0;
  switch (typeof v) {
    case "boolean": return 1;
    case "number": return 2;
    case "string": return 3;
    default: return 4;
  }
}

/**
 * Compare two field values: null/undefined < booleans < numbers < strings < others.
 * @param {unknown} a
 * @param {unknown} b
 * @returns {number}
 */
export function compareValues(a, b) {
  const ra = typeRank(a);
  const rb = typeRank(b);
  if (ra !== rb) return ra - rb;
  if (ra === 0) return 0;
  if (ra === 4) {
    const sa = JSON.stringify(a);
    const sb = JSON.stringify(b);
    return sa < sb ? -1 : sa > sb ? 1 : 0;
  }
  const x = /** @type {string | number | boolean} */ (a);
  const y = /** @type {string | number | boolean} */ (b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Whether two JSON values are equal: the same primitives, arrays of equal
 * values, objects with the same keys (in any order) and equal values.
 * @param {unknown} a
 * @param {unknown} b
 * @returns {boolean}
 */
export function sameValue(a, b) {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") {
    return typeof a === "number" && typeof b === "number" && Number.isNaN(a) && Number.isNaN(b);
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => sameValue(v, b[i]));
  }
  const x = /** @type {Record<string, unknown>} */ (a);
  const y = /** @type {Record<string, unknown>} */ (b);
  const keys = Object.keys(x);
  if (keys.length !== Object.keys(y).length) return false;
  return keys.every((k) => Object.prototype.hasOwnProperty.call(y, k) && sameValue(x[k], y[k]));
}

/**
 * Parse "-created_at" (or "a,-b", or ["a", "-b"]) into [{field, sign}].
 * @param {string | string[]} order
 * @returns {{field: string, sign: 1 | -1}[]}
 */
export function parseOrder(order) {
  const parts = Array.isArray(order) ? order : String(order).split(",");
  return parts.map((p) => p.trim()).filter(Boolean).map((p) => (
    p.startsWith("-") ? { field: p.slice(1), sign: /** @type {const} */ (-1) }
      : { field: p.startsWith("+") ? p.slice(1) : p, sign: /** @type {const} */ (1) }
  ));
}

/**
 * A comparator for objects in view order (a function is returned unchanged;
 * no order: null).
 * @param {Order | null | undefined} order
 * @param {string} [idField]
 * @returns {((a: Item, b: Item) => number) | null}
 */
export function makeComparator(order, idField = "id") {
  if (typeof order === "function") return order;
  if (order === null || order === undefined || order === "") return null;
  const keys = parseOrder(order);
  const idSign = keys.length ? keys[0].sign : 1;
  return (/** @type {Item} */ a, /** @type {Item} */ b) => {
    for (const { field, sign } of keys) {
      const c = compareValues(a[field], b[field]);
      if (c !== 0) return sign * c;
    }
    return idSign * compareValues(a[idField], b[idField]);
  };
}

/**
 * The ordered, limited list of a view's objects.
 * @template {object} [T=Item]
 */
export class ViewList {
  /**
   * @param {object} [options]
   * @param {Order | null} [options.order]  view order; without one,
   *   inserts go to the end and updates stay in place
   * @param {string} [options.idField]  the id field (default "id")
   * @param {number} [options.limit]    the most objects kept
   */
  constructor({ order = null, idField = "id", limit = Infinity } = {}) {
    this.idField = idField;
    this.limit = limit ?? Infinity;
    this.compare = makeComparator(order, idField);
    /** The objects, in view order. @type {T[]} */
    this.items = [];
  }

  get length() {
    return this.items.length;
  }

  /**
   * @param {unknown} id
   * @returns {number}  the index of the object with this id, or -1
   */
  indexOfId(id) {
    const f = this.idField;
    for (let i = 0; i < this.items.length; i++) {
      if (field(this.items[i], f) === id) return i;
    }
    return -1;
  }

  /**
   * @param {unknown} id
   * @returns {T | undefined}
   */
  get(id) {
    const i = this.indexOfId(id);
    return i < 0 ? undefined : this.items[i];
  }

  /**
   * @param {unknown} id
   * @returns {boolean}
   */
  has(id) {
    return this.indexOfId(id) >= 0;
  }

  /**
   * Replace the whole state (the engine's order is kept as given). An object
   * equal to the one held with its id keeps the held object, so that what did
   * not change stays the same object. Returns true when the list changed.
   * @param {T[] | null | undefined} list
   * @returns {boolean}
   */
  setState(list) {
    /** @type {Map<unknown, T>} */
    const held = new Map(this.items.map((o) => [field(o, this.idField), o]));
    const seen = new Set();
    /** @type {T[]} */
    const items = [];
    for (const obj of list ?? []) {
      if (items.length >= this.limit) break;
      const id = field(obj, this.idField);
      if (seen.has(id)) continue;
      seen.add(id);
      const old = held.get(id);
      items.push(old !== undefined && sameValue(old, obj) ? old : obj);
    }
    const changed = items.length !== this.items.length || items.some((o, i) => o !== this.items[i]);
    this.items = items;
    return changed;
  }

  /**
   * Apply one event; returns true when the list changed. `ping` and unknown
   * actions change nothing; a `reset` changes what differs.
   * @param {PushEvent} ev
   * @returns {boolean}
   */
  apply(ev) {
    switch (ev.action) {
      case "insert":
      case "update":
        return this.upsert(/** @type {T} */ (ev.obj));
      case "delete":
        return this.remove(ev.obj?.[this.idField]);
      case "reset":
        return this.setState(/** @type {T[]} */ (ev.obj));
      default:
        return false;
    }
  }

  /**
   * Put `obj` at its place by the order (replacing the object with its id).
   * @param {T} obj
   * @returns {boolean}  whether the list changed
   */
  upsert(obj) {
    const id = field(obj, this.idField);
    const old = this.indexOfId(id);
    if (old >= 0) this.items.splice(old, 1);
    let at;
    if (this.compare === null) {
      at = old >= 0 ? old : this.items.length;
    } else {
      at = this._position(obj);
    }
    if (at >= this.limit) return old >= 0; // it fell past the end
    this.items.splice(at, 0, obj);
    if (this.items.length > this.limit) this.items.length = this.limit;
    return true;
  }

  /**
   * Remove the object with this id.
   * @param {unknown} id
   * @returns {boolean}  whether it was there
   */
  remove(id) {
    const i = this.indexOfId(id);
    if (i < 0) return false;
    this.items.splice(i, 1);
    return true;
  }

  /**
   * The index where obj goes: after every item that sorts before or equal to it.
   * @private
   * @param {T} obj
   * @returns {number}
   */
  _position(obj) {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (/** @type {(a: Item, b: Item) => number} */ (this.compare)(/** @type {Item} */ (this.items[mid]), /** @type {Item} */ (obj)) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
