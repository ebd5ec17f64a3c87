// A fake engine behind the Api interface (call(method, params, options) ->
// Deferred), for testing session.js and events.js in node. It answers
// asynchronously, like the network, and follows the API contract: seq per
// session from 1, ack drops and resends, get_events parks until an event or
// timeoutPolls(), 1001 for unknown sessions.
import { Deferred } from "../../static/js/deferred.js";
import { RpcError, NetworkError } from "../../static/js/api.js";

export class FakeEngine {
  constructor() {
    this.sessions = new Map();
    this.states = new Map(); // key -> state list answered on subscribe
    this.calls = [];
    this._n = 0;
    this._failures = []; // [method, error] injected for the next matching call
    this.stopped = false;
    this.down = false; // every call fails with a NetworkError (the engine is away)
  }

  /** The key of a subscription: the method and its params (without sid). */
  static keyOf(method, params) {
    return `${method}(${JSON.stringify(params)})`;
  }

  /** Hold the answers to `method` until the returned function is called. */
  holdAnswers(method) {
    let release;
    const gate = new Promise((r) => { release = r; });
    this._held = { method, gate };
    return () => { this._held = null; release(); };
  }

  failNext(method, error) {
    this._failures.push([method, error]);
  }

  /** The engine restarts: all sessions are forgotten, parked polls and streams are cut. */
  restart() {
    for (const s of this.sessions.values()) {
      if (s.stream) {
        const stream = s.stream;
        s.stream = null;
        stream.cut();
      }
      if (s.poll) {
        const { d } = s.poll;
        s.poll = null;
        this._answer(d, () => { throw new NetworkError("connection lost"); });
      }
    }
    this.sessions.clear();
  }

  /**
   * The engine's node shuts down (SPEC 21): parked polls answer [], streams
   * are told to go away (SSE: a "going-away" message; WebSocket: 1001); the
   * sessions stay, for the node the clients come back to.
   */
  goAway() {
    for (const s of this.sessions.values()) {
      if (s.stream) {
        const stream = s.stream;
        s.stream = null;
        stream.goAway();
      }
      if (s.poll) {
        const { d } = s.poll;
        s.poll = null;
        this._answer(d, () => []);
      }
    }
  }

  /** Put an event into every session subscribed to `key`. */
  push(key, ev) {
    for (const s of this.sessions.values()) {
      if (!s.keys.has(key)) continue;
      s.seq += 1;
      const event = { key, seq: s.seq, ...ev };
      s.queue.push(event);
      if (s.stream) {
        s.sent.push(event); // a stream's events move to the replay buffer
        s.stream.write([event]);
      }
      this._wake(s);
    }
  }

  /**
   * Attach a stream (fakestreams.mjs) to session `sid`: it gets every event
   * after `lastSeq` (null: what was not written yet), then each new one. A
   * stream attached before is cut. Throws RpcError 1001 for an unknown session.
   */
  attach(sid, stream, lastSeq = null) {
    const s = this.sessions.get(sid);
    if (!s) throw new RpcError(1001, "unknown session");
    if (lastSeq !== null && lastSeq > s.seq) throw new RpcError(-32602, `${lastSeq} is ahead`);
    if (s.poll) {
      const { d } = s.poll;
      s.poll = null;
      this._answer(d, () => []);
    }
    if (s.stream && s.stream !== stream) s.stream.replaced();
    s.stream = stream;
    s.sent ??= [];
    const after = lastSeq ?? (s.sent.length ? s.sent.at(-1).seq : 0);
    const pending = s.queue.filter((e) => e.seq > after);
    for (const e of pending) if (!s.sent.includes(e)) s.sent.push(e);
    if (pending.length) stream.write(pending);
  }

  detach(sid, stream) {
    const s = this.sessions.get(sid);
    if (s && s.stream === stream) s.stream = null;
  }

  /** Streams attached now. */
  get streams() {
    return [...this.sessions.values()].filter((s) => s.stream).map((s) => s.stream);
  }

  /** Answer every parked poll with [] (their timeout passed). */
  timeoutPolls() {
    for (const s of this.sessions.values()) {
      if (s.poll) {
        const { d } = s.poll;
        s.poll = null;
        this._answer(d, () => []);
      }
    }
  }

