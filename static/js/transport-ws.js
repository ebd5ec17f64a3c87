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
// with the last seq received. Error 1001 on attach: the engine does not know
// the session; session.js makes a new one and the socket is attached to it.
// A socket that cannot be opened, or closes before the engine answered the
// attach (a proxy that breaks WebSocket), makes the transport "unusable".

import { Deferred, CancelledError, fail } from "./deferred.js";
import { ErrorCode, NetworkError, RpcError } from "./api.js";
import { SessionDestroyedError } from "./session.js";
import { Transport, TransportError, apiBase, withQuery } from "./transport.js";
import { logger } from "./debug.js";

const log = logger("ws");
const OPEN = 1;

/** Calls that never go over the socket. */
const HTTP_ONLY = new Set(["session.create", "session.destroy", "session.get_events", "session.attach"]);

/** An absolute ws:// or wss:// URL for `url` (relative to the page). */
export function socketUrl(url, base = globalThis.location?.href) {
  const u = base ? new URL(url, base) : new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  return u.href;
}

export class WsTransport extends Transport {
  /**
   * @param {Session} session
   * @param {Dispatcher} dispatcher
   * @param {object} [options]  those of Transport, and
   * @param {string} [options.url]          the socket endpoint (default: beside the Api's URL, "/api/ws")
   * @param {Function} [options.WebSocket]  the WebSocket class (tests inject one)
   * @param {boolean} [options.rpc]         calls over the socket while it is attached (default true)
   * @param {number} [options.openTimeout]  ms for the socket to open
   * @param {number} [options.attachTimeout] ms for the engine to answer session.attach
   */
  constructor(session, dispatcher, {
    url = null, WebSocket = globalThis.WebSocket, rpc = true, openTimeout = 10000, attachTimeout = 10000,
    ...options
  } = {}) {
    super(session, dispatcher, options);
    this.url = url ?? `${apiBase(session.api?.url)}ws`;
    this.WebSocket = WebSocket;
    this.rpc = rpc;
    this.openTimeout = openTimeout;
    this.attachTimeout = attachTimeout;
    this.callTimeout = session.api?.timeout ?? 30000;
    this.socket = null;
    this.attachedSid = null; // the session the socket carries
    this._generation = null; // the session generation its events belong to
    this._opening = null; // Deferred: the socket opens
    this._cycle = null; // Deferred: open the session, the socket, attach
    this._pending = new Map(); // call id -> {d, method, timer}
    this._nextId = 1;
    this._offs.push(session.on("created", (sid) => {
      // Another call made a new session: attach the socket to it.
      if (this.running && !this._cycle && this.attachedSid !== null && this.attachedSid !== sid) {
        this._detached();
        this._begin();
      }
    }));
  }

  get name() {
    return "ws";
  }

  /** Whether it can run here at all. */
  static available(session, { WebSocket = globalThis.WebSocket, url = null } = {}) {
    return typeof WebSocket === "function" && (url !== null || typeof session.api?.url === "string");
  }

  // -- the Api's channel: calls over the socket ---------------------------------

  /** Whether the Api may send this call over the socket now. */
  accepts(method, { session = null, keepalive = false } = {}) {
    return this.rpc && this.running && !keepalive && this.attachedSid !== null &&
      this.socket?.readyState === OPEN && !HTTP_ONLY.has(method) &&
      (session === null || session === this.attachedSid);
  }

  /** A JSON-RPC call over the socket: a Deferred, as Api.call's. */
  call(method, params = [], { timeout = this.callTimeout } = {}) {
    const socket = this.socket;
    if (!socket || socket.readyState !== OPEN) {
      return fail(new NetworkError(`${method}: the WebSocket is not open`));
    }
    const id = this._nextId++;
    let timer = null;
    const forget = () => {
      clearTimeout(timer);
      this._pending.delete(id);
    };
    const d = new Deferred(forget);
    if (timeout) {
      timer = setTimeout(() => {
        forget();
        if (!d.called) d.errback(new NetworkError(`${method} timed out after ${timeout} ms`));
      }, timeout);
    }
    this._pending.set(id, { d, method, forget });
    log("->", id, method, params);
    try {
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    } catch (e) {
      forget();
      d.errback(new NetworkError(e?.message || String(e), { cause: e }));
    }
    return d;
  }

  // -- lifetime --------------------------------------------------------------------

  _begin() {
    if (!this.running || this._cycle) return;
    let stage = "session";
    let sid = null;
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
        // Events may come before the answer: the engine first writes what waits.
        return this.call("session.attach", [sid, this.dispatcher.lastSeq], { timeout: this.attachTimeout });
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
        if (stage === "session") {
          this._retry(f.value); // the engine is away: not the socket's fault
          return undefined;
        }
        if (stage === "attach" && f.check(RpcError) &&
            (f.value.code === ErrorCode.UNKNOWN_SESSION || f.value.code === ErrorCode.BAD_PARAMS)) {
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

  _end() {
    const cycle = this._cycle;
    this._cycle = null;
    cycle?.cancel();
    this._closeSocket(1000, "stopped");
  }

  /** The socket no longer carries a session: calls go over HTTP again. */
  _detached() {
    this.attachedSid = null;
    if (this.session.api?.channel === this) this.session.api.channel = null;
  }

  /** A Deferred that fires once the socket is open (a new one if needed). */
  _openSocket() {
    if (this.socket && this.socket.readyState === OPEN) return Deferred.succeed(this.socket);
    this._closeSocket(1000, "replaced");
    let socket;
    try {
      const url = this.session.api?.apiKey ? withQuery(this.url, "apikey", this.session.api.apiKey) : this.url;
      socket = new this.WebSocket(socketUrl(url));
    } catch (e) {
      return fail(new TransportError(`the WebSocket could not be made: ${e?.message ?? e}`, { cause: e }));
    }
    this.socket = socket;
    let timer = null;
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
    socket.onmessage = (message) => {
      if (this.socket === socket) this._message(message.data);
    };
    socket.onerror = () => { /* onclose follows */ };
    socket.onclose = (e) => {
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

  /** The socket is gone: its calls fail; if it carried the session, reconnect. */
  _socketClosed(e) {
    const pending = [...this._pending.values()];
    this._pending.clear();
    for (const { d, method, forget } of pending) {
      forget();
      if (!d.called) d.errback(new NetworkError(`${method}: the WebSocket closed (${e?.code ?? "?"})`));
    }
    const wasAttached = this.attachedSid !== null;
    this._detached();
    if (wasAttached && this.running && !this._cycle) {
      log("closed", e?.code, e?.reason);
      this._retry(new NetworkError(`the WebSocket closed (${e?.code ?? "?"}${e?.reason ? `: ${e.reason}` : ""})`));
    }
  }

  _message(text) {
    let data;
    try {
      data = JSON.parse(text);
    } catch (_) {
      log("a message that is not JSON:", text);
      return;
    }
    for (const m of Array.isArray(data) ? data : [data]) {
      if (m === null || typeof m !== "object") continue;
      if (m.method === "events" && m.id === undefined) {
        if (Array.isArray(m.params)) this.dispatcher.dispatch(m.params, this._generation);
        continue;
      }
      const call = m.id == null ? undefined : this._pending.get(m.id);
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
