// JSON-RPC 2.0 over fetch. Every call returns a Deferred: it fires with the
// call's result, or fails with an RpcError (the engine answered with an error:
// `code`, `message`) or a NetworkError (no usable answer: the connection failed,
// timed out, or the answer was not JSON-RPC). Cancelling the Deferred aborts the
// request, and so does an AbortSignal given as `signal`. While the WebSocket
// transport carries the session, calls go over its socket instead (`channel`,
// set by transport-ws.js), with the same results and errors.
//
//   const api = new Api();                        // POST /api/jsonrpc
//   api.call("session.create").addCallback((sid) => ...);
//   const sid = await api.call("session.create"); // a Deferred is a thenable
//   api.call("session.get_events", [sid, 30, 0], { session: sid, timeout: 45000, signal });
//
// Outside a browser give the engine's absolute URL
// (`new Api({ url: "http://host:8080/api/jsonrpc" })`); Node 20 has fetch.

import { Deferred, abortable } from "./deferred.js";
import { logger } from "./debug.js";

const log = logger("api");

/**
 * An object of a view, as the engine sends it (a JSON object with an id).
 * @typedef {Record<string, unknown>} Item
 */

/**
 * An event of a subscription (SPEC section 3): `insert`, `update` (with
 * `old`), `delete` (the object's last state), `ping`, or `reset` (`obj` is the
 * view's whole new state).
 * @typedef {{key: string, seq?: number, action: "insert" | "delete", obj: Item}
 *   | {key: string, seq?: number, action: "update", obj: Item, old?: Item}
 *   | {key: string, seq?: number, action: "reset", obj: Item[]}
 *   | {key: string, seq?: number, action: "ping", obj?: undefined}} PushEvent
 */

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
  /**
   * @param {number} code       the JSON-RPC error code (ErrorCode)
   * @param {string} [message]
   * @param {unknown} [data]    the error's `data`, when the engine sent one
   * @param {string} [method]   the method called
   */
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
  /**
   * @param {string} message
   * @param {{status?: number, cause?: unknown}} [options]  the HTTP status (0: none), the error underneath
   */
  constructor(message, { status = 0, cause = undefined } = {}) {
    super(message);
    this.name = "NetworkError";
    this.status = status;
    /** @type {unknown} */
    this.cause = cause;
  }
}

/**
 * `url` with `name=value` added to its query.
 * @param {string} url
 * @param {string} name
 * @param {string} value
 * @returns {string}
 */
export function withQuery(url, name, value) {
  const sep = url.includes("?") ? "&" : "?";
  return `${url}${sep}${name}=${encodeURIComponent(value)}`;
}

/**
 * What the client reads of a fetch Response.
 * @typedef {object} FetchResponse
 * @property {number} status
 * @property {boolean} ok
 * @property {() => Promise<string>} text
 */

/**
 * What the client passes to fetch.
 * @typedef {object} FetchInit
 * @property {string} [method]
 * @property {Record<string, string>} [headers]
 * @property {string} [body]
 * @property {AbortSignal} [signal]
 * @property {boolean} [keepalive]
 * @property {"same-origin" | "include" | "omit"} [credentials]
 * @property {"no-store" | "default"} [cache]
 */

/**
 * A fetch function: the browser's and Node's `fetch` are ones.
 * @typedef {(url: string, init: FetchInit) => Promise<FetchResponse>} FetchLike
 */

/**
 * The options of one call.
 * @typedef {object} CallOptions
 * @property {string | null} [session]  the session id to put into the URL (`?session=`)
 * @property {number} [timeout]         ms before the call fails with a NetworkError (0: none)
 * @property {boolean} [keepalive]      let the request outlive the page (unload)
 * @property {AbortSignal | null} [signal]  cancel the call when it aborts (CancelledError)
 */

/**
 * Another way to the engine that takes calls while it is up: the WebSocket
 * transport while it carries the session.
 * @typedef {object} CallChannel
 * @property {(method: string, options: {session: string | null, keepalive: boolean}) => boolean} accepts
 * @property {(method: string, params: unknown[], options: {timeout?: number}) => Deferred<unknown>} call
 */

/** JSON-RPC 2.0 over fetch (or over the WebSocket transport's socket, while it carries the session). */
export class Api {
  /**
   * @param {object} [options]
   * @param {string} [options.url]      the JSON-RPC endpoint (absolute outside a browser)
   * @param {string | null} [options.apiKey]  sent as ?apikey= when set
   * @param {number} [options.timeout]  default request timeout in ms (0: none)
   * @param {FetchLike} [options.fetch] the fetch implementation (default: the global fetch)
   */
  constructor({ url = "/api/jsonrpc", apiKey = null, timeout = 30000, fetch = undefined } = {}) {
    this.url = url;
    this.apiKey = apiKey;
    this.timeout = timeout;
    /** @private @type {FetchLike} */
    this._fetch = fetch ?? ((u, init) => globalThis.fetch(u, init));
    /** @private */
    this._nextId = 1;
    /**
     * Another way to the engine that takes calls while it is up (set by the
     * WebSocket transport).
     * @type {CallChannel | null}
     */
    this.channel = null;
  }

  /**
   * The URL of a call; `?session=` lets a load balancer keep a session on one node.
   * @param {string | null} [session]
   * @returns {string}
   */
  urlFor(session = null) {
    let url = this.url;
    if (session) url = withQuery(url, "session", session);
    if (this.apiKey) url = withQuery(url, "apikey", this.apiKey);
    return url;
  }

  /**
   * Call `method` with positional `params`. The Deferred fires with the
   * result (typed `R` by the caller), or fails with an RpcError, a
   * NetworkError, or a CancelledError (cancel(), or `signal` aborted: the
   * request is aborted).
   * @template [R=unknown]
   * @param {string} method
   * @param {unknown[]} [params]
   * @param {CallOptions} [options]
   * @returns {Deferred<R>}
   */
  call(method, params = [], { session = null, timeout = this.timeout, keepalive = false, signal = null } = {}) {
    if (signal?.aborted) return abortable(new Deferred(), signal); // nothing is sent
    const channel = this.channel;
    if (channel && channel.accepts(method, { session, keepalive })) {
      return abortable(/** @type {Deferred<R>} */ (channel.call(method, params, { timeout })), signal);
    }
    const id = this._nextId++;
    const controller = new AbortController();
    let timedOut = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer = undefined;
    /** @type {Deferred<R>} */
    const d = new Deferred(() => controller.abort());
    const body = JSON.stringify({ jsonrpc: "2.0", id, method, params });
    log("->", id, method, params);
    if (timeout) {
      timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeout);
    }
    /** @type {Promise<FetchResponse>} */
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
        return /** @type {R} */ (data.result);
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
    return abortable(d, signal);
  }
}