  get parked() {
    return [...this.sessions.values()].filter((s) => s.poll).length;
  }

  callsOf(method) {
    return this.calls.filter((c) => c.method === method);
  }

  _wake(s) {
    if (!s.poll) return;
    const pending = s.queue.filter((e) => e.seq > s.poll.ack);
    if (pending.length === 0) return;
    const { d } = s.poll;
    s.poll = null;
    this._answer(d, () => pending);
  }

  _answer(d, fn, method = null) {
    const held = this._held && this._held.method === method ? this._held.gate : null;
    const schedule = held ? (f) => held.then(f) : queueMicrotask;
    schedule(() => {
      if (d.called) return;
      let r;
      try {
        r = fn();
      } catch (e) {
        d.errback(e);
        return;
      }
      d.callback(r);
    });
  }

  call(method, params = [], options = {}) {
    // As Api does: a channel (the WebSocket transport) may take the call; a
    // test lets it by setting engine.channel = null (no such property: never).
    if (this.channel && options.via !== "ws" && this.channel.accepts(method, options)) {
      return this.channel.call(method, params, options);
    }
    this.calls.push({ method, params, options });
    const d = new Deferred();
    if (this.down) {
      this._answer(d, () => { throw new NetworkError("connection refused"); });
      return d;
    }
    const i = this._failures.findIndex(([m]) => m === method);
    if (i >= 0) {
      const [, error] = this._failures.splice(i, 1)[0];
      this._answer(d, () => { throw error; });
      return d;
    }
    if (method === "session.create") {
      this._n += 1;
      const sid = `sid${this._n}`;
      this.sessions.set(sid, { sid, seq: 0, queue: [], keys: new Set(), poll: null, user: null, stream: null, sent: [] });
      this._answer(d, () => sid);
      return d;
    }
    const [sid, ...rest] = params;
    const s = this.sessions.get(sid);
    if (!s) {
      this._answer(d, () => { throw new RpcError(1001, "unknown session", undefined, method); });
      return d;
    }
    if (options.session !== sid) {
      this._answer(d, () => { throw new Error(`?session= is ${options.session}, not ${sid}`); });
      return d;
    }
    switch (method) {
      case "session.destroy":
        this.sessions.delete(sid);
        if (s.stream) s.stream.replaced();
        this._answer(d, () => true);
        break;
      case "session.authorize":
        s.user = `user-of-${rest[0]}`;
        this._answer(d, () => s.user);
        break;
      case "session.refresh":
        if (s.user !== `user-of-${rest[0]}`.replace(/-(new|old)$/, "")) {
          this._answer(d, () => { throw new RpcError(1003, "another user"); });
        } else this._answer(d, () => s.user);
        break;
      case "session.unsubscribe":
        if (!s.keys.delete(rest[0])) this._answer(d, () => { throw new RpcError(1005, "unknown key"); });
        else this._answer(d, () => true);
        break;
      case "session.get_events": {
        const [, ack] = rest;
        if (typeof ack === "number") s.queue = s.queue.filter((e) => e.seq > ack);
        if (s.poll) {
          const old = s.poll.d;
          s.poll = null;
          this._answer(old, () => []);
        }
        s.poll = { d, ack: typeof ack === "number" ? ack : 0 };
        if (typeof ack !== "number") {
          // Without ack, delivered events are dropped.
          const pending = s.queue;
          if (pending.length) {
            s.queue = [];
            s.poll = null;
            this._answer(d, () => pending);
          }
        } else {
          this._wake(s);
          if (s.poll && s.poll.d === d && rest[0] === 0) {
            s.poll = null; // a timeout of 0 answers at once
            this._answer(d, () => []);
          }
        }
        d._canceller = () => { if (s.poll && s.poll.d === d) s.poll = null; };
        break;
      }
      default:
        if (method.includes("subscribe")) {
          const key = FakeEngine.keyOf(method, rest);
          s.keys.add(key);
          this._answer(d, () => [key, this.states.get(key) ?? []], method);
        } else {
          this._answer(d, () => { throw new RpcError(-32601, "unknown method"); });
        }
    }
    return d;
  }
}

/** Let queued microtasks and timers run. */
export const settle = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 0));
};
