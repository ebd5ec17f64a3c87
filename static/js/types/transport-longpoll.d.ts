/** @typedef {import("./session.js").Session} Session */
/** @typedef {import("./transport.js").Dispatcher} Dispatcher */
/**
 * The options of LongPollTransport: those of Transport, and `timeout`,
 * the seconds the engine may hold a poll (get_events timeout).
 * @typedef {import("./transport.js").TransportOptions & {timeout?: number}} LongPollOptions
 */
/** The `session.get_events` loop with `ack`. */
export class LongPollTransport extends Transport {
    /**
     * @param {Session} session
     * @param {Dispatcher} dispatcher
     * @param {LongPollOptions} [options]
     */
    constructor(session: Session, dispatcher: Dispatcher, { timeout, ...options }?: LongPollOptions);
    timeout: number;
    /** @private @type {import("./deferred.js").Deferred<unknown[]> | null} */
    private _inflight;
    /** @private after a failure, first a poll that answers at once */
    private _probe;
    /** @returns {"longpoll"} */
    get name(): "longpoll";
}
export type Session = import("./session.js").Session;
export type Dispatcher = import("./transport.js").Dispatcher;
/**
 * The options of LongPollTransport: those of Transport, and `timeout`,
 * the seconds the engine may hold a poll (get_events timeout).
 */
export type LongPollOptions = import("./transport.js").TransportOptions & {
    timeout?: number;
};
import { Transport } from "./transport.js";
