/**
 * The transports given up on this page (automatic choice).
 * @returns {TransportName[]}
 */
export function unusableTransports(): TransportName[];
/** Forget them (tests; a page that knows the network changed). */
export function forgetUnusableTransports(): void;
/**
 * A transport option from text ("ws", "sse", "longpoll", "auto"; also
 * "websocket", "eventsource", "long-poll", "poll"); anything else: "auto".
 * @param {unknown} text
 * @returns {TransportName | "auto"}
 */
export function parseTransport(text: unknown): TransportName | "auto";
export { backoffDelay };
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
export const TRANSPORTS: readonly TransportName[];
/** Human names, for a status line. */
export const TRANSPORT_NAMES: Readonly<{
    ws: "WebSocket";
    sse: "Server-Sent Events";
    longpoll: "long-polling";
}>;
/** The Events stopped (stop(), or the session was destroyed) while something waited. */
export class EventsStoppedError extends Error {
    constructor();
}
/**
 * A session's events over the best transport that works here.
 * @extends {Emitter<EventsEvents & import("./emitter.js").EventMap>}
 */
export class Events extends Emitter<EventsEvents & import("./emitter.js").EventMap> {
    /**
     * @param {Session} session
     * @param {EventsOptions} [options]
     */
    constructor(session: Session, { transport, timeout, base, max, random, remember, reconnectSpread, WebSocket, EventSource, ws, sse, longpoll, transports, }?: EventsOptions);
    session: import("./session.js").Session;
    /** @type {TransportName | "auto"} */
    mode: TransportName | "auto";
    remember: boolean;
    common: {
        base: number;
        max: number;
        random: () => number;
        reconnectSpread: number;
    };
    /** @type {{ws: WsOptions, sse: SseOptions, longpoll: LongPollOptions}} */
    options: {
        ws: WsOptions;
        sse: SseOptions;
        longpoll: LongPollOptions;
    };
    /** @type {Record<TransportName, TransportClass>} */
    classes: Record<TransportName, TransportClass>;
    dispatcher: Dispatcher;
    /** The transport in use. @type {Transport | null} */
    current: Transport | null;
    /** [name, error] given up, in order. @type {[TransportName, TransportError][]} */
    given: [TransportName, TransportError][];
    running: boolean;
    /** @type {ConnectionState} */
    state: ConnectionState;
    /**
     * The name of the transport in use ("ws", "sse", "longpoll"), or null.
     * @returns {TransportName | null}
     */
    get transport(): TransportName | null;
    set lastSeq(seq: number);
    /** The last seq processed in the current session. */
    get lastSeq(): number;
    /** Network failures in a row of the transport in use. */
    get failures(): number;
    /**
     * The transports to try, in order.
     * @returns {TransportName[]}
     */
    candidates(): TransportName[];
    /**
     * Start bringing the events (the first transport, or the one stopped).
     * Returns this Events; `await events.connected()` waits for the transport.
     * @returns {this}
     */
    start(): this;
    /** Stop (the waits in progress fail with EventsStoppedError); start() goes on after the last seq. */
    stop(): void;
    /**
     * Deliver a list of events to the subscriptions' handlers (as the transports do).
     * @param {unknown[]} events
     */
    dispatch(events: unknown[]): void;
    /**
     * A Deferred that fires with the transport's name once the events are
     * connected (at once when they are). Fails with EventsStoppedError when
     * they stop first, CancelledError when `signal` aborts, TimeoutError after
     * `timeout` ms.
     * @param {WaitOptions} [options]
     * @returns {Deferred<TransportName>}
     */
    connected({ signal, timeout }?: WaitOptions): Deferred<TransportName>;
    /**
     * A Deferred for the next event delivered (of subscription `key`, and
     * passing `filter`, when given). Fails as connected() does.
     * @param {{key?: string | null, filter?: ((event: PushEvent) => boolean) | null} & WaitOptions} [options]
     * @returns {Deferred<PushEvent>}
     */
    next({ key, filter, signal, timeout }?: {
        key?: string | null;
        filter?: ((event: PushEvent) => boolean) | null;
    } & WaitOptions): Deferred<PushEvent>;
    /**
     * The events delivered from now on (of subscription `key`, when given), as
     * an async iterator: `for await (const ev of events.iterate({ signal }))`.
     * The iteration ends when `signal` aborts, when the events stop, or on
     * `break`; events that come while the loop body runs are kept for it.
     * @param {{key?: string | null, signal?: AbortSignal | null}} [options]
     * @returns {AsyncIterableIterator<PushEvent>}
     */
    iterate({ key, signal }?: {
        key?: string | null;
        signal?: AbortSignal | null;
    }): AsyncIterableIterator<PushEvent>;
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
    private _wait;
    /**
     * @private
     * @param {TransportName} name
     */
    private _use;
    /**
     * @private
     * @param {ConnectionState} state
     * @param {StateInfo} [info]
     */
    private _setState;
    /**
     * Every event delivered from now on: `for await (const ev of events)`.
     * @returns {AsyncIterableIterator<PushEvent>}
     */
    [Symbol.asyncIterator](): AsyncIterableIterator<PushEvent>;
}
export type Session = import("./session.js").Session;
export type PushEvent = import("./api.js").PushEvent;
export type ConnectionState = import("./transport.js").ConnectionState;
export type StateInfo = import("./transport.js").StateInfo;
export type TransportError = import("./transport.js").TransportError;
export type WsOptions = import("./transport-ws.js").WsOptions;
export type SseOptions = import("./transport-sse.js").SseOptions;
export type LongPollOptions = import("./transport-longpoll.js").LongPollOptions;
/**
 * A transport's name.
 */
