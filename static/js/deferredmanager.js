// DeferredManager: run at most `limit` operations at once; the rest wait in a
// FIFO queue (like twisted.internet.defer.DeferredSemaphore.run).
//
//   const manager = new DeferredManager(4);
//   manager.run(loadUser, 17).addCallback(render);

import { Deferred, Failure, maybeDeferred } from "./deferred.js";

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
  constructor(limit = 4) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError("the limit must be a positive integer");
    }
    this.limit = limit;
    /** Operations running now. */
    this.running = 0;
    /** The most operations ever run at once. */
    this.peak = 0;
    /** @private @type {Job[]} */
    this._queue = [];
  }

  /** Operations waiting for a free slot. */
  get waiting() {
    return this._queue.length;
  }

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
  run(fn, ...args) {
    /** @type {Job} */
    const job = {
      fn: /** @type {(...args: unknown[]) => unknown} */ (fn), args, op: null,
      d: /** @type {Deferred<unknown>} */ (/** @type {unknown} */ (null)),
    };
    /** @type {Deferred<T>} */
    const d = new Deferred(() => {
      const i = this._queue.indexOf(job);
      if (i >= 0) this._queue.splice(i, 1);
      else if (job.op) job.op.cancel();
    });
    job.d = /** @type {Deferred<unknown>} */ (d);
    this._queue.push(job);
    this._next();
    return d;
  }

  /** @private */
  _next() {
    while (this.running < this.limit && this._queue.length > 0) {
      const job = /** @type {Job} */ (this._queue.shift());
      this.running += 1;
      this.peak = Math.max(this.peak, this.running);
      job.op = maybeDeferred(job.fn, ...job.args);
      job.op.addBoth((r) => {
        this.running -= 1;
        if (!job.d.called) {
          if (r instanceof Failure) job.d.errback(r);
          else job.d.callback(r);
        }
        // Start the next one outside this chain so deep queues do not recurse.
        queueMicrotask(() => this._next());
        return undefined;
      });
    }
  }
}
