// Events: a session's events, over the best transport that works here.
//
// Three transports deliver the same events (same seq, same objects):
// WebSocket (transport-ws.js), Server-Sent Events (transport-sse.js) and
// long-polling (transport-longpoll.js). Events chooses one and hands each
// event to the handlers of the subscriptions with its key; Views do not know
// which transport brought it.
//
//   const events = new Events(session);                      // automatic
//   const events = new Events(session, { transport: "sse" }); // forced
//   events.on("state", (state, info) => ...);  // connecting|connected|retrying|stopped
//   events.on("transport", (name) => ...);     // "ws" | "sse" | "longpoll"
//   events.start();
//   await events.connected({ signal });         // a Deferred: the transport works
//   const ev = await events.next({ key });      // the next event (of a key)
//   for await (const ev of events.iterate({ signal })) ...
//
// Outside a browser, give the WebSocket and EventSource classes (in Node 20:
// the `ws` and `eventsource` packages): `new Events(session, { WebSocket,
// EventSource })`; without them only long-polling is used.
//
// Automatic choice: WebSocket, then SSE, then long-polling. A transport that
// fails before it ever worked (the socket does not open, or closes before the
// engine answered; the event stream is refused or cut before it opened) is
// given up for the next one, and remembered as unusable for the page's life.
// One that worked once is kept through network errors and engine restarts
// (back-off with jitter, as on every transport). Forced, a transport is never
// given up. A transport the environment lacks (no WebSocket, no EventSource,
// an Api without a URL) is skipped.

import { Deferred, abortable } from "./deferred.js";
import { Emitter } from "./emitter.js";
import { logger } from "./debug.js";
import { Dispatcher, Transport, backoffDelay } from "./transport.js";
import { LongPollTransport } from "./transport-longpoll.js";
import { SseTransport } from "./transport-sse.js";
import { WsTransport } from "./transport-ws.js";

export { backoffDelay };

const log = logger("events");

/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./api.js").PushEvent} PushEvent */
/** @typedef {import("./transport.js").ConnectionState} ConnectionState */
/** @typedef {import("./transport.js").StateInfo} StateInfo */
/** @typedef {import("./transport.js").TransportError} TransportError */
/** @typedef {import("./transport-ws.js").WsOptions} WsOptions */
/** @typedef {import("./transport-sse.js").SseOptions} SseOptions */
/** @typedef {import("./transport-longpoll.js").LongPollOptions} LongPollOptions */

/**
 * A transport's name.
 * @typedef {"ws" | "sse" | "longpoll"} TransportName
 */

/**
 * A transport class: what Events makes a transport with.
 * @typedef {{new (session: Session, dispatcher: Dispatcher, options: object): Transport,
 *   available?: (session: Session, options: object) => boolean}} TransportClass
 */

/**
 * The options of Events.
 * @typedef {object} EventsOptions
 * @property {TransportName | "auto" | null} [transport]  "auto" (default), "ws", "sse" or "longpoll"
 * @property {number} [timeout]    seconds the engine may hold a long-poll
 * @property {number} [base]       first back-off in ms
 * @property {number} [max]        longest back-off in ms
 * @property {() => number} [random]  jitter source (tests)
 * @property {number} [reconnectSpread]  ms within which to connect again, at random, when the engine's node goes away (default 1000)
 * @property {boolean} [remember]  remember failed transports for the page's life (default true)
 * @property {import("./transport-ws.js").WebSocketConstructor} [WebSocket]  the WebSocket class (Node: the `ws` package); also `ws.WebSocket`
 * @property {import("./transport-sse.js").EventSourceConstructor} [EventSource]  the EventSource class (Node: the `eventsource` package); also `sse.EventSource`
 * @property {WsOptions} [ws]            options of WsTransport (url, WebSocket, rpc, offerSubprotocol, openTimeout, attachTimeout)
 * @property {SseOptions} [sse]          options of SseTransport (url, EventSource, fetch, probeTimeout)
 * @property {LongPollOptions} [longpoll]  options of LongPollTransport (timeout)
 * @property {Partial<Record<TransportName, TransportClass>> | null} [transports]  classes by name instead of the built-in ones (tests)
 */

