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
export function field(obj: object, name: string): unknown;
/**
 * Compare two field values: null/undefined < booleans < numbers < strings < others.
 * @param {unknown} a
 * @param {unknown} b
 * @returns {number}
 */
export function compareValues(a: unknown, b: unknown): number;
/**
 * Whether two JSON values are equal: the same primitives, arrays of equal
 * values, objects with the same keys (in any order) and equal values.
 * @param {unknown} a
 * @param {unknown} b
 * @returns {boolean}
 */
export function sameValue(a: unknown, b: unknown): boolean;
/**
 * Parse "-created_at" (or "a,-b", or ["a", "-b"]) into [{field, sign}].
 * @param {string | string[]} order
 * @returns {{field: string, sign: 1 | -1}[]}
 */
export function parseOrder(order: string | string[]): {
    field: string;
    sign: 1 | -1;
}[];
/**
 * A comparator for objects in view order (a function is returned unchanged;
 * no order: null).
 * @param {Order | null | undefined} order
 * @param {string} [idField]
 * @returns {((a: Item, b: Item) => number) | null}
 */
export function makeComparator(order: Order | null | undefined, idField?: string): ((a: Item, b: Item) => number) | null;
/**
 * The ordered, limited list of a view's objects.
 * @template {object} [T=Item]
 */
export class ViewList<T extends object = import("./api.js").Item> {
    /**
     * @param {object} [options]
     * @param {Order | null} [options.order]  view order; without one,
     *   inserts go to the end and updates stay in place
     * @param {string} [options.idField]  the id field (default "id")
     * @param {number} [options.limit]    the most objects kept
     */
    constructor({ order, idField, limit }?: {
        order?: Order | null | undefined;
        idField?: string | undefined;
        limit?: number | undefined;
    });
    idField: string;
    limit: number;
    compare: ((a: Item, b: Item) => number) | null;
    /** The objects, in view order. @type {T[]} */
    items: T[];
    get length(): number;
    /**
     * @param {unknown} id
     * @returns {number}  the index of the object with this id, or -1
     */
    indexOfId(id: unknown): number;
    /**
     * @param {unknown} id
     * @returns {T | undefined}
     */
    get(id: unknown): T | undefined;
    /**
     * @param {unknown} id
     * @returns {boolean}
     */
    has(id: unknown): boolean;
    /**
     * Replace the whole state (the engine's order is kept as given). An object
     * equal to the one held with its id keeps the held object, so that what did
     * not change stays the same object. Returns true when the list changed.
     * @param {T[] | null | undefined} list
     * @returns {boolean}
     */
    setState(list: T[] | null | undefined): boolean;
    /**
     * Apply one event; returns true when the list changed. `ping` and unknown
     * actions change nothing; a `reset` changes what differs.
     * @param {PushEvent} ev
     * @returns {boolean}
     */
    apply(ev: PushEvent): boolean;
    /**
     * Put `obj` at its place by the order (replacing the object with its id).
     * @param {T} obj
     * @returns {boolean}  whether the list changed
     */
    upsert(obj: T): boolean;
    /**
     * Remove the object with this id.
     * @param {unknown} id
     * @returns {boolean}  whether it was there
     */
    remove(id: unknown): boolean;
    /**
     * The index where obj goes: after every item that sorts before or equal to it.
     * @private
     * @param {T} obj
     * @returns {number}
     */
    private _position;
}
export type Item = import("./api.js").Item;
export type PushEvent = import("./api.js").PushEvent;
/**
 * An order: "-created_at", "a,-b", ["a", "-b"], or a comparator.
 */
export type Order = string | string[] | ((a: Item, b: Item) => number);
