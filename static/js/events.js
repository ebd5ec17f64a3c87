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
//
// Automatic choice: WebSocket, then SSE, then long-polling. A transport that
// fails before it ever worked (the socket does not open, or closes before the
// engine answered; the event stream is refused or cut before it opened) is
// given up for the next one, and remembered as unusable for the page's life.
// One that worked once is kept through network errors and engine restarts
// (back-off with jitter, as on every transport). Forced, a transport is never
// given up. A transport the environment lacks (no WebSocket, no EventSource,
// an Api without a URL) is skipped.

import { Emitter } from "./emitter.js";
import { logger } from "./debug.js";
import { Dispatcher, backoffDelay } from "./transport.js";
import { LongPollTransport } from "./transport-longpoll.js";
import { SseTransport } from "./transport-sse.js";
import { WsTransport } from "./transport-ws.js";

export { backoffDelay };

const log = logger("events");

/** The transports in the order of the automatic choice. */
export const TRANSPORTS = Object.freeze(["ws", "sse", "longpoll"]);

/** Human names, for a status line. */
export const TRANSPORT_NAMES = Object.freeze({ ws: "WebSocket", sse: "Server-Sent Events", longpoll: "long-polling" });

const CLASSES = { ws: WsTransport, sse: SseTransport, longpoll: LongPollTransport };

// Transports that failed on this page: the automatic choice skips them.
const unusable = new Set();

/** The transports given up on this page (automatic choice). */
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
 */
export function parseTransport(text) {
  const t = String(text ?? "").trim().toLowerCase().replace(/[-_ ]/g, "");
  if (t === "ws" || t === "websocket" || t === "websockets") return "ws";
  if (t === "sse" || t === "eventsource" || t === "serversentevents") return "sse";
  if (t === "longpoll" || t === "longpolling" || t === "poll" || t === "polling") return "longpoll";
  return "auto";
}

export class Events extends Emitter {
  /**
   * @param {Session} session
   * @param {object} [options]
   * @param {string} [options.transport]  "auto" (default), "ws", "sse" or "longpoll"
   * @param {number} [options.timeout]    seconds the engine may hold a long-poll
   * @param {number} [options.base]       first back-off in ms
   * @param {number} [options.max]        longest back-off in ms
   * @param {Function} [options.random]   jitter source (tests)
   * @param {boolean} [options.remember]  remember failed transports for the page's life (default true)
   * @param {object} [options.ws]         options of WsTransport (url, WebSocket, rpc, openTimeout, attachTimeout)
   * @param {object} [options.sse]        options of SseTransport (url, EventSource, fetch, probeTimeout)
   * @param {object} [options.transports] classes by name instead of the built-in ones (tests)
   */
  constructor(session, {
    transport = "auto", timeout = 30, base = 500, max = 30000, random = Math.random, remember = true,
    ws = {}, sse = {}, longpoll = {}, transports = null,
  } = {}) {
    super();
    this.session = session;
    this.mode = transport === "auto" || transport == null ? "auto" : parseTransport(transport);
    if (this.mode === "auto" && transport != null && transport !== "auto") {
      throw new TypeError(`unknown transport ${JSON.stringify(transport)}: use "ws", "sse", "longpoll" or "auto"`);
    }
    this.remember = remember;
    this.common = { base, max, random };
    this.options = { ws, sse, longpoll: { timeout, ...longpoll } };
    this.classes = { ...CLASSES, ...(transports ?? {}) };
    this.dispatcher = new Dispatcher(session);
    this.dispatcher.on("event", (ev) => this.emit("event", ev));
    this.current = null; // the transport in use
    this.given = []; // [name, error] given up, in order
    this.running = false;
    this.state = "stopped";
    session.on("destroyed", () => this.stop());
  }

  /** The name of the transport in use ("ws", "sse", "longpoll"), or null. */
  get transport() {
    return this.current?.name ?? null;
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

  /** The transports to try, in order. */
  candidates() {
    if (this.mode !== "auto") return [this.mode];
    return TRANSPORTS.filter((name) => {
      if (name !== "longpoll" && this.remember && unusable.has(name)) return false;
      if (this.given.some(([n]) => n === name)) return false;
      const cls = this.classes[name];
      return typeof cls.available !== "function" || cls.available(this.session, this.options[name]);
    });
  }

  start() {
    if (this.running || this.session.destroyed) return;
    this.running = true;
    this._setState("connecting");
    if (this.current) {
      this.current.start();
      return;
    }
    this._use(this.candidates()[0] ?? "longpoll");
  }

  stop() {
    if (!this.running) return;
    this.running = false;
    this.current?.stop();
    this._setState("stopped");
  }

  /** Deliver a list of events to the subscriptions' handlers (as the transports do). */
  dispatch(events) {
    this.dispatcher.dispatch(events);
  }

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
    t.on("unusable", (error) => {
      if (this.current !== t) return;
      this.given.push([name, error]);
      if (this.remember) unusable.add(name);
      t.dispose();
      const next = this.candidates()[0] ?? "longpoll";
      log(`${name} does not work here (${error?.message ?? error}); trying ${next}`);
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

  _setState(state, info = {}) {
    if (state === this.state && state !== "retrying") return;
    this.state = state;
    log("state", state, info);
    this.emit("state", state, info);
  }
}