/**
 * What Events emits.
 * @typedef {object} EventsEvents
 * @property {[state: ConnectionState, info: StateInfo]} state
 * @property {[name: TransportName]} transport    the transport chosen
 * @property {[from: TransportName, to: TransportName, error: TransportError]} fallback
 * @property {[event: PushEvent]} event          every event delivered
 */

/**
 * The wait methods' options: an AbortSignal, and a timeout in ms (0: none).
 * @typedef {{signal?: AbortSignal | null, timeout?: number}} WaitOptions
 */

/** The transports in the order of the automatic choice. */
export const TRANSPORTS = /** @type {readonly TransportName[]} */ (Object.freeze(["ws", "sse", "longpoll"]));

/** Human names, for a status line. */
export const TRANSPORT_NAMES = Object.freeze({ ws: "WebSocket", sse: "Server-Sent Events", longpoll: "long-polling" });

/** @type {Record<TransportName, TransportClass>} */
const CLASSES = { ws: WsTransport, sse: SseTransport, longpoll: LongPollTransport };

/** Transports that failed on this page: the automatic choice skips them. @type {Set<TransportName>} */
const unusable = new Set();

/** The Events stopped (stop(), or the session was destroyed) while something waited. */
export class EventsStoppedError extends Error {
  constructor() {
    super("the events stopped");
    this.name = "EventsStoppedError";
  }
}

/**
 * The transports given up on this page (automatic choice).
 * @returns {TransportName[]}
 */
export function unusableTransports() {
  return [...unusable];
}

/** Forget them (tests; a page that knows the network changed). */
export function forgetUnusableTransports() {
  unusable.clear();
}

/**
 * A transport option from text ("ws", "sse", "longpoll", "auto"; also
 * "websocket", "eventsource", "long-poll", "poll"); anything else: "auto".
 * @param {unknown} text
 * @returns {TransportName | "auto"}
 */
export function parseTransport(text) {
  const t = String(text ?? "").trim().toLowerCase().replace(/[-_ ]/g, "");
  if (t === "ws" || t === "websocket" || t === "websockets") return "ws";
  if (t === "sse" || t === "eventsource" || t === "serversentevents") return "sse";
  if (t === "longpoll" || t === "longpolling" || t === "poll" || t === "polling") return "longpoll";
  return "auto";
}

/**
 * A session's events over the best transport that works here.
 * @extends {Emitter<EventsEvents & import("./emitter.js").EventMap>}
 */
export class Events extends Emitter {
  /**
   * @param {Session} session
   * @param {EventsOptions} [options]
   */
  constructor(session, {
    transport = "auto", timeout = 30, base = 500, max = 30000, random = Math.random, remember = true,
    reconnectSpread = 1000, WebSocket = undefined, EventSource = undefined, ws = {}, sse = {}, longpoll = {}, transports = null,
  } = {}) {
    super();
    this.session = session;
    /** @type {TransportName | "auto"} */
    this.mode = transport === "auto" || transport == null ? "auto" : parseTransport(transport);
    if (this.mode === "auto" && transport != null && transport !== "auto") {
      throw new TypeError(`unknown transport ${JSON.stringify(transport)}: use "ws", "sse", "longpoll" or "auto"`);
    }
    this.remember = remember;
    this.common = { base, max, random, reconnectSpread };
    /** @type {{ws: WsOptions, sse: SseOptions, longpoll: LongPollOptions}} */
    this.options = {
      ws: WebSocket ? { WebSocket, ...ws } : ws,
      sse: EventSource ? { EventSource, ...sse } : sse,
      longpoll: { timeout, ...longpoll },
    };
    /** @type {Record<TransportName, TransportClass>} */
    this.classes = { ...CLASSES, ...(transports ?? {}) };
    this.dispatcher = new Dispatcher(session);
    this.dispatcher.on("event", (ev) => this.emit("event", ev));
    /** The transport in use. @type {Transport | null} */
    this.current = null;
    /** [name, error] given up, in order. @type {[TransportName, TransportError][]} */
    this.given = [];
    this.running = false;
    /** @type {ConnectionState} */
    this.state = "stopped";
    session.on("destroyed", () => this.stop());
  }

