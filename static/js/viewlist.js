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

function typeRank(v) {
  if (v === null || v === undefined) return 0;
  switch (typeof v) {
    case "boolean": return 1;
    case "number": return 2;
    case "string": return 3;
    default: return 4;
  }
}

/** Compare two field values: null/undefined < booleans < numbers < strings < others. */
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
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Parse "-created_at" (or "a,-b", or ["a", "-b"]) into [{field, sign}]. */
export function parseOrder(order) {
  const parts = Array.isArray(order) ? order : String(order).split(",");
  return parts.map((p) => p.trim()).filter(Boolean).map((p) => (
    p.startsWith("-") ? { field: p.slice(1), sign: -1 }
      : { field: p.startsWith("+") ? p.slice(1) : p, sign: 1 }
  ));
}

/** A comparator for objects in view order (a function is returned unchanged). */
export function makeComparator(order, idField = "id") {
  if (typeof order === "function") return order;
  if (order === null || order === undefined || order === "") return null;
  const keys = parseOrder(order);
  const idSign = keys.length ? keys[0].sign : 1;
  return (a, b) => {
    for (const { field, sign } of keys) {
      const c = compareValues(a[field], b[field]);
      if (c !== 0) return sign * c;
    }
    return idSign * compareValues(a[idField], b[idField]);
  };
}

export class ViewList {
  /**
   * @param {object} [options]
   * @param {string|string[]|Function} [options.order]  view order; without one,
   *   inserts go to the end and updates stay in place
   * @param {string} [options.idField]  the id field (default "id")
   * @param {number} [options.limit]    the most objects kept
   */
  constructor({ order = null, idField = "id", limit = Infinity } = {}) {
    this.idField = idField;
    this.limit = limit ?? Infinity;
    this.compare = makeComparator(order, idField);
    this.items = [];
  }

  get length() {
    return this.items.length;
  }

  indexOfId(id) {
    const f = this.idField;
    for (let i = 0; i < this.items.length; i++) {
      if (this.items[i][f] === id) return i;
    }
    return -1;
  }

  get(id) {
    const i = this.indexOfId(id);
    return i < 0 ? undefined : this.items[i];
  }

  has(id) {
    return this.indexOfId(id) >= 0;
  }

  /** Replace the whole state (the engine's order is kept as given). */
  setState(list) {
    const seen = new Set();
    const items = [];
    for (const obj of list ?? []) {
      const id = obj[this.idField];
      if (seen.has(id)) continue;
      seen.add(id);
      items.push(obj);
    }
    this.items = items.slice(0, this.limit);
  }

  /**
   * Apply one event; returns true when the list changed. `ping` and unknown
   * actions change nothing.
   */
  apply(ev) {
    switch (ev.action) {
      case "insert":
      case "update":
        return this.upsert(ev.obj);
      case "delete":
        return this.remove(ev.obj?.[this.idField]);
      case "reset":
        this.setState(ev.obj);
        return true;
      default:
        return false;
    }
  }

  /** Put `obj` at its place by the order (replacing the object with its id). */
  upsert(obj) {
    const id = obj[this.idField];
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

  remove(id) {
    const i = this.indexOfId(id);
    if (i < 0) return false;
    this.items.splice(i, 1);
    return true;
  }

  /** The index where obj goes: after every item that sorts before or equal to it. */
  _position(obj) {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.compare(this.items[mid], obj) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
