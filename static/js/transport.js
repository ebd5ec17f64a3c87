// What the three event transports (long-poll, SSE, WebSocket) share.
//
// A transport brings a session's events into the page; events.js chooses one.
// Every transport has the same interface and behaviour:
//
//   const t = new SomeTransport(session, dispatcher, options);
//   t.on("state", (state, info) => ...);  // connecting|connected|retrying|stopped
//   t.on("unusable", (error) => ...);     // it never worked here: try another one
//   t.start(); t.stop();
//
// - The session is opened (created, or restored after error 1001) through
//   session.js before the transport connects; calls other than the events'
//   own stay with the Api.
// - The events go to the Dispatcher, which skips duplicates by seq, starts seq
//   again for a new session, keeps events that overtake their subscribe answer
//   and hands each to the handlers of its key. The dispatcher outlives a
//   transport, so a transport that takes over resumes after the last seq.
// - On a network error: back-off with jitter (backoffDelay), state "retrying".
// - When the engine lets the connection go on purpose (its node shuts down:
//   a WebSocket closed with 1001 "going away", an SSE stream that ends with
//   its "going-away" message), that is no error: the transport connects
//   again at once (within `reconnectSpread` ms, at random), to the same URL:
//   behind a balancer another node answers, and with the engine's session
//   registry the session resumes there. A long-poll is answered `[]`, an
//   ordinary answer, and the loop polls again.
// - A transport that fails before it ever worked on this page emits
//   "unusable" when `fallback` is set (automatic choice) and stops; one that
//   worked once keeps retrying (the engine restarting is no reason to leave).

import { Emitter } from "./emitter.js";
import { withQuery } from "./api.js";
import { logger } from "./debug.js";

export { withQuery };

const log = logger("events");

/** @typedef {import("./api.js").PushEvent} PushEvent */
/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./session.js").Subscription} Subscription */

/**
 * The state of a transport (and of Events): "connecting", "connected",
 * "retrying" (waiting `delay` ms after `error`) or "stopped".
 * @typedef {"connecting" | "connected" | "retrying" | "stopped"} ConnectionState
 */

/**
 * What comes with a state: for "retrying", the delay, the error and the
 * failures in a row.
 * @typedef {{delay?: number, error?: unknown, failures?: number}} StateInfo
 */

/**
 * What a transport emits.
 * @typedef {object} TransportEvents
 * @property {[state: ConnectionState, info: StateInfo]} state
 * @property {[error: TransportError]} unusable  it never worked here: try another one
 */

/**
 * The back-off options: the first wait and the longest, in ms.
 * @typedef {{base?: number, max?: number}} Backoff
 */

/**
 * The options every transport takes.
 * @typedef {object} TransportOptions
 * @property {number} [base]       first back-off in ms
 * @property {number} [max]        longest back-off in ms
 * @property {() => number} [random]  jitter source (tests)
 * @property {boolean} [fallback]  emit "unusable" when it fails before it ever worked
 * @property {number} [reconnectSpread]  ms within which to connect again, at random, when the engine's node goes away (default 1000)
 */

/**
 * The wait before retry number `attempt` (1, 2, ...): base * 2^(attempt-1),
 * capped at `max`, of which a random half ("equal jitter") so that many
 * clients cut off at once do not come back at once.
 * @param {number} attempt
 * @param {Backoff} [backoff]
 * @param {() => number} [random]
 * @returns {number}
 */
export function backoffDelay(attempt, { base = 500, max = 30000 } = {}, random = Math.random) {
  const ceiling = Math.min(max, base * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/**
 * An error's message (or the value as text).
 * @param {unknown} error
 * @returns {string}
 */
export function messageOf(error) {
  const message = error !== null && typeof error === "object" ? /** @type {{message?: unknown}} */ (error).message : undefined;
  return typeof message === "string" ? message : String(error);
}

/** The transport cannot be used here (e.g. a proxy that breaks WebSocket). */
export class TransportError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, { cause = undefined } = {}) {
    super(message);
    this.name = "TransportError";
    /** @type {unknown} */
    this.cause = cause;
  }
}