  /**
   * The name of the transport in use ("ws", "sse", "longpoll"), or null.
   * @returns {TransportName | null}
   */
  get transport() {
    return /** @type {TransportName | null} */ (this.current?.name ?? null);
  }

  /** The last seq processed in the current session. */
  get lastSeq() {
    return this.dispatcher.lastSeq;
  }

  set lastSeq(seq) {
    this.dispatcher.lastSeq = seq;
  }

  /** Network failures in a row of the transport in use. */
  get failures() {
    return this.current?.failures ?? 0;
  }

  /**
   * The transports to try, in order.
   * @returns {TransportName[]}
   */
  candidates() {
    if (this.mode !== "auto") return [this.mode];
    return TRANSPORTS.filter((name) => {
      if (name !== "longpoll" && this.remember && unusable.has(name)) return false;
      if (this.given.some(([n]) => n === name)) return false;
      const cls = this.classes[name];
      return typeof cls.available !== "function" || cls.available(this.session, this.options[name]);
    });
  }

  /**
   * Start bringing the events (the first transport, or the one stopped).
   * Returns this Events; `await events.connected()` waits for the transport.
   * @returns {this}
   */
  start() {
    if (this.running || this.session.destroyed) return this;
    this.running = true;
    this._setState("connecting");
    if (this.current) {
      this.current.start();
      return this;
    }
    this._use(this.candidates()[0] ?? "longpoll");
    return this;
  }

  /** Stop (the waits in progress fail with EventsStoppedError); start() goes on after the last seq. */
  stop() {
    if (!this.running) return;
    this.running = false;
    this.current?.stop();
    this._setState("stopped");
  }

  /**
   * Deliver a list of events to the subscriptions' handlers (as the transports do).
   * @param {unknown[]} events
   */
  dispatch(events) {
    this.dispatcher.dispatch(events);
  }

  // -- waits: Deferreds for what is to come ---------------------------------------

  /**
   * A Deferred that fires with the transport's name once the events are
   * connected (at once when they are). Fails with EventsStoppedError when
   * they stop first, CancelledError when `signal` aborts, TimeoutError after
   * `timeout` ms.
   * @param {WaitOptions} [options]
   * @returns {Deferred<TransportName>}
   */
  connected({ signal = null, timeout = 0 } = {}) {
    return this._wait((resolve, reject) => this.on("state", (state) => {
      if (state === "connected") resolve(/** @type {TransportName} */ (this.transport));
      else if (state === "stopped") reject(new EventsStoppedError());
    }), this.state === "connected" ? () => /** @type {TransportName} */ (this.transport) : null, { signal, timeout });
  }

  /**
   * A Deferred for the next event delivered (of subscription `key`, and
   * passing `filter`, when given). Fails as connected() does.
   * @param {{key?: string | null, filter?: ((event: PushEvent) => boolean) | null} & WaitOptions} [options]
   * @returns {Deferred<PushEvent>}
   */
  next({ key = null, filter = null, signal = null, timeout = 0 } = {}) {
    return this._wait((resolve, reject) => {
      const offEvent = this.on("event", (ev) => {
        if ((key === null || ev.key === key) && (filter === null || filter(ev))) resolve(ev);
      });
      const offState = this.on("state", (state) => {
        if (state === "stopped") reject(new EventsStoppedError());
      });
      return () => { offEvent(); offState(); };
    }, null, { signal, timeout });
  }

