// DeferredManager: run at most `limit` operations at once; the rest wait in a
// FIFO queue (like twisted.internet.defer.DeferredSemaphore.run).
//
//   const manager = new DeferredManager(4);
//   manager.run(loadUser, 17).addCallback(render);

import { Deferred, Failure, maybeDeferred } from "./deferred.js";

export class DeferredManager {
  constructor(limit = 4) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError("the limit must be a positive integer");
    }
    this.limit = limit;
    this.running = 0;
    this.peak = 0; // the most operations ever run at once
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
   */
  run(fn, ...args) {
    const job = { fn, args, op: null };
    const d = new Deferred(() => {
      const i = this._queue.indexOf(job);
      if (i >= 0) this._queue.splice(i, 1);
      else if (job.op) job.op.cancel();
    });
    job.d = d;
    this._queue.push(job);
    this._next();
    return d;
  }

  _next() {
    while (this.running < this.limit && this._queue.length > 0) {
      const job = this._queue.shift();
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
