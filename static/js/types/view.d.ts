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
export function reconcile<T extends object>(container: Element, items: T[], nodes: Map<unknown, Element>, rendered: Map<unknown, T>, { idField, make, update }: {
    idField?: string;
    make: (obj: T) => Element;
    update: (node: Element, obj: T, old: T) => Element | void | undefined;
}): {
    entered: Element[];
    updated: Element[];
};
/**
 * Restart a CSS animation class on a node.
 * @param {Element} node
 * @param {string} cls
 */
export function flash(node: Element, cls: string): void;
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
export class View<T extends object = import("./api.js").Item> extends Emitter<ViewEvents & import("./emitter.js").EventMap> {
    /** @param {ViewOptions<T>} [options] */
    constructor({ container, session, method, params, limit, order, idField, renderItem, updateItem, }?: ViewOptions<T>);
    container: Element | null;
    session: import("./session.js").Session | null;
    method: string | null;
    params: unknown[];
    limit: number;
    idField: string;
    /** @type {ViewList<T>} */
    list: ViewList<T>;
    /** @type {Subscription | null} */
    subscription: Subscription | null;
    /** Whether it has its first state. */
    ready: boolean;
    closed: boolean;
    /** @private @type {Map<unknown, Element>} */
    private _nodes;
    /** @private @type {Map<unknown, T>} */
    private _rendered;
    /**
     * Build the node of an object. Override (or pass renderItem).
     * @param {T} obj
     * @returns {Element}
     */
    renderItem(obj: T): Element;
    /**
     * Update the node of a changed object; return a new node to replace it.
     * @param {Element} node
     * @param {T} obj
     * @param {T} old
     * @returns {Element | void}
     */
    updateItem(node: Element, obj: T, old: T): Element | void;
    /** The objects, in view order. */
    get items(): T[];
    /** The engine's key of the view, once subscribed. */
    get key(): string | null;
    /**
     * Subscribe (method with [...params, limit]); fires with the Subscription.
     * `signal` cancels the call.
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<Subscription>}
     */
    subscribe({ signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<Subscription>;
    /**
     * Stop the subscription; the view no longer changes (also when its
     * subscribe is still on its way). Fires with true when the engine was told.
     * @returns {Deferred<boolean> | null}
     */
    unsubscribe(): Deferred<boolean> | null;
    /**
     * A Deferred that fires with the items once `predicate(items)` holds (at
     * once when it does now): checked on the first state and after every
     * change. The default predicate waits for the first state. `signal` (or
     * `timeout`, ms) cancels the wait.
     * @param {(items: T[], view: View<T>) => boolean} [predicate]
     * @param {{signal?: AbortSignal | null, timeout?: number}} [options]
     * @returns {Deferred<T[]>}
     */
    until(predicate?: (items: T[], view: View<T>) => boolean, { signal, timeout }?: {
        signal?: AbortSignal | null;
        timeout?: number;
    }): Deferred<T[]>;
    /**
     * A new state (the subscribe answer, or the state of the subscription made
     * again): applied as a difference.
     * @param {Item[]} state
     * @param {Subscription | null} [sub]
     */
    setState(state: Item[], sub?: Subscription | null): void;
    /**
     * One event of the subscription.
     * @param {PushEvent} ev
     */
    apply(ev: PushEvent): void;
    /** @param {Failure} failure */
    onError(failure: Failure): void;
    /**
     * Make the container show the list; the nodes that entered or changed
     * through an event (a reset too) get `pe-entered` / `pe-updated`.
     * @param {PushEvent | null} ev
     */
    render(ev: PushEvent | null): void;
    /**
     * The node of the object with this id, if it is shown.
     * @param {unknown} id
     * @returns {Element | undefined}
     */
    nodeFor(id: unknown): Element | undefined;
}
export type Item = import("./api.js").Item;
export type PushEvent = import("./api.js").PushEvent;
export type Order = import("./viewlist.js").Order;
export type Failure = import("./deferred.js").Failure;
export type Session = import("./session.js").Session;
export type Subscription = import("./session.js").Subscription;
/**
 * What a View emits: "change" after each change (the event, or {action:
 * "state"} for a new state), "error" when the engine refused the
 * subscription when it was restored.
 */
export type ViewEvents = {
    change: [change: PushEvent | {
        action: "state";
    }];
    error: [failure: Failure];
};
/**
 * The options of a View.
 */
export type ViewOptions<T extends object = import("./api.js").Item> = {
    /**
     * where to render (none: no rendering)
     */
    container?: Element | null | undefined;
    session?: import("./session.js").Session | null | undefined;
    /**
     * e.g. "stream.subscribe_user"
     */
    method?: string | null | undefined;
    /**
     * the method's params between sid and limit
     */
    params?: unknown[] | undefined;
    /**
     * passed as the last param
     */
    limit?: number | undefined;
    /**
     * the view's order, e.g. "-created_at"
     */
    order?: import("./viewlist.js").Order | null | undefined;
    idField?: string | undefined;
    /**
     * instead of overriding
     */
    renderItem?: ((obj: T) => Element) | null | undefined;
    updateItem?: ((node: Element, obj: T, old: T) => Element | void) | null | undefined;
};
import { Emitter } from "./emitter.js";
import { ViewList } from "./viewlist.js";
import { Deferred } from "./deferred.js";
