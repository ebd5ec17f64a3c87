// WebSocket: GET /api/ws, JSON-RPC 2.0 both ways.
//
// The socket carries the session's events after `session.attach(sid,
// last_seq)`: the engine first sends every event after `last_seq` (0 when
// nothing was received in this session) and then each new one, as
// notifications {"jsonrpc": "2.0", "method": "events", "params": [event, ...]}.
//
// Calls go over the socket too once it carries the session (the Api hands
// them over: api.channel), which saves an HTTP request per call; the session
// is still created over HTTP (session.create on a socket would attach it at
// once), session.destroy too (it must work while the page unloads), and any
// call made while the socket is not attached.
//
// If the socket closes, it is opened again after the back-off and attached
// with the last seq received. A socket closed with 1001 (going away: the
// engine's node shuts down) is no error: it is opened again at once (within
// `reconnectSpread` ms), to the same URL (behind a balancer another node
// answers; with the engine's session registry the session resumes there).
// The engine answers every call it received before its close frame, so a
// call still waiting then was never run: it is sent again over HTTP. Error 1001 on attach: the engine does not know
// the session; session.js makes a new one and the socket is attached to it.
// A socket that cannot be opened, or closes before the engine answered the
// attach (a proxy that breaks WebSocket), makes the transport "unusable".
//
// Outside a browser, pass a WebSocket class (the `ws` package in Node 20):
// `new Events(session, { WebSocket })`.
//
// Subprotocol: the client offers SUBPROTOCOL ("pushengine.jsonrpc", SPEC
// section 17), which the engine answers; `offerSubprotocol: false` offers
// none (for an older engine that does not answer it: a browser refuses a
// handshake whose offered subprotocol is not answered).

import { Deferred, CancelledError, fail } from "./deferred.js";
import { ErrorCode, NetworkError, RpcError } from "./api.js";
import { SessionDestroyedError } from "./session.js";
import { Transport, TransportError, apiBase, messageOf, withQuery } from "./transport.js";
import { logger } from "./debug.js";

/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./transport.js").Dispatcher} Dispatcher */

const log = logger("ws");
const OPEN = 1;

/** The WebSocket subprotocol of the engine's JSON-RPC (offered unless `offerSubprotocol` is false). */
export const SUBPROTOCOL = "pushengine.jsonrpc";

/** Calls that never go over the socket. */
const HTTP_ONLY = new Set(["session.create", "session.destroy", "session.get_events", "session.attach"]);

/**
 * What the client uses of a WebSocket: the browser's, or the `ws` package's
 * in Node. The handlers are only ever set.
 * @typedef {object} WebSocketLike
 * @property {number} readyState  0 connecting, 1 open, 2 closing, 3 closed
 * @property {(data: string) => void} send
 * @property {(code?: number, reason?: string) => void} close
 * @property {unknown} onopen
 * @property {unknown} onmessage
 * @property {unknown} onerror
 * @property {unknown} onclose
 */

/**
 * A WebSocket class.
 * @typedef {new (url: string, protocols?: string | string[]) => WebSocketLike} WebSocketConstructor
 */

/**
 * The options of WsTransport: those of Transport, and
 * @typedef {object} WsExtras
 * @property {string | null} [url]         the socket endpoint (default: beside the Api's URL, "/api/ws")
 * @property {WebSocketConstructor} [WebSocket]  the WebSocket class (default: the global one)
 * @property {boolean} [rpc]               calls over the socket while it is attached (default true)
 * @property {boolean} [offerSubprotocol]  offer SUBPROTOCOL in the handshake (default true)
 * @property {number} [openTimeout]        ms for the socket to open
 * @property {number} [attachTimeout]      ms for the engine to answer session.attach
 */
/** @typedef {import("./transport.js").TransportOptions & WsExtras} WsOptions */

/**
 * A call on its way over the socket (`resend`: over HTTP when the engine
 * goes away before it answered).
 * @typedef {{d: Deferred<unknown>, method: string, params: unknown[], resend: boolean, forget: () => void}} PendingCall
 */

