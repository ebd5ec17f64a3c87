/** @typedef {import("./api.js").PushEvent} PushEvent */
/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./session.js").Subscription} Subscription */
/**
 * The state of a transport (and of Events): "connecting", "connected",
 * "retrying" (waiting `delay` ms after `error`) or "stopped".
 * @typedef {"connecting" | "connected" | "retrying" | "stopped"} ConnectionState
 */
/**
 * What comes with a state: for "retrying", the delay, the error and the
 * failures in a row.
 * @typedef {{delay?: number, error?: unknown, failures?: number}} StateInfo
 */
/**
 * What a transport emits.
 * @typedef {object} TransportEvents
 * @property {[state: ConnectionState, info: StateInfo]} state
 * @property {[error: TransportError]} unusable  it never worked here: try another one
 */
/**
 * The back-off options: the first wait and the longest, in ms.
 * @typedef {{base?: number, max?: number}} Backoff
 */
/**
 * The options every transport takes.
 * @typedef {object} TransportOptions
 * @property {number} [base]       first back-off in ms
 * @property {number} [max]        longest back-off in ms
 * @property {() => number} [random]  jitter source (tests)
 * @property {boolean} [fallback]  emit "unusable" when it fails before it ever worked
 * @property {number} [reconnectSpread]  ms within which to connect again, at random, when the engine's node goes away (default 1000)
 */
/**
 * The wait before retry number `attempt` (1, 2, ...): base * 2^(attempt-1),
 * capped at `max`, of which a random half ("equal jitter") so that many
 * clients cut off at once do not come back at once.
 * @param {number} attempt
 * @param {Backoff} [backoff]
 * @param {() => number} [random]
 * @returns {number}
 */
export function backoffDelay(attempt: number, { base, max }?: Backoff, random?: () => number): number;
/**
 * An error's message (or the value as text).
 * @param {unknown} error
 * @returns {string}
 */
export function messageOf(error: unknown): string;
/**
 * The base of an endpoint beside the JSON-RPC one: "/api/jsonrpc" -> "/api/".
 * @param {string | null | undefined} url
 * @returns {string}
 */
export function apiBase(url: string | null | undefined): string;
export { withQuery };
/** The transport cannot be used here (e.g. a proxy that breaks WebSocket). */
export class TransportError extends Error {
    /**
     * @param {string} message
     * @param {{cause?: unknown}} [options]
     */
    constructor(message: string, { cause }?: {
        cause?: unknown;
    });
}
/**
 * What a Dispatcher emits: "event" for each event it delivers (after the seq
 * check, before the handlers).
 * @typedef {object} DispatcherEvents
 * @property {[event: PushEvent]} event
 */
/**
 * Events in, handlers called: seq bookkeeping and dispatch by key, shared by
 * every transport of one Events.
 * @extends {Emitter<DispatcherEvents & import("./emitter.js").EventMap>}
 */
export class Dispatcher extends Emitter<DispatcherEvents & import("./emitter.js").EventMap> {
    /** @param {Session} session */
    constructor(session: Session);
    session: import("./session.js").Session;
    /** The last seq processed in the current session. */
    lastSeq: number;
    /** The session generation the seq belongs to. @type {number | null} */
    generation: number | null;
    /** @private key -> events that came before their subscribe answer @type {Map<string, PushEvent[]>} */
    private _orphans;
    /**
     * Follow the session: a new one (its generation changed) starts seq again
     * at 0. Returns the generation the next events belong to.
     * @returns {number}
     */
    sync(): number;
    /**
     * Deliver a list of events to the subscriptions' handlers. `generation`
     * (from sync) drops events of a session that was replaced meanwhile.
     * @param {unknown[]} events  what the engine sent (anything else than an event object is skipped)
     * @param {number | null} [generation]
     */
    dispatch(events: unknown[], generation?: number | null): void;
    /**
     * @private
     * @param {Subscription} sub
     */
    private _flushOrphans;
    /**
     * @private
     * @param {Subscription} sub
     * @param {PushEvent} ev
     */
    private _deliver;
}
/**
 * The state, back-off and fallback bookkeeping every transport has.
 * @extends {Emitter<TransportEvents & import("./emitter.js").EventMap>}
 */
