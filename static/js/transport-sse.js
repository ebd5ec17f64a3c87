// Server-Sent Events: GET /api/events?session=SID&last_event_id=N.
//
// The browser's EventSource holds one stream; every message is one event
// (`id:` its seq, `data:` its JSON). Reconnecting is done here, not by the
// browser (its fixed `retry: 3000`), so that the back-off is the same as on
// the other transports: on an error the stream is closed and opened again
// after the back-off with `last_event_id` = the last seq received, and the
// engine sends every later event once.
//
// A node that shuts down ends its streams with a last message, `event:
// going-away` (a named event: it never reaches onmessage, and carries no id):
// the stream is closed and opened again at once (within `reconnectSpread`
// ms), with last_event_id, to the same URL: behind a balancer another node
// answers, and with the engine's session registry the session resumes there.
// No error, no back-off.
//
// An EventSource that cannot open its stream does not say why (404 for an
// unknown session, a proxy's 502, no answer at all): the same URL is then
// fetched once to read the answer. 404 with code 1001 means the engine no
// longer knows the session (it restarted, or the session timed out):
// session.js makes a new one, and the stream follows it. Anything else before
// the stream ever opened on this page means streams do not get through here:
// the automatic choice falls back to long-polling.
//
// Outside a browser, pass an EventSource class (the `eventsource` package in
// Node): `new Events(session, { EventSource })`.

import { Deferred, CancelledError } from "./deferred.js";
import { ErrorCode } from "./api.js";
import { SessionDestroyedError } from "./session.js";
import { Transport, TransportError, apiBase, withQuery } from "./transport.js";

/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./transport.js").Dispatcher} Dispatcher */
/** @typedef {import("./api.js").FetchLike} FetchLike */

const CLOSED = 2;

/**
 * What the client uses of an EventSource: the browser's, or one from npm in
 * Node (the `eventsource` package). The handlers are only ever set.
 * @typedef {object} EventSourceLike
 * @property {number} readyState  0 connecting, 1 open, 2 closed
 * @property {() => void} close
 * @property {unknown} onopen
 * @property {unknown} onmessage
 * @property {unknown} onerror
 * @property {(type: string, listener: (event: {data?: unknown}) => void) => void} [addEventListener]  named events ("going-away")
 */

/**
 * An EventSource class.
 * @typedef {new (url: string) => EventSourceLike} EventSourceConstructor
 */

/**
 * The options of SseTransport: those of Transport, and
 * @typedef {object} SseExtras
 * @property {string | null} [url]        the events endpoint (default: beside the Api's URL, "/api/events")
 * @property {EventSourceConstructor} [EventSource]  the EventSource class (default: the global one)
 * @property {FetchLike} [fetch]          fetch, to read why a stream was refused
 * @property {number} [probeTimeout]      ms for that
 */
/** @typedef {import("./transport.js").TransportOptions & SseExtras} SseOptions */

/** Server-Sent Events (`GET /api/events`) through an EventSource. */
export class SseTransport extends Transport {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {SseOptions} [options]
   */
  constructor(session, dispatcher, {
    url = null, EventSource = globalThis.EventSource, fetch = undefined, probeTimeout = 10000, ...options
  } = {}) {
    super(session, dispatcher, options);
    this.url = url ?? `${apiBase(session.api?.url)}events`;
    this.EventSource = EventSource;
    /** @private @type {FetchLike} */
    this._fetch = fetch ?? ((u, init) => globalThis.fetch(u, init));
    this.probeTimeout = probeTimeout;
    /** The open EventSource. @type {EventSourceLike | null} */
    this.source = null;
    /** The session it carries. @type {string | null} */
    this.sid = null;
    /** @private @type {Deferred<string> | null} */
    this._opening = null;
    /** @private @type {Deferred<{status: number, code: unknown, error?: unknown}> | null} */
    this._probing = null;
    this._offs.push(session.on("created", (sid) => {
      // Another call made a new session: the stream follows it.
      if (this.running && this.source && this.sid !== sid) {
        this._close();
        this._begin();
      }
    }));
  }

  /** @returns {"sse"} */
  get name() {
    return "sse";
  }

  /**
   * Whether it can run here at all.
   * @param {Session} session
   * @param {SseOptions} [options]
   * @returns {boolean}
   */
  static available(session, { EventSource = globalThis.EventSource, url = null } = {}) {
    return typeof EventSource === "function" && (url !== null || typeof session.api?.url === "string");
  }

  /**
   * The URL of the stream of `sid`, resuming after `lastSeq`.
   * @param {string} sid
   * @param {number} lastSeq
   * @returns {string}
   */
  urlFor(sid, lastSeq) {
    let url = withQuery(this.url, "session", sid);
    url = withQuery(url, "last_event_id", String(lastSeq));
    const key = this.session.api?.apiKey;
    if (key) url = withQuery(url, "apikey", key);
    return url;
  }

