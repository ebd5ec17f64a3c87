/**
 * `url` with `name=value` added to its query.
 * @param {string} url
 * @param {string} name
 * @param {string} value
 * @returns {string}
 */
export function withQuery(url: string, name: string, value: string): string;
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
export const ErrorCode: Readonly<{
    PARSE_ERROR: -32700;
    INVALID_REQUEST: -32600;
    UNKNOWN_METHOD: -32601;
    BAD_PARAMS: -32602;
    INTERNAL: -32603;
    UNKNOWN_SESSION: 1001;
    UNKNOWN_VIEW: 1002;
    NOT_AUTHORIZED: 1003;
    LIMIT_REACHED: 1004;
    UNKNOWN_KEY: 1005;
}>;
/** The engine answered the call with an error. */
export class RpcError extends Error {
    /**
     * @param {number} code       the JSON-RPC error code (ErrorCode)
     * @param {string} [message]
     * @param {unknown} [data]    the error's `data`, when the engine sent one
     * @param {string} [method]   the method called
     */
    constructor(code: number, message?: string, data?: unknown, method?: string);
    code: number;
    data: unknown;
    method: string | undefined;
}
/** The call got no usable answer (connection failed, timeout, HTTP error without a JSON-RPC body). */
export class NetworkError extends Error {
    /**
     * @param {string} message
     * @param {{status?: number, cause?: unknown}} [options]  the HTTP status (0: none), the error underneath
     */
    constructor(message: string, { status, cause }?: {
        status?: number;
        cause?: unknown;
    });
    status: number;
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
    constructor({ url, apiKey, timeout, fetch }?: {
        url?: string | undefined;
        apiKey?: string | null | undefined;
        timeout?: number | undefined;
        fetch?: FetchLike | undefined;
    });
    url: string;
    apiKey: string | null;
    timeout: number;
    /** @private @type {FetchLike} */
    private _fetch;
    /** @private */
    private _nextId;
    /**
     * Another way to the engine that takes calls while it is up (set by the
     * WebSocket transport).
     * @type {CallChannel | null}
     */
    channel: CallChannel | null;
    /**
     * The URL of a call; `?session=` lets a load balancer keep a session on one node.
     * @param {string | null} [session]
     * @returns {string}
     */
    urlFor(session?: string | null): string;
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
    call<R = unknown>(method: string, params?: unknown[], { session, timeout, keepalive, signal }?: CallOptions): Deferred<R>;
}
/**
 * An object of a view, as the engine sends it (a JSON object with an id).
 */
export type Item = Record<string, unknown>;
/**
 * An event of a subscription (SPEC section 3): `insert`, `update` (with
 * `old`), `delete` (the object's last state), `ping`, or `reset` (`obj` is the
 * view's whole new state).
 */
export type PushEvent = {
    key: string;
    seq?: number;
    action: "insert" | "delete";
    obj: Item;
} | {
    key: string;
    seq?: number;
    action: "update";
    obj: Item;
    old?: Item;
} | {
    key: string;
    seq?: number;
    action: "reset";
    obj: Item[];
} | {
    key: string;
    seq?: number;
    action: "ping";
    obj?: undefined;
};
/**
 * What the client reads of a fetch Response.
 */
export type FetchResponse = {
    status: number;
    ok: boolean;
    text: () => Promise<string>;
};
/**
 * What the client passes to fetch.
 */
export type FetchInit = {
    method?: string | undefined;
    headers?: Record<string, string> | undefined;
    body?: string | undefined;
    signal?: AbortSignal | undefined;
    keepalive?: boolean | undefined;
    credentials?: "same-origin" | "include" | "omit" | undefined;
    cache?: "no-store" | "default" | undefined;
};
/**
 * A fetch function: the browser's and Node's `fetch` are ones.
 */
export type FetchLike = (url: string, init: FetchInit) => Promise<FetchResponse>;
/**
 * The options of one call.
 */
export type CallOptions = {
    /**
     * the session id to put into the URL (`?session=`)
     */
    session?: string | null | undefined;
    /**
     * ms before the call fails with a NetworkError (0: none)
     */
    timeout?: number | undefined;
    /**
     * let the request outlive the page (unload)
     */
    keepalive?: boolean | undefined;
    /**
     * cancel the call when it aborts (CancelledError)
     */
    signal?: AbortSignal | null | undefined;
};
/**
 * Another way to the engine that takes calls while it is up: the WebSocket
 * transport while it carries the session.
 */
export type CallChannel = {
    accepts: (method: string, options: {
        session: string | null;
        keepalive: boolean;
    }) => boolean;
    call: (method: string, params: unknown[], options: {
        timeout?: number;
    }) => Deferred<unknown>;
};
import { Deferred } from "./deferred.js";
