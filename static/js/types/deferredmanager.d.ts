/**
 * One operation: what to call, and the Deferreds of its caller and of the call.
 * @typedef {object} Job
 * @property {(...args: unknown[]) => unknown} fn
 * @property {unknown[]} args
 * @property {Deferred<unknown> | null} op  the operation's own Deferred, once it runs
 * @property {Deferred<unknown>} d          what run() returned
 */
export class DeferredManager {
    /** @param {number} [limit]  operations run at once (a positive integer) */
    constructor(limit?: number);
    limit: number;
    /** Operations running now. */
    running: number;
    /** The most operations ever run at once. */
    peak: number;
    /** @private @type {Job[]} */
    private _queue;
    /** Operations waiting for a free slot. */
    get waiting(): number;
    /**
     * Run fn(...args) when a slot is free. Returns a Deferred for its result
     * (fn may return a value, a Deferred or a Promise, or throw). Cancelling the
     * Deferred of a queued operation removes it from the queue; of a running one,
     * cancels the operation's own Deferred.
     * @template T
     * @template {unknown[]} A
     * @param {(...args: A) => T | PromiseLike<T>} fn
     * @param {A} args
     * @returns {Deferred<T>}
     */
    run<T, A extends unknown[]>(fn: (...args: A) => T | PromiseLike<T>, ...args: A): Deferred<T>;
    /** @private */
    private _next;
}
/**
 * One operation: what to call, and the Deferreds of its caller and of the call.
 */
export type Job = {
    fn: (...args: unknown[]) => unknown;
    args: unknown[];
    /**
     * the operation's own Deferred, once it runs
     */
    op: Deferred<unknown> | null;
    /**
     * what run() returned
     */
    d: Deferred<unknown>;
};
import { Deferred } from "./deferred.js";
