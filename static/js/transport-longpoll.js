// Long-polling: the original transport, and the last fallback.
//
// One `session.get_events` call at a time over HTTP (POST /api/jsonrpc), with
// `ack` = the last seq processed, so events of an answer lost on the way come
// again (the dispatcher skips them by seq). On a network error the loop waits
// (back-off with jitter) and first asks for an immediate answer (timeout 0),
// so that it knows at once the engine is back; on error 1001 the session is
// restored (session.js) and the loop goes on in the new session.

import { CancelledError } from "./deferred.js";
import { ErrorCode, RpcError } from "./api.js";
import { SessionDestroyedError } from "./session.js";
import { Transport } from "./transport.js";

/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./transport.js").Dispatcher} Dispatcher */

/**
 * The options of LongPollTransport: those of Transport, and `timeout`,
 * the seconds the engine may hold a poll (get_events timeout).
 * @typedef {import("./transport.js").TransportOptions & {timeout?: number}} LongPollOptions
 */

/** The `session.get_events` loop with `ack`. */
export class LongPollTransport extends Transport {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {LongPollOptions} [options]
   */
  constructor(session, dispatcher, { timeout = 30, ...options } = {}) {
    super(session, dispatcher, options);
    this.timeout = timeout;
    /** @private @type {import("./deferred.js").Deferred<unknown[]> | null} */
    this._inflight = null;
    /** @private after a failure, first a poll that answers at once */
    this._probe = false;
  }

  /** @returns {"longpoll"} */
  get name() {
    return "longpoll";
  }

  start() {
    this._probe = true;
    super.start();
  }

  /** @protected */
  _end() {
    const inflight = this._inflight;
    this._inflight = null;
    if (inflight) inflight.cancel();
  }

  /** @protected */
  _begin() {
    if (!this.running || this._inflight) return;
    let started = 0;
    /** @type {number | null} */
    let generation = null;
    const wasLong = !this._probe;
    const d = this.session.open().addCallback(() => {
      generation = this.dispatcher.sync();
      started = Date.now();
      const timeout = this._probe ? 0 : this.timeout;
      return this.session.call("session.get_events", [timeout, this.dispatcher.lastSeq], {
        retry: false,
        timeout: (timeout + 15) * 1000,
      }).addCallback((events) => {
        this._probe = false;
        return Array.isArray(events) ? /** @type {unknown[]} */ (events) : [];
      });
    });
    this._inflight = d;
    d.addCallbacks(
      (events) => {
        if (this._inflight !== d) return undefined; // stopped meanwhile
        this._inflight = null;
        this._connected();
        this.dispatcher.dispatch(events, generation);
        // An empty answer long before the timeout means another poll on this
        // session took over; do not spin against it.
        const quickEmpty = events.length === 0 && wasLong && Date.now() - started < 100 * this.timeout;
        this._schedule(quickEmpty ? 1000 : 0);
        return undefined;
      },
      (f) => {
        if (this._inflight === d) this._inflight = null;
        if (!this.running || f.check(CancelledError)) return undefined;
        if (f.check(SessionDestroyedError)) {
          this.stop();
          return undefined;
        }
        this._probe = true;
        if (f.check(RpcError) && /** @type {RpcError} */ (f.value).code === ErrorCode.UNKNOWN_SESSION) {
          // session.call already forgot the session; the next poll restores it.
          this._setState("connecting");
          this._schedule(0);
          return undefined;
        }
        this._retry(f.value);
        return undefined;
      },
    );
  }
}
