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
     * Whether it can run here at all.
     * @param {Session} session
     * @param {SseOptions} [options]
     * @returns {boolean}
     */
    static available(session: Session, { EventSource, url }?: SseOptions): boolean;
    /**
     * @param {Session} session
     * @param {Dispatcher} dispatcher
     * @param {SseOptions} [options]
     */
    constructor(session: Session, dispatcher: Dispatcher, { url, EventSource, fetch, probeTimeout, ...options }?: SseOptions);
    url: string;
    EventSource: EventSourceConstructor;
    /** @private @type {FetchLike} */
    private _fetch;
    probeTimeout: number;
    /** The open EventSource. @type {EventSourceLike | null} */
    source: EventSourceLike | null;
    /** The session it carries. @type {string | null} */
    sid: string | null;
    /** @private @type {Deferred<string> | null} */
    private _opening;
    /** @private @type {Deferred<{status: number, code: unknown, error?: unknown}> | null} */
    private _probing;
    /** @returns {"sse"} */
    get name(): "sse";
    /**
     * The URL of the stream of `sid`, resuming after `lastSeq`.
     * @param {string} sid
     * @param {number} lastSeq
     * @returns {string}
     */
    urlFor(sid: string, lastSeq: number): string;
    /** @private */
    private _close;
    /**
     * @private
     * @param {string} sid
     */
    private _open;
    /**
     * The stream could not be opened: fetch the same URL once to read the
     * answer. 1001: a new session. Anything else: the stream does not work
     * here (fall back, if it never did; else back-off).
     * @private
     * @param {string} sid
     * @param {string} url
     * @param {boolean} opened
     */
    private _whyRefused;
}
export type Session = import("./session.js").Session;
export type Dispatcher = import("./transport.js").Dispatcher;
export type FetchLike = import("./api.js").FetchLike;
/**
 * What the client uses of an EventSource: the browser's, or one from npm in
 * Node (the `eventsource` package). The handlers are only ever set.
 */
export type EventSourceLike = {
    /**
     * 0 connecting, 1 open, 2 closed
     */
    readyState: number;
    close: () => void;
    onopen: unknown;
    onmessage: unknown;
    onerror: unknown;
    /**
     * named events ("going-away")
     */
    addEventListener?: ((type: string, listener: (event: {
        data?: unknown;
    }) => void) => void) | undefined;
};
/**
 * An EventSource class.
 */
export type EventSourceConstructor = new (url: string) => EventSourceLike;
/**
 * The options of SseTransport: those of Transport, and
 */
export type SseExtras = {
    /**
     * the events endpoint (default: beside the Api's URL, "/api/events")
     */
    url?: string | null | undefined;
    /**
     * the EventSource class (default: the global one)
     */
    EventSource?: EventSourceConstructor | undefined;
    /**
     * fetch, to read why a stream was refused
     */
    fetch?: import("./api.js").FetchLike | undefined;
    /**
     * ms for that
     */
    probeTimeout?: number | undefined;
};
export type SseOptions = import("./transport.js").TransportOptions & SseExtras;
import { Transport } from "./transport.js";