/**
 * The base of an endpoint beside the JSON-RPC one: "/api/jsonrpc" -> "/api/".
 * @param {string | null | undefined} url
 * @returns {string}
 */
export function apiBase(url) {
  const u = String(url ?? "/api/jsonrpc");
  const q = u.indexOf("?");
  const path = q >= 0 ? u.slice(0, q) : u;
  return path.replace(/[^/]*$/, "");
}

/**
 * What a Dispatcher emits: "event" for each event it delivers (after the seq
 * check, before the handlers).
 * @typedef {object} DispatcherEvents
 * @property {[event: PushEvent]} event
 */

/**
 * Events in, handlers called: seq bookkeeping and dispatch by key, shared by
 * every transport of one Events.
 * @extends {Emitter<DispatcherEvents & import("./emitter.js").EventMap>}
 */
export class Dispatcher extends Emitter {
  /** @param {Session} session */
  constructor(session) {
    super();
    this.session = session;
    /** The last seq processed in the current session. */
    this.lastSeq = 0;
    /** The session generation the seq belongs to. @type {number | null} */
    this.generation = null;
    /** @private key -> events that came before their subscribe answer @type {Map<string, PushEvent[]>} */
    this._orphans = new Map();
    session.on("subscribed", (sub) => this._flushOrphans(sub));
    session.on("settled", () => {
      if (this.session.subscribing === 0) this._orphans.clear();
    });
  }

  /**
   * Follow the session: a new one (its generation changed) starts seq again
   * at 0. Returns the generation the next events belong to.
   * @returns {number}
   */
  sync() {
    if (this.session.generation !== this.generation) {
      this.generation = this.session.generation;
      this.lastSeq = 0;
      this._orphans.clear();
    }
    return this.generation;
  }

  /**
   * Deliver a list of events to the subscriptions' handlers. `generation`
   * (from sync) drops events of a session that was replaced meanwhile.
   * @param {unknown[]} events  what the engine sent (anything else than an event object is skipped)
   * @param {number | null} [generation]
   */
  dispatch(events, generation = this.session.generation) {
    if (generation !== this.session.generation) return;
    this.sync();
    for (const item of events) {
      if (item === null || typeof item !== "object") continue;
      const ev = /** @type {PushEvent} */ (item);
      if (typeof ev.seq === "number") {
        if (ev.seq <= this.lastSeq) continue; // sent again (a lost ack, a resumed stream)
        if (ev.seq !== this.lastSeq + 1) log("seq jumped from", this.lastSeq, "to", ev.seq);
        this.lastSeq = ev.seq;
      }
      this.emit("event", ev);
      const subs = this.session.subscriptionsFor(ev.key);
      if (subs.length === 0) {
        if (this.session.subscribing > 0) {
          // Perhaps the answer of a subscribe still on its way: keep it.
          let waiting = this._orphans.get(ev.key);
          if (!waiting) this._orphans.set(ev.key, waiting = []);
          waiting.push(ev);
        } else {
          log("event for a key without subscription:", ev.key, ev.action);
        }
        continue;
      }
      for (const sub of subs) this._deliver(sub, ev);
    }
  }

  /**
   * @private
   * @param {Subscription} sub
   */
  _flushOrphans(sub) {
    if (sub.key === null) return;
    const waiting = this._orphans.get(sub.key);
    if (!waiting) return;
    this._orphans.delete(sub.key);
    for (const ev of waiting) this._deliver(sub, ev);
  }

  /**
   * @private
   * @param {Subscription} sub
   * @param {PushEvent} ev
   */
  _deliver(sub, ev) {
    try {
      sub.handler.apply(ev, sub);
    } catch (e) {
      console.error("pushengine: a view failed to apply an event:", e, ev);
    }
  }
}

/**
 * The state, back-off and fallback bookkeeping every transport has.
 * @extends {Emitter<TransportEvents & import("./emitter.js").EventMap>}
 */
