// Events: the long-poll loop of a session.
//
// One `session.get_events` call at a time, with `ack` = the last seq processed,
// so events of an answer lost on the way come again (duplicates are skipped by
// seq). Each event goes to the handlers of the subscriptions with its key. On
// a network error the loop waits (exponential back-off with jitter) and tries
// again; on error 1001 the session is restored (session.js) and the loop goes
// on in the new session. The loop stops when the session is destroyed.
//
//   const events = new Events(session);
//   events.on("state", (state, info) => ...);  // connecting|connected|retrying|stopped
//   events.start();

import { CancelledError } from "./deferred.js";
import { ErrorCode, RpcError } from "./api.js";
import { SessionDestroyedError } from "./session.js";
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

export class Events extends Emitter {
  /**
   * @param {Session} session
   * @param {object} [options]
   * @param {number} [options.timeout]  seconds the engine may hold a poll (get_events timeout)
   * @param {number} [options.base]     first back-off in ms
   * @param {number} [options.max]      longest back-off in ms
   * @param {Function} [options.random] jitter source (tests)
   */
  constructor(session, { timeout = 30, base = 500, max = 30000, random = Math.random } = {}) {
    super();
    this.session = session;
    this.timeout = timeout;
    this.backoff = { base, max };
    this.random = random;
    this.running = false;
    this.state = "stopped";
    this.lastSeq = 0;
    this.failures = 0;
    this._generation = null;
    this._inflight = null;
    this._timer = null;
    this._probe = false; // after a failure, first a poll that answers at once
    this._orphans = new Map(); // key -> events that came before their subscribe answer
    session.on("destroyed", () => this.stop());
    session.on("subscribed", (sub) => this._flushOrphans(sub));
    session.on("settled", () => {
      if (this.session.subscribing === 0) this._orphans.clear();
    });
  }

  start() {
    if (this.running) return;
    if (this.session.destroyed) return;
    this.running = true;
    this._probe = true;
    this._setState("connecting");
    this._poll();
  }

  stop() {
    if (!this.running) return;
    this.running = false;
    clearTimeout(this._timer);
    this._timer = null;
    const inflight = this._inflight;
    this._inflight = null;
    if (inflight) inflight.cancel();
    this._setState("stopped");
  }

  _setState(state, info = {}) {
    if (state === this.state && state !== "retrying") return;
    this.state = state;
    log("state", state, info);
    this.emit("state", state, info);
  }

  _schedule(ms) {
    if (!this.running) return;
    clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      this._timer = null;
      this._poll();
    }, ms);
  }

  _poll() {
    if (!this.running || this._inflight) return;
    let started = 0;
    let generation = null;
    const wasLong = !this._probe;
    const d = this.session.open().addCallback(() => {
      if (this.session.generation !== this._generation) {
        // A new session: its seq starts again at 1.
        this._generation = this.session.generation;
        this.lastSeq = 0;
        this._orphans.clear();
      }
      generation = this._generation;
      started = Date.now();
      // After a failure the first poll asks for an immediate answer, so that
      // the loop knows at once that the engine is back.
      const timeout = this._probe ? 0 : this.timeout;
      return this.session.call("session.get_events", [timeout, this.lastSeq], {
        retry: false,
        timeout: (timeout + 15) * 1000,
      }).addCallback((events) => {
        this._probe = false;
        return events;
      });
    });
    this._inflight = d;
    d.addCallbacks(
      (events) => {
        if (this._inflight !== d) return undefined; // stopped meanwhile
        this._inflight = null;
        this.failures = 0;
        this._setState("connected");
        if (generation === this.session.generation) this.dispatch(events);
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
        if (f.check(RpcError) && f.value.code === ErrorCode.UNKNOWN_SESSION) {
          // session.js forgot the session; the next poll restores it.
          log("session unknown to the engine; restoring it");
          this._setState("connecting");
          this._probe = true;
          this._schedule(0);
          return undefined;
        }
        this.failures += 1;
        this._probe = true;
        const delay = backoffDelay(this.failures, this.backoff, this.random);
        log("poll failed:", f.value, `retry in ${delay} ms`);
        this._setState("retrying", { delay, error: f.value, failures: this.failures });
        this._schedule(delay);
        return undefined;
      },
    );
  }

  /** Deliver a list of events (from get_events) to the subscriptions' handlers. */
  dispatch(events) {
    for (const ev of events) {
      if (typeof ev.seq === "number") {
        if (ev.seq <= this.lastSeq) continue; // sent again after our ack was lost
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