/** The close code of an engine whose node shuts down (RFC 6455 "going away"). */
export const GOING_AWAY = 1001;

/**
 * An absolute ws:// or wss:// URL for `url` (relative to the page).
 * @param {string} url
 * @param {string | undefined} [base]
 * @returns {string}
 */
export function socketUrl(url, base = globalThis.location?.href) {
  const u = base ? new URL(url, base) : new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  return u.href;
}

/** WebSocket (`GET /api/ws`): events as notifications, and calls over the socket. */
export class WsTransport extends Transport {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {WsOptions} [options]
   */
  constructor(session, dispatcher, {
    url = null, WebSocket = globalThis.WebSocket, rpc = true, offerSubprotocol = true,
    openTimeout = 10000, attachTimeout = 10000, ...options
  } = {}) {
    super(session, dispatcher, options);
    this.url = url ?? `${apiBase(session.api?.url)}ws`;
    this.WebSocket = WebSocket;
    this.rpc = rpc;
    this.offerSubprotocol = offerSubprotocol;
    this.openTimeout = openTimeout;
    this.attachTimeout = attachTimeout;
    this.callTimeout = session.api?.timeout ?? 30000;
    /** @type {WebSocketLike | null} */
    this.socket = null;
    /** The session the socket carries. @type {string | null} */
    this.attachedSid = null;
    /** @private the session generation its events belong to @type {number | null} */
    this._generation = null;
    /** @private Deferred: open the session, the socket, attach @type {Deferred<unknown> | null} */
    this._cycle = null;
    /** @private call id -> the call @type {Map<number, PendingCall>} */
    this._pending = new Map();
    /** @private */
    this._nextId = 1;
    /** @private the socket was closed with 1001 while the cycle went on */
    this._goingAway = false;
    this._offs.push(session.on("created", (sid) => {
      // Another call made a new session: attach the socket to it.
      if (this.running && !this._cycle && this.attachedSid !== null && this.attachedSid !== sid) {
        this._detached();
        this._begin();
      }
    }));
  }

  /** @returns {"ws"} */
  get name() {
    return "ws";
  }

  /**
   * Whether it can run here at all.
   * @param {Session} session
   * @param {WsOptions} [options]
   * @returns {boolean}
   */
  static available(session, { WebSocket = globalThis.WebSocket, url = null } = {}) {
    return typeof WebSocket === "function" && (url !== null || typeof session.api?.url === "string");
  }

  /** Calls waiting for their answer on the socket. */
  get pendingCalls() {
    return this._pending.size;
  }

  // -- the Api's channel: calls over the socket ---------------------------------

  /**
   * Whether the Api may send this call over the socket now.
   * @param {string} method
   * @param {{session?: string | null, keepalive?: boolean}} [options]
   * @returns {boolean}
   */
  accepts(method, { session = null, keepalive = false } = {}) {
    return this.rpc && this.running && !keepalive && this.attachedSid !== null &&
      this.socket?.readyState === OPEN && !HTTP_ONLY.has(method) &&
      (session === null || session === this.attachedSid);
  }

  /**
   * A JSON-RPC call over the socket: a Deferred, as Api.call's. Cancelling
   * it drops the pending call (its answer, if it comes, is ignored).
   * @param {string} method
   * @param {unknown[]} [params]
   * @param {{timeout?: number, resend?: boolean}} [options]  `resend`: over HTTP if the engine goes away first (default true)
   * @returns {Deferred<unknown>}
   */
  call(method, params = [], { timeout = this.callTimeout, resend = true } = {}) {
    const socket = this.socket;
    if (!socket || socket.readyState !== OPEN) {
      return fail(new NetworkError(`${method}: the WebSocket is not open`));
    }
    const id = this._nextId++;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer = undefined;
    const forget = () => {
      clearTimeout(timer);
      this._pending.delete(id);
    };
    /** @type {Deferred<unknown>} */
    const d = new Deferred(forget);
    if (timeout) {
      timer = setTimeout(() => {
        forget();
        if (!d.called) d.errback(new NetworkError(`${method} timed out after ${timeout} ms`));
      }, timeout);
    }
    this._pending.set(id, { d, method, params, resend, forget });
    log("->", id, method, params);
    try {
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    } catch (e) {
      forget();
      d.errback(new NetworkError(messageOf(e), { cause: e }));
    }
    return d;
  }

