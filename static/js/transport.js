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
// - A transport that fails before it ever worked on this page emits
//   "unusable" when `fallback` is set (automatic choice) and stops; one that
//   worked once keeps retrying (the engine restarting is no reason to leave).

import { Emitter } from "./emitter.js";
import { logger } from "./debug.js";

const log = logger("events");

/**
 * The wait before retry number `attempt` (1, 2, ...): base * 2^(attempt-1),
 * capped at `max`, of which a random half ("equal jitter") so that many
 * clients cut off at once do not come back at once.
 */
export function backoffDelay(attempt, { base = 500, max = 30000 } = {}, random = Math.random) {
  const ceiling = Math.min(max, base * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** The transport cannot be used here (e.g. a proxy that breaks WebSocket). */
export class TransportError extends Error {
  constructor(message, { cause = undefined } = {}) {
    super(message);
    this.name = "TransportError";
    if (cause !== undefined) this.cause = cause;
  }
}

/** The base of an endpoint beside the JSON-RPC one: "/api/jsonrpc" -> "/api/". */
export function apiBase(url) {
  const u = String(url ?? "/api/jsonrpc");
  const q = u.indexOf("?");
  const path = q >= 0 ? u.slice(0, q) : u;
  return path.replace(/[^/]*$/, "");
}

export function withQuery(url, name, value) {
  const sep = url.includes("?") ? "&" : "?";
  return `${url}${sep}${name}=${encodeURIComponent(value)}`;
}

/**
 * Events in, handlers called: seq bookkeeping and dispatch by key, shared by
 * every transport of one Events.
 */
export class Dispatcher extends Emitter {
  constructor(session) {
    super();
    this.session = session;
    this.lastSeq = 0;
    this.generation = null;
    this._orphans = new Map(); // key -> events that came before their subscribe answer
    session.on("subscribed", (sub) => this._flushOrphans(sub));
    session.on("settled", () => {
      if (this.session.subscribing === 0) this._orphans.clear();
    });
  }

  /**
   * Follow the session: a new one (its generation changed) starts seq again
   * at 0. Returns the generation the next events belong to.
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
   */
  dispatch(events, generation = this.session.generation) {
    if (generation !== this.session.generation) return;
    this.sync();
    for (const ev of events) {
      if (ev === null || typeof ev !== "object") continue;
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
          if (!this._orphans.has(ev.key)) this._orphans.set(ev.key, []);
          this._orphans.get(ev.key).push(ev);
        } else {
          log("event for a key without subscription:", ev.key, ev.action);
        }
        continue;
      }
      for (const sub of subs) this._deliver(sub, ev);
    }
  }

  _flushOrphans(sub) {
    const waiting = this._orphans.get(sub.key);
    if (!waiting) return;
    this._orphans.delete(sub.key);
    for (const ev of waiting) this._deliver(sub, ev);
  }

  _deliver(sub, ev) {
    try {
      sub.handler.apply(ev, sub);
    } catch (e) {
      console.error("pushengine: a view failed to apply an event:", e, ev);
    }
  }
}

/** The state, back-off and fallback bookkeeping every transport has. */
export class Transport extends Emitter {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {object} [options]
   * @param {number} [options.base]       first back-off in ms
   * @param {number} [options.max]        longest back-off in ms
   * @param {Function} [options.random]   jitter source (tests)
   * @param {boolean} [options.fallback]  emit "unusable" when it fails before it ever worked
   */
  constructor(session, dispatcher, { base = 500, max = 30000, random = Math.random, fallback = false } = {}) {
    super();
    this.session = session;
    this.dispatcher = dispatcher;
    this.backoff = { base, max };
    this.random = random;
    this.fallback = fallback;
    this.running = false;
    this.state = "stopped";
    this.failures = 0;
    this.worked = false; // it delivered (or was ready to) at least once on this page
    this._timer = null;
    this._offs = [];
    this._offs.push(session.on("destroyed", () => this.stop()));
  }

  /** The transport's name: "longpoll", "sse" or "ws". */
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
    clearTimeout(this._timer);
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

  /** Connect (the first time, and after each failure). */
  _begin() {}

  /** Close what is open. */
  _end() {}

  _setState(state, info = {}) {
    if (state === this.state && state !== "retrying") return;
    this.state = state;
    log(this.name, "state", state, info);
    this.emit("state", state, info);
  }

  /** The transport works: reset the back-off. */
  _connected() {
    this.worked = true;
    this.failures = 0;
    this._setState("connected");
  }

  _schedule(ms, fn = () => this._begin()) {
    if (!this.running) return;
    clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      this._timer = null;
      if (this.running) fn();
    }, ms);
  }

  /** A network error (the engine may be away): retry after a back-off. */
  _retry(error) {
    if (!this.running) return;
    this.failures += 1;
    const delay = backoffDelay(this.failures, this.backoff, this.random);
    log(this.name, "failed:", error, `retry in ${delay} ms`);
    this._setState("retrying", { delay, error, failures: this.failures });
    this._schedule(delay);
  }

  /**
   * The transport itself failed (it could not open, or closed before it
   * delivered anything). Never worked here and may fall back: "unusable".
   */
  _transportFailed(error) {
    if (!this.running) return;
    if (this.fallback && !this.worked) {
      log(this.name, "unusable here:", error);
      const e = error instanceof TransportError ? error : new TransportError(
        `${this.name}: ${error?.message ?? error}`, { cause: error });
      this.stop();
      this.emit("unusable", e);
      return;
    }
    this._retry(error);
  }

  /** The engine does not know the session: session.js makes a new one on the next open(). */
  _sessionLost(sid) {
    if (!this.running) return;
    log(this.name, "session unknown to the engine; restoring it");
    this.session._lost(sid);
    this._setState("connecting");
    this._schedule(0);
  }
}