export type TransportName = "ws" | "sse" | "longpoll";
/**
 * A transport class: what Events makes a transport with.
 */
export type TransportClass = {
    new (session: Session, dispatcher: Dispatcher, options: object): Transport;
    available?: (session: Session, options: object) => boolean;
};
/**
 * The options of Events.
 */
export type EventsOptions = {
    /**
     * "auto" (default), "ws", "sse" or "longpoll"
     */
    transport?: TransportName | "auto" | null | undefined;
    /**
     * seconds the engine may hold a long-poll
     */
    timeout?: number | undefined;
    /**
     * first back-off in ms
     */
    base?: number | undefined;
    /**
     * longest back-off in ms
     */
    max?: number | undefined;
    /**
     * jitter source (tests)
     */
    random?: (() => number) | undefined;
    /**
     * ms within which to connect again, at random, when the engine's node goes away (default 1000)
     */
    reconnectSpread?: number | undefined;
    /**
     * remember failed transports for the page's life (default true)
     */
    remember?: boolean | undefined;
    /**
     * the WebSocket class (Node: the `ws` package); also `ws.WebSocket`
     */
    WebSocket?: import("./transport-ws.js").WebSocketConstructor | undefined;
    /**
     * the EventSource class (Node: the `eventsource` package); also `sse.EventSource`
     */
    EventSource?: import("./transport-sse.js").EventSourceConstructor | undefined;
    /**
     * options of WsTransport (url, WebSocket, rpc, offerSubprotocol, openTimeout, attachTimeout)
     */
    ws?: import("./transport-ws.js").WsOptions | undefined;
    /**
     * options of SseTransport (url, EventSource, fetch, probeTimeout)
     */
    sse?: import("./transport-sse.js").SseOptions | undefined;
    /**
     * options of LongPollTransport (timeout)
     */
    longpoll?: import("./transport-longpoll.js").LongPollOptions | undefined;
    /**
     * classes by name instead of the built-in ones (tests)
     */
    transports?: Partial<Record<TransportName, TransportClass>> | null | undefined;
};
/**
 * What Events emits.
 */
export type EventsEvents = {
    state: [state: ConnectionState, info: StateInfo];
    /**
     * the transport chosen
     */
    transport: [name: TransportName];
    fallback: [from: TransportName, to: TransportName, error: TransportError];
    /**
     * every event delivered
     */
    event: [event: PushEvent];
};
/**
 * The wait methods' options: an AbortSignal, and a timeout in ms (0: none).
 */
export type WaitOptions = {
    signal?: AbortSignal | null;
    timeout?: number;
};
import { backoffDelay } from "./transport.js";
import { Emitter } from "./emitter.js";
import { Dispatcher } from "./transport.js";
import { Transport } from "./transport.js";
import { Deferred } from "./deferred.js";