  // -- lifetime --------------------------------------------------------------------

  /** @protected */
  _begin() {
    if (!this.running || this._cycle) return;
    this._goingAway = false;
    let stage = "session";
    /** @type {string} */
    let sid = "";
    const d = this.session.open()
      .addCallback((s) => {
        sid = s;
        stage = "socket";
        return this._openSocket();
      })
      .addCallback(() => {
        stage = "attach";
        this._detached();
        this._generation = this.dispatcher.sync();
        // The engine answers the attach first, then writes the events after
        // our last seq: the dispatcher, synced above, takes them in order.
        return this.call("session.attach", [sid, this.dispatcher.lastSeq],
          { timeout: this.attachTimeout, resend: false });
      });
    this._cycle = d;
    d.addCallbacks(
      () => {
        if (this._cycle !== d) return undefined;
        this._cycle = null;
        this.attachedSid = sid;
        if (this.rpc && this.session.api && "channel" in this.session.api) this.session.api.channel = this;
        log("attached", sid, "after seq", this.dispatcher.lastSeq);
        this._connected();
        return undefined;
      },
      (f) => {
        if (this._cycle === d) this._cycle = null;
        if (!this.running || f.check(CancelledError)) return undefined;
        if (f.check(SessionDestroyedError)) {
          this.stop();
          return undefined;
        }
        if (this._goingAway) {
          // The node shut down while the socket opened or attached: not the socket's fault.
          this._goingAway = false;
          this._reconnect("the engine's node went away while attaching:");
          return undefined;
        }
        if (stage === "session") {
          this._retry(f.value); // the engine is away: not the socket's fault
          return undefined;
        }
        if (stage === "attach" && f.check(RpcError) &&
            (/** @type {RpcError} */ (f.value).code === ErrorCode.UNKNOWN_SESSION ||
           /** @type {RpcError} */ (f.value).code === ErrorCode.BAD_PARAMS)) {
          // Unknown, or our last seq is ahead of it: not the session we had.
          this._sessionLost(sid); // the socket stays open for the new session
          return undefined;
        }
        this._closeSocket(1000, "attach failed");
        this._transportFailed(f.value);
        return undefined;
      },
    );
  }

  /** @protected */
  _end() {
    const cycle = this._cycle;
    this._cycle = null;
    cycle?.cancel();
    this._closeSocket(1000, "stopped");
  }

  /**
   * The socket no longer carries a session: calls go over HTTP again.
   * @private
   */
  _detached() {
    this.attachedSid = null;
    if (this.session.api?.channel === this) this.session.api.channel = null;
  }

  /**
   * A Deferred that fires once the socket is open (a new one if needed).
   * @private
   * @returns {Deferred<WebSocketLike>}
   */
  _openSocket() {
    if (this.socket && this.socket.readyState === OPEN) return Deferred.succeed(this.socket);
    this._closeSocket(1000, "replaced");
    /** @type {WebSocketLike} */
    let socket;
    try {
      const url = this.session.api?.apiKey ? withQuery(this.url, "apikey", this.session.api.apiKey) : this.url;
      socket = this.offerSubprotocol ? new this.WebSocket(socketUrl(url), [SUBPROTOCOL])
        : new this.WebSocket(socketUrl(url));
    } catch (e) {
      return fail(new TransportError(`the WebSocket could not be made: ${messageOf(e)}`, { cause: e }));
    }
    this.socket = socket;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer = undefined;
    /** @type {Deferred<WebSocketLike>} */
    const d = new Deferred(() => {
      clearTimeout(timer);
      if (this.socket === socket) this._closeSocket(1000, "cancelled");
    });
    timer = setTimeout(() => {
      if (d.called) return;
      if (this.socket === socket) this._closeSocket(1000, "open timed out");
      d.errback(new TransportError(`the WebSocket did not open in ${this.openTimeout} ms`));
    }, this.openTimeout);
    socket.onopen = () => {
      clearTimeout(timer);
      if (this.socket === socket && !d.called) d.callback(socket);
    };
    socket.onmessage = (/** @type {{data: unknown}} */ message) => {
      if (this.socket === socket) this._message(String(message.data));
    };
    socket.onerror = () => { /* onclose follows */ };
    socket.onclose = (/** @type {{code?: number, reason?: string} | undefined} */ e) => {
      clearTimeout(timer);
      if (this.socket !== socket) return;
      this.socket = null;
      this._socketClosed(e);
      if (!d.called) {
        d.errback(new TransportError(`the WebSocket could not be opened (close code ${e?.code ?? "?"})`));
      }
    };
    return d;
  }

