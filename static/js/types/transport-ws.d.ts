/**
 * An absolute ws:// or wss:// URL for `url` (relative to the page).
 * @param {string} url
 * @param {string | undefined} [base]
 * @returns {string}
 */
export function socketUrl(url: string, base?: string | undefined): string;
/** The WebSocket subprotocol of the engine's JSON-RPC (offered unless `offerSubprotocol` is false). */
export const SUBPROTOCOL: "pushengine.jsonrpc";
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
export const GOING_AWAY: 1001;
/** WebSocket (`GET /api/ws`): events as notifications, and calls over the socket. */
export class WsTransport extends Transport {
    /**
     * Whether it can run here at all.
     * @param {Session} session
     * @param {WsOptions} [options]
     * @returns {boolean}
     */
    static available(session: Session, { WebSocket, url }?: WsOptions): boolean;
    /**
     * @param {Session} session
     * @param {Dispatcher} dispatcher
     * @param {WsOptions} [options]
     */
    constructor(session: Session, dispatcher: Dispatcher, { url, WebSocket, rpc, offerSubprotocol, openTimeout, attachTimeout, ...options }?: WsOptions);
    url: string;
    WebSocket: WebSocketConstructor;
    rpc: boolean;
    offerSubprotocol: boolean;
    openTimeout: number;
    attachTimeout: number;
    callTimeout: number;
    /** @type {WebSocketLike | null} */
    socket: WebSocketLike | null;
    /** The session the socket carries. @type {string | null} */
    attachedSid: string | null;
    /** @private the session generation its events belong to @type {number | null} */
    private _generation;
    /** @private Deferred: open the session, the socket, attach @type {Deferred<unknown> | null} */
    private _cycle;
    /** @private call id -> the call @type {Map<number, PendingCall>} */
    private _pending;
    /** @private */
    private _nextId;
    /** @private the socket was closed with 1001 while the cycle went on */
    private _goingAway;
    /** @returns {"ws"} */
    get name(): "ws";
    /** Calls waiting for their answer on the socket. */
    get pendingCalls(): number;
    /**
     * Whether the Api may send this call over the socket now.
     * @param {string} method
     * @param {{session?: string | null, keepalive?: boolean}} [options]
     * @returns {boolean}
     */
    accepts(method: string, { session, keepalive }?: {
        session?: string | null;
        keepalive?: boolean;
    }): boolean;
    /**
     * A JSON-RPC call over the socket: a Deferred, as Api.call's. Cancelling
     * it drops the pending call (its answer, if it comes, is ignored).
     * @param {string} method
     * @param {unknown[]} [params]
     * @param {{timeout?: number, resend?: boolean}} [options]  `resend`: over HTTP if the engine goes away first (default true)
     * @returns {Deferred<unknown>}
     */
    call(method: string, params?: unknown[], { timeout, resend }?: {
        timeout?: number;
        resend?: boolean;
    }): Deferred<unknown>;
    /**
     * The socket no longer carries a session: calls go over HTTP again.
     * @private
     */
    private _detached;
    /**
     * A Deferred that fires once the socket is open (a new one if needed).
     * @private
     * @returns {Deferred<WebSocketLike>}
     */
    private _openSocket;
    /**
     * @private
     * @param {number} code
     * @param {string} reason
     */
    private _closeSocket;
    /**
     * The socket is gone: its calls fail; if it carried the session, reconnect.
     * @private
     * @param {{code?: number, reason?: string} | undefined} e
     */
    private _socketClosed;
    /**
     * @private
     * @param {string} text
     */
    private _message;
}
export type Session = import("./session.js").Session;
export type Dispatcher = import("./transport.js").Dispatcher;
/**
 * What the client uses of a WebSocket: the browser's, or the `ws` package's
 * in Node. The handlers are only ever set.
 */
export type WebSocketLike = {
    /**
     * 0 connecting, 1 open, 2 closing, 3 closed
     */
    readyState: number;
    send: (data: string) => void;
    close: (code?: number, reason?: string) => void;
    onopen: unknown;
    onmessage: unknown;
    onerror: unknown;
    onclose: unknown;
};
/**
 * A WebSocket class.
 */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;
/**
 * The options of WsTransport: those of Transport, and
 */
export type WsExtras = {
    /**
     * the socket endpoint (default: beside the Api's URL, "/api/ws")
     */
    url?: string | null | undefined;
    /**
     * the WebSocket class (default: the global one)
     */
    WebSocket?: WebSocketConstructor | undefined;
    /**
     * calls over the socket while it is attached (default true)
     */
    rpc?: boolean | undefined;
    /**
     * offer SUBPROTOCOL in the handshake (default true)
     */
    offerSubprotocol?: boolean | undefined;
    /**
     * ms for the socket to open
     */
    openTimeout?: number | undefined;
    /**
     * ms for the engine to answer session.attach
     */
    attachTimeout?: number | undefined;
};
export type WsOptions = import("./transport.js").TransportOptions & WsExtras;
/**
 * A call on its way over the socket (`resend`: over HTTP when the engine
 * goes away before it answered).
 */
export type PendingCall = {
    d: Deferred<unknown>;
    method: string;
    params: unknown[];
    resend: boolean;
    forget: () => void;
};
import { Transport } from "./transport.js";
import { Deferred } from "./deferred.js";
