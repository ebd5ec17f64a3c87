// Server-Sent Events: GET /api/events?session=SID&last_event_id=N.
//
// The browser's EventSource holds one stream; every message is one event
// (`id:` its seq, `data:` its JSON). Reconnecting is done here, not by the
// browser (its fixed `retry: 3000`), so that the back-off is the same as on
// the other transports: on an error the stream is closed and opened again
// after the back-off with `last_event_id` = the last seq received, and the
// engine sends every later event once.
//
// An EventSource that cannot open its stream does not say why (404 for an
// unknown session, a proxy's 502, no answer at all): the same URL is then
// fetched once to read the answer. 404 with code 1001 means the engine no
// longer knows the session (it restarted, or the session timed out):
// session.js makes a new one, and the stream follows it. Anything else before
// the stream ever opened on this page means streams do not get through here:
// the automatic choice falls back to long-polling.

import { Deferred, CancelledError } from "./deferred.js";
import { ErrorCode } from "./api.js";
import { SessionDestroyedError } from "./session.js";
import { Transport, TransportError, apiBase, withQuery } from "./transport.js";

const CLOSED = 2;

export class SseTransport extends Transport {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {object} [options]  those of Transport, and
   * @param {string} [options.url]          the events endpoint (default: beside the Api's URL, "/api/events")
   * @param {Function} [options.EventSource] the EventSource class (tests inject one)
   * @param {Function} [options.fetch]      fetch, to read why a stream was refused
   * @param {number} [options.probeTimeout] ms for that
   */
  constructor(session, dispatcher, {
    url = null, EventSource = globalThis.EventSource, fetch = undefined, probeTimeout = 10000, ...options
  } = {}) {
    super(session, dispatcher, options);
    this.url = url ?? `${apiBase(session.api?.url)}events`;
    this.EventSource = EventSource;
    this._fetch = fetch ?? ((...args) => globalThis.fetch(...args));
    this.probeTimeout = probeTimeout;
    this.source = null; // the open EventSource
    this.sid = null; // the session it carries
    this._opening = null;
    this._probing = null;
    this._offs.push(session.on("created", (sid) => {
      // Another call made a new session: the stream follows it.
      if (this.running && this.source && this.sid !== sid) {
        this._close();
        this._begin();
      }
    }));
  }

  get name() {
    return "sse";
  }

  /** Whether it can run here at all. */
  static available(session, { EventSource = globalThis.EventSource, url = null } = {}) {
    return typeof EventSource === "function" && (url !== null || typeof session.api?.url === "string");
  }

  /** The URL of the stream of `sid`, resuming after `lastSeq`. */
  urlFor(sid, lastSeq) {
    let url = withQuery(this.url, "session", sid);
    url = withQuery(url, "last_event_id", String(lastSeq));
    const key = this.session.api?.apiKey;
    if (key) url = withQuery(url, "apikey", key);
    return url;
  }

  _end() {
    this._opening?.cancel();
    this._opening = null;
    this._probing?.cancel();
    this._probing = null;
    this._close();
  }

  _close() {
    const source = this.source;
    this.source = null;
    this.sid = null;
    if (source) {
      source.onopen = source.onmessage = source.onerror = null;
      source.close();
    }
  }

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

  _open(sid) {
    if (!this.running) return;
    const generation = this.dispatcher.sync();
    const lastSeq = this.dispatcher.lastSeq;
    const url = this.urlFor(sid, lastSeq);
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
    source.onopen = () => {
      if (this.source !== source) return;
      opened = true;
      this._connected();
    };
    source.onmessage = (message) => {
      if (this.source !== source) return;
      let ev;
      try {
        ev = JSON.parse(message.data);
      } catch (_) {
        return; // not an event
      }
      if (!opened) source.onopen();
      this.dispatcher.dispatch([ev], generation);
    };
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
   */
  _whyRefused(sid, url, opened) {
    const controller = typeof AbortController === "function" ? new AbortController() : null;
    const d = new Deferred(() => controller?.abort());
    this._probing = d;
    const timer = setTimeout(() => controller?.abort(), this.probeTimeout);
    Promise.resolve()
      .then(() => this._fetch(url, {
        headers: { Accept: "text/event-stream" },
        signal: controller?.signal,
        credentials: "same-origin",
        cache: "no-store",
      }))
      .then(async (response) => {
        if (response.ok) {
          controller?.abort(); // a stream after all: it is opened again below
          return { status: response.status, code: null };
        }
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