  /**
   * @private
   * @param {number} code
   * @param {string} reason
   */
  _closeSocket(code, reason) {
    const socket = this.socket;
    if (!socket) return;
    this.socket = null;
    socket.onopen = socket.onmessage = socket.onerror = socket.onclose = null;
    try {
      socket.close(code, reason);
    } catch (_) { /* already closed */ }
    this._socketClosed({ code, reason });
  }

  /**
   * The socket is gone: its calls fail; if it carried the session, reconnect.
   * @private
   * @param {{code?: number, reason?: string} | undefined} e
   */
  _socketClosed(e) {
    const goingAway = e?.code === GOING_AWAY;
    const sid = this.attachedSid;
    const pending = [...this._pending.values()];
    this._pending.clear();
    const wasAttached = this.attachedSid !== null;
    this._detached();
    // (before the pending attach fails: the cycle then knows why)
    if (goingAway && this.running && this._cycle) this._goingAway = true;
    for (const { d, method, params, resend, forget } of pending) {
      forget();
      if (d.called) continue;
      if (goingAway && resend && this.session.api) {
        // Never run (the engine answers what it received before its close
        // frame): sent again over HTTP, where another node answers.
        log("sending", method, "again over HTTP: the engine's node went away");
        this.session.api.call(method, params, { session: sid }).addCallbacks(
          (result) => { if (!d.called) d.callback(result); return undefined; },
          (f) => { if (!d.called) d.errback(f.value); return undefined; },
        );
        continue;
      }
      d.errback(new NetworkError(`${method}: the WebSocket closed (${e?.code ?? "?"})`));
    }
    if (wasAttached && this.running && !this._cycle) {
      log("closed", e?.code, e?.reason);
      if (goingAway) {
        this._reconnect("the engine's node is going away:");
        return;
      }
      this._retry(new NetworkError(`the WebSocket closed (${e?.code ?? "?"}${e?.reason ? `: ${e.reason}` : ""})`));
    }
  }

  /**
   * @private
   * @param {string} text
   */
  _message(text) {
    /** @type {unknown} */
    let data;
    try {
      data = JSON.parse(text);
    } catch (_) {
      log("a message that is not JSON:", text);
      return;
    }
    for (const item of Array.isArray(data) ? data : [data]) {
      if (item === null || typeof item !== "object") continue;
      const m = /** @type {{id?: unknown, method?: unknown, params?: unknown, result?: unknown, error?: {code: number, message?: string, data?: unknown}}} */ (item);
      if (m.method === "events" && m.id === undefined) {
        if (Array.isArray(m.params)) this.dispatcher.dispatch(m.params, this._generation);
        continue;
      }
      const call = typeof m.id === "number" ? this._pending.get(m.id) : undefined;
      if (!call) {
        if (m.error) log("error from the engine:", m.error);
        continue;
      }
      call.forget();
      if (call.d.called) continue;
      if (m.error) {
        const { code, message, data: extra } = m.error;
        log("<-", m.id, call.method, "failed:", m.error);
        call.d.errback(new RpcError(code, message, extra, call.method));
      } else {
        log("<-", m.id, call.method, m.result);
        call.d.callback(m.result);
      }
    }
  }
}
