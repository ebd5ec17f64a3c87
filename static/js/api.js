// JSON-RPC 2.0 over fetch. Every call returns a Deferred: it fires with the
// call's result, or fails with an RpcError (the engine answered with an error:
// `code`, `message`) or a NetworkError (no usable answer: the connection failed,
// timed out, or the answer was not JSON-RPC). Cancelling the Deferred aborts the
// request. While the WebSocket transport carries the session, calls go over
// its socket instead (`channel`, set by transport-ws.js), with the same
// results and errors.
//
//   const api = new Api();                        // POST /api/jsonrpc
//   api.call("session.create").addCallback((sid) => ...);
//   api.call("session.get_events", [sid, 30, 0], { session: sid, timeout: 45000 });

import { Deferred } from "./deferred.js";
import { logger } from "./debug.js";

const log = logger("api");

/** The engine's error codes. */
export const ErrorCode = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  UNKNOWN_METHOD: -32601,
  BAD_PARAMS: -32602,
  INTERNAL: -32603,
  UNKNOWN_SESSION: 1001,
  UNKNOWN_VIEW: 1002,
  NOT_AUTHORIZED: 1003,
  LIMIT_REACHED: 1004,
  UNKNOWN_KEY: 1005,
});

/** The engine answered the call with an error. */
export class RpcError extends Error {
  constructor(code, message, data = undefined, method = undefined) {
    super(message || `error ${code}`);
    this.name = "RpcError";
    this.code = code;
    this.data = data;
    this.method = method;
  }
}

/** The call got no usable answer (connection failed, timeout, HTTP error without a JSON-RPC body). */
export class NetworkError extends Error {
  constructor(message, { status = 0, cause = undefined } = {}) {
    super(message);
    this.name = "NetworkError";
    this.status = status;
    if (cause !== undefined) this.cause = cause;
  }
}

function withQuery(url, name, value) {
  const sep = url.includes("?") ? "&" : "?";
  return `${url}${sep}${name}=${encodeURIComponent(value)}`;
}

export class Api {
  /**
   * @param {object} [options]
   * @param {string} [options.url]      the JSON-RPC endpoint
   * @param {string} [options.apiKey]   sent as ?apikey= when set
   * @param {number} [options.timeout]  default request timeout in ms (0: none)
   * @param {Function} [options.fetch]  the fetch implementation (tests inject one)
   */
  constructor({ url = "/api/jsonrpc", apiKey = null, timeout = 30000, fetch = undefined } = {}) {
    this.url = url;
    this.apiKey = apiKey;
    this.timeout = timeout;
    this._fetch = fetch ?? ((...args) => globalThis.fetch(...args));
    this._nextId = 1;
    // Another way to the engine that takes calls while it is up (the WebSocket
    // transport): {accepts(method, {session, keepalive}), call(method, params, {timeout})}.
    this.channel = null;
  }

  /** The URL of a call; `?session=` lets a load balancer keep a session on one node. */
  urlFor(session = null) {
    let url = this.url;
    if (session) url = withQuery(url, "session", session);
    if (this.apiKey) url = withQuery(url, "apikey", this.apiKey);
    return url;
  }

  /**
   * Call `method` with positional `params`.
   * @param {object} [options]
   * @param {string} [options.session]   the session id to put into the URL
   * @param {number} [options.timeout]   ms before the call fails with a NetworkError
   * @param {boolean} [options.keepalive] let the request outlive the page (unload)
   */
  call(method, params = [], { session = null, timeout = this.timeout, keepalive = false } = {}) {
    const channel = this.channel;
    if (channel && channel.accepts(method, { session, keepalive })) {
      return channel.call(method, params, { timeout });
    }
    const id = this._nextId++;
    const controller = new AbortController();
    let timedOut = false;
    let timer = null;
    const d = new Deferred(() => controller.abort());
    const body = JSON.stringify({ jsonrpc: "2.0", id, method, params });
    log("->", id, method, params);
    if (timeout) {
      timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeout);
    }
    let request;
    try {
      request = Promise.resolve(this._fetch(this.urlFor(session), {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body,
        signal: controller.signal,
        keepalive,
        credentials: "same-origin",
      }));
    } catch (e) {
      request = Promise.reject(e);
    }
    request
      .then(async (response) => {
        const text = await response.text();
        let data;
        try {
          data = JSON.parse(text);
        } catch (_) {
          throw new NetworkError(`HTTP ${response.status}: the answer is not JSON`,
            { status: response.status });
        }
        if (data !== null && typeof data === "object" && data.error) {
          const { code, message, data: extra } = data.error;
          throw new RpcError(code, message, extra, method);
        }
        if (!response.ok) {
          throw new NetworkError(`HTTP ${response.status}`, { status: response.status });
        }
        if (data === null || typeof data !== "object" || !("result" in data)) {
          throw new NetworkError("the answer holds neither a result nor an error",
            { status: response.status });
        }
        return data.result;
      })
      .catch((e) => {
        if (e instanceof RpcError || e instanceof NetworkError) throw e;
        if (timedOut) throw new NetworkError(`${method} timed out after ${timeout} ms`, { cause: e });
        throw new NetworkError(e?.message || String(e), { cause: e });
      })
      .then(
        (result) => {
          clearTimeout(timer);
          log("<-", id, method, result);
          if (!d.called) d.callback(result);
        },
        (error) => {
          clearTimeout(timer);
          log("<-", id, method, "failed:", error);
          if (!d.called) d.errback(error);
        },
      );
    return d;
  }
}