export class Transport extends Emitter {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {TransportOptions} [options]
   */
  constructor(session, dispatcher, {
    base = 500, max = 30000, random = Math.random, fallback = false, reconnectSpread = 1000,
  } = {}) {
    super();
    this.session = session;
    this.dispatcher = dispatcher;
    this.backoff = { base, max };
    this.random = random;
    this.fallback = fallback;
    /** ms within which to connect again when the engine's node goes away. */
    this.reconnectSpread = reconnectSpread;
    this.running = false;
    /** @type {ConnectionState} */
    this.state = "stopped";
    /** Network failures in a row. */
    this.failures = 0;
    /** It delivered (or was ready to) at least once on this page. */
    this.worked = false;
    /** @protected @type {ReturnType<typeof setTimeout> | null} */
    this._timer = null;
    /** @protected @type {(() => void)[]} */
    this._offs = [];
    this._offs.push(session.on("destroyed", () => this.stop()));
  }

  /**
   * The transport's name: "longpoll", "sse" or "ws".
   * @returns {string}
   */
  get name() {
    return "none";
  }

  start() {
    if (this.running || this.session.destroyed) return;
    this.running = true;
    this._setState("connecting");
    this._begin();
  }

  stop() {
    if (!this.running) return;
    this.running = false;
    if (this._timer !== null) clearTimeout(this._timer);
    this._timer = null;
    this._end();
    this._setState("stopped");
  }

  /** Stop for good: also let go of the session's listeners. */
  dispose() {
    this.stop();
    for (const off of this._offs) off();
    this._offs = [];
  }

  /**
   * Connect (the first time, and after each failure).
   * @protected
   */
  _begin() {}

  /**
   * Close what is open.
   * @protected
   */
  _end() {}

  /**
   * @protected
   * @param {ConnectionState} state
   * @param {StateInfo} [info]
   */
  _setState(state, info = {}) {
    if (state === this.state && state !== "retrying") return;
    this.state = state;
    log(this.name, "state", state, info);
    this.emit("state", state, info);
  }

  /**
   * The transport works: reset the back-off.
   * @protected
   */
  _connected() {
    this.worked = true;
    this.failures = 0;
    this._setState("connected");
  }

  /**
   * @protected
   * @param {number} ms
   * @param {() => void} [fn]
   */
  _schedule(ms, fn = () => this._begin()) {
    if (!this.running) return;
    if (this._timer !== null) clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      this._timer = null;
      if (this.running) fn();
    }, ms);
  }

  /**
   * A network error (the engine may be away): retry after a back-off.
   * @protected
   * @param {unknown} error
   */
  _retry(error) {
    if (!this.running) return;
    this.failures += 1;
    const delay = backoffDelay(this.failures, this.backoff, this.random);
    log(this.name, "failed:", error, `retry in ${delay} ms`);
    this._setState("retrying", { delay, error, failures: this.failures });
    this._schedule(delay);
  }

  /**
   * The engine let the connection go on purpose (its node shuts down): no
   * failure, no back-off. Connect again at once, within `reconnectSpread`
   * ms at random (the clients of a node that goes away do not all come
   * back in the same instant), to the same URL.
   * @protected
   * @param {string} why
   */
  _reconnect(why) {
    if (!this.running) return;
    const delay = Math.round(this.random() * this.reconnectSpread);
    log(this.name, why, `connecting again in ${delay} ms`);
    this._setState("connecting", { delay });
    this._schedule(delay);
  }

  /**
   * The transport itself failed (it could not open, or closed before it
   * delivered anything). Never worked here and may fall back: "unusable".
   * @protected
   * @param {unknown} error
   */
  _transportFailed(error) {
    if (!this.running) return;
    if (this.fallback && !this.worked) {
      log(this.name, "unusable here:", error);
      const e = error instanceof TransportError ? error : new TransportError(
        `${this.name}: ${messageOf(error)}`, { cause: error });
      this.stop();
      this.emit("unusable", e);
      return;
    }
    this._retry(error);
  }

  /**
   * The engine does not know the session: session.js makes a new one on the next open().
   * @protected
   * @param {string | null} sid
   */
  _sessionLost(sid) {
    if (!this.running) return;
    log(this.name, "session unknown to the engine; restoring it");
    this.session._lost(sid);
    this._setState("connecting");
    this._schedule(0);
  }
}