export class Transport extends Emitter<TransportEvents & import("./emitter.js").EventMap> {
    /**
     * @param {Session} session
     * @param {Dispatcher} dispatcher
     * @param {TransportOptions} [options]
     */
    constructor(session: Session, dispatcher: Dispatcher, { base, max, random, fallback, reconnectSpread, }?: TransportOptions);
    session: import("./session.js").Session;
    dispatcher: Dispatcher;
    backoff: {
        base: number;
        max: number;
    };
    random: () => number;
    fallback: boolean;
    /** ms within which to connect again when the engine's node goes away. */
    reconnectSpread: number;
    running: boolean;
    /** @type {ConnectionState} */
    state: ConnectionState;
    /** Network failures in a row. */
    failures: number;
    /** It delivered (or was ready to) at least once on this page. */
    worked: boolean;
    /** @protected @type {ReturnType<typeof setTimeout> | null} */
    protected _timer: ReturnType<typeof setTimeout> | null;
    /** @protected @type {(() => void)[]} */
    protected _offs: (() => void)[];
    /**
     * The transport's name: "longpoll", "sse" or "ws".
     * @returns {string}
     */
    get name(): string;
    start(): void;
    stop(): void;
    /** Stop for good: also let go of the session's listeners. */
    dispose(): void;
    /**
     * Connect (the first time, and after each failure).
     * @protected
     */
    protected _begin(): void;
    /**
     * Close what is open.
     * @protected
     */
    protected _end(): void;
    /**
     * @protected
     * @param {ConnectionState} state
     * @param {StateInfo} [info]
     */
    protected _setState(state: ConnectionState, info?: StateInfo): void;
    /**
     * The transport works: reset the back-off.
     * @protected
     */
    protected _connected(): void;
    /**
     * @protected
     * @param {number} ms
     * @param {() => void} [fn]
     */
    protected _schedule(ms: number, fn?: () => void): void;
    /**
     * A network error (the engine may be away): retry after a back-off.
     * @protected
     * @param {unknown} error
     */
    protected _retry(error: unknown): void;
    /**
     * The engine let the connection go on purpose (its node shuts down): no
     * failure, no back-off. Connect again at once, within `reconnectSpread`
     * ms at random (the clients of a node that goes away do not all come
     * back in the same instant), to the same URL.
     * @protected
     * @param {string} why
     */
    protected _reconnect(why: string): void;
    /**
     * The transport itself failed (it could not open, or closed before it
     * delivered anything). Never worked here and may fall back: "unusable".
     * @protected
     * @param {unknown} error
     */
    protected _transportFailed(error: unknown): void;
    /**
     * The engine does not know the session: session.js makes a new one on the next open().
     * @protected
     * @param {string | null} sid
     */
    protected _sessionLost(sid: string | null): void;
}
export type PushEvent = import("./api.js").PushEvent;
export type Session = import("./session.js").Session;
export type Subscription = import("./session.js").Subscription;
/**
 * The state of a transport (and of Events): "connecting", "connected",
 * "retrying" (waiting `delay` ms after `error`) or "stopped".
 */
export type ConnectionState = "connecting" | "connected" | "retrying" | "stopped";
/**
 * What comes with a state: for "retrying", the delay, the error and the
 * failures in a row.
 */
export type StateInfo = {
    delay?: number;
    error?: unknown;
    failures?: number;
};
/**
 * What a transport emits.
 */
export type TransportEvents = {
    state: [state: ConnectionState, info: StateInfo];
    /**
     * it never worked here: try another one
     */
    unusable: [error: TransportError];
};
/**
 * The back-off options: the first wait and the longest, in ms.
 */
export type Backoff = {
    base?: number;
    max?: number;
};
/**
 * The options every transport takes.
 */
export type TransportOptions = {
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
     * emit "unusable" when it fails before it ever worked
     */
    fallback?: boolean | undefined;
    /**
     * ms within which to connect again, at random, when the engine's node goes away (default 1000)
     */
    reconnectSpread?: number | undefined;
};
/**
 * What a Dispatcher emits: "event" for each event it delivers (after the seq
 * check, before the handlers).
 */
export type DispatcherEvents = {
    event: [event: PushEvent];
};
import { withQuery } from "./api.js";
import { Emitter } from "./emitter.js";