  /**
   * The events delivered from now on (of subscription `key`, when given), as
   * an async iterator: `for await (const ev of events.iterate({ signal }))`.
   * The iteration ends when `signal` aborts, when the events stop, or on
   * `break`; events that come while the loop body runs are kept for it.
   * @param {{key?: string | null, signal?: AbortSignal | null}} [options]
   * @returns {AsyncIterableIterator<PushEvent>}
   */
  iterate({ key = null, signal = null } = {}) {
    /** @type {PushEvent[]} */
    const buffered = [];
    /** @type {((r: IteratorResult<PushEvent, undefined>) => void) | null} */
    let waiting = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      offEvent();
      offState();
      signal?.removeEventListener("abort", finish);
      buffered.length = 0;
      const w = waiting;
      waiting = null;
      w?.({ value: undefined, done: true });
    };
    const offEvent = this.on("event", (ev) => {
      if (key !== null && ev.key !== key) return;
      const w = waiting;
      if (w) {
        waiting = null;
        w({ value: ev, done: false });
      } else {
        buffered.push(ev);
      }
    });
    const offState = this.on("state", (state) => {
      if (state === "stopped") finish();
    });
    if (signal?.aborted) finish();
    else signal?.addEventListener("abort", finish, { once: true });
    /** @type {AsyncIterableIterator<PushEvent>} */
    const iterator = {
      next() {
        const ev = buffered.shift();
        if (ev !== undefined) return Promise.resolve({ value: ev, done: false });
        if (done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => { waiting = resolve; });
      },
      return() {
        finish();
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]() {
        return iterator;
      },
    };
    return iterator;
  }

  /**
   * Every event delivered from now on: `for await (const ev of events)`.
   * @returns {AsyncIterableIterator<PushEvent>}
   */
  [Symbol.asyncIterator]() {
    return this.iterate();
  }

  /**
   * A Deferred settled by `listen(resolve, reject)` (which returns a function
   * that stops listening), or at once by `now()` when given.
   * @private
   * @template T
   * @param {(resolve: (value: T) => void, reject: (error: unknown) => void) => () => void} listen
   * @param {(() => T) | null} now
   * @param {WaitOptions} options
   * @returns {Deferred<T>}
   */
  _wait(listen, now, { signal = null, timeout = 0 }) {
    /** @type {(() => void) | null} */
    let off = null;
    /** @type {Deferred<T>} */
    const d = new Deferred(() => off?.());
    if (now) {
      d.callback(now());
      return d;
    }
    off = listen(
      (value) => { off?.(); if (!d.called) d.callback(value); },
      (error) => { off?.(); if (!d.called) d.errback(error); },
    );
    if (timeout) d.addTimeout(timeout);
    return abortable(d, signal);
  }

  /**
   * @private
   * @param {TransportName} name
   */
  _use(name) {
    const auto = this.mode === "auto";
    const fallback = auto && name !== "longpoll";
    const t = new this.classes[name](this.session, this.dispatcher, {
      ...this.common, ...this.options[name], fallback,
    });
    this.current = t;
    t.on("state", (state, info) => {
      // "stopped" is this object's own: a transport given up stops too.
      if (this.current !== t || !this.running || state === "stopped") return;
      this._setState(state, info);
    });
    t.on("unusable", (/** @type {TransportError} */ error) => {
      if (this.current !== t) return;
      this.given.push([name, error]);
      if (this.remember) unusable.add(name);
      t.dispose();
      const next = this.candidates()[0] ?? "longpoll";
      log(`${name} does not work here (${error.message}); trying ${next}`);
      this.emit("fallback", name, next, error);
      if (!this.running) {
        this.current = null;
        return;
      }
      this._use(next);
    });
    log("transport", name, auto ? "(automatic)" : "(forced)");
    this.emit("transport", name);
    if (this.running) t.start();
  }

  /**
   * @private
   * @param {ConnectionState} state
   * @param {StateInfo} [info]
   */
  _setState(state, info = {}) {
    if (state === this.state && state !== "retrying") return;
    this.state = state;
    log("state", state, info);
    this.emit("state", state, info);
  }
}