  /** @protected */
  _end() {
    this._opening?.cancel();
    this._opening = null;
    this._probing?.cancel();
    this._probing = null;
    this._close();
  }

  /** @private */
  _close() {
    const source = this.source;
    this.source = null;
    this.sid = null;
    if (source) {
      source.onopen = source.onmessage = source.onerror = null;
      source.close();
    }
  }

  /** @protected */
  _begin() {
    if (!this.running || this.source || this._opening || this._probing) return;
    const d = this.session.open();
    this._opening = d;
    d.addCallbacks(
      (sid) => {
        if (this._opening !== d) return undefined;
        this._opening = null;
        this._open(sid);
        return undefined;
      },
      (f) => {
        if (this._opening === d) this._opening = null;
        if (!this.running || f.check(CancelledError)) return undefined;
        if (f.check(SessionDestroyedError)) {
          this.stop();
          return undefined;
        }
        this._retry(f.value); // the engine is away: not the stream's fault
        return undefined;
      },
    );
  }

  /**
   * @private
   * @param {string} sid
   */
  _open(sid) {
    if (!this.running) return;
    const generation = this.dispatcher.sync();
    const lastSeq = this.dispatcher.lastSeq;
    const url = this.urlFor(sid, lastSeq);
    /** @type {EventSourceLike} */
    let source;
    try {
      source = new this.EventSource(url);
    } catch (e) {
      this._transportFailed(e);
      return;
    }
    this.source = source;
    this.sid = sid;
    let opened = false;
    const onOpen = () => {
      if (this.source !== source) return;
      opened = true;
      this._connected();
    };
    source.onopen = onOpen;
    source.onmessage = (/** @type {{data: unknown}} */ message) => {
      if (this.source !== source) return;
      /** @type {unknown} */
      let ev;
      try {
        ev = JSON.parse(String(message.data));
      } catch (_) {
        return; // not an event
      }
      if (!opened) onOpen();
      this.dispatcher.dispatch([ev], generation);
    };
    // The node shuts down: its last message before the stream ends.
    source.addEventListener?.("going-away", () => {
      if (this.source !== source) return;
      if (!opened) onOpen();
      this._close();
      this._reconnect("the engine's node is going away:");
    });
    source.onerror = () => {
      if (this.source !== source) return;
      const refused = source.readyState === CLOSED;
      this._close();
      if (opened && !refused) this._retry(new Error("the event stream was cut"));
      else this._whyRefused(sid, url, opened);
    };
  }

  /**
   * The stream could not be opened: fetch the same URL once to read the
   * answer. 1001: a new session. Anything else: the stream does not work
   * here (fall back, if it never did; else back-off).
   * @private
   * @param {string} sid
   * @param {string} url
   * @param {boolean} opened
   */
  _whyRefused(sid, url, opened) {
    const controller = typeof AbortController === "function" ? new AbortController() : null;
    /** @type {Deferred<{status: number, code: unknown, error?: unknown}>} */
    const d = new Deferred(() => controller?.abort());
    this._probing = d;
    const timer = setTimeout(() => controller?.abort(), this.probeTimeout);
    Promise.resolve()
      .then(() => this._fetch(url, {
        headers: { Accept: "text/event-stream" },
        signal: controller?.signal ?? undefined,
        credentials: "same-origin",
        cache: "no-store",
      }))
      .then(async (response) => {
        if (response.ok) {
          controller?.abort(); // a stream after all: it is opened again below
          return { status: response.status, code: null };
        }
        /** @type {unknown} */
        let code = null;
        try {
          code = JSON.parse(await response.text())?.error?.code ?? null;
        } catch (_) { /* not JSON: a proxy's page */ }
        return { status: response.status, code };
      })
      .then(
        (answer) => { clearTimeout(timer); if (!d.called) d.callback(answer); },
        (e) => { clearTimeout(timer); if (!d.called) d.callback({ status: 0, code: null, error: e }); },
      );
    d.addCallbacks(
      ({ status, code, error }) => {
        if (this._probing !== d) return undefined;
        this._probing = null;
        if (code === ErrorCode.UNKNOWN_SESSION || code === ErrorCode.BAD_PARAMS) {
          // Unknown, or our last seq is ahead of it: the session is not the one we had.
          this._sessionLost(sid);
        } else if (opened) {
          this._retry(error ?? new Error(`the event stream was refused (HTTP ${status})`));
        } else {
          // The session was just opened over HTTP, but the stream fails (e.g.
          // a proxy in between): unusable, unless it worked before on this
          // page (then the engine is away: back-off).
          this._transportFailed(new TransportError(status === 0
            ? "the event stream could not be opened" : `the event stream was refused (HTTP ${status})`));
        }
        return undefined;
      },
      (f) => {
        if (this._probing === d) this._probing = null;
        f.trap(CancelledError);
        return undefined;
      },
    );
  }
}
