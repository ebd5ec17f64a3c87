/**
 * A Deferred that has its result already.
 * @template T
 * @param {T} result
 * @returns {Deferred<T>}
 */
export function succeed<T>(result: T): Deferred<T>;
/**
 * A Deferred that has failed already.
 * @template [T=never]
 * @param {unknown} error
 * @returns {Deferred<T>}
 */
export function fail<T = never>(error: unknown): Deferred<T>;
/**
 * A Deferred for a Promise (or any thenable).
 * @template T
 * @param {T | PromiseLike<T>} promise
 * @returns {Deferred<T>}
 */
export function fromPromise<T>(promise: T | PromiseLike<T>): Deferred<T>;
/**
 * Call fn(...args) and always get a Deferred: for its result, its Promise or its exception.
 * @template T
 * @template {unknown[]} A
 * @param {(...args: A) => T | PromiseLike<T>} fn
 * @param {A} args
 * @returns {Deferred<T>}
 */
export function maybeDeferred<T, A extends unknown[]>(fn: (...args: A) => T | PromiseLike<T>, ...args: A): Deferred<T>;
/**
 * A Deferred for the list of results of `deferreds` (Deferreds, Promises or
 * plain values), in order. The first failure fails it with a FirstError. With
 * `consumeErrors` the failures are consumed in the inputs (not reported there).
 * Cancelling it cancels the inputs that have not fired.
 * @template T
 * @param {Iterable<T | PromiseLike<T>>} deferreds
 * @param {boolean} [consumeErrors]
 * @returns {Deferred<T[]>}
 */
export function gatherResults<T>(deferreds: Iterable<T | PromiseLike<T>>, consumeErrors?: boolean): Deferred<T[]>;
/**
 * A Deferred that fires with fn(...args) (or undefined) after `ms` milliseconds; cancel() stops the timer.
 * @template [T=undefined]
 * @template {unknown[]} [A=unknown[]]
 * @param {number} ms
 * @param {((...args: A) => T | PromiseLike<T>)} [fn]
 * @param {A} args
 * @returns {Deferred<T>}
 */
export function deferLater<T = undefined, A extends unknown[] = unknown[]>(ms: number, fn?: ((...args: A) => T | PromiseLike<T>), ...args: A): Deferred<T>;
/**
 * Cancel `d` when `signal` aborts (at once when it has aborted already); the
 * Deferred then fails with a CancelledError whose `cause` is the signal's
 * reason, and its canceller runs (a fetch is aborted, a pending socket call
 * dropped). Without a signal, nothing changes. Returns `d`.
 * @template {Deferred<unknown>} D
 * @param {D} d
 * @param {AbortSignal | null} [signal]
 * @returns {D}
 */
export function abortable<D extends Deferred<unknown>>(d: D, signal?: AbortSignal | null): D;
/** A Deferred was fired a second time. */
export class AlreadyCalledError extends Error {
    /** @param {string} [message] */
    constructor(message?: string);
}
/**
 * The Deferred was cancelled: by `cancel()`, or by the AbortSignal it was
 * given (then `cause` is the signal's reason).
 */
export class CancelledError extends Error {
    /**
     * @param {string} [message]
     * @param {{cause?: unknown}} [options]
     */
    constructor(message?: string, { cause }?: {
        cause?: unknown;
    });
}
/** `addTimeout(ms)` ran out: `timeout` is the ms. */
export class TimeoutError extends Error {
    /** @param {number} ms */
    constructor(ms: number);
    timeout: number;
}
/** gatherResults failed: `subFailure` is the first failure, `index` its position. */
export class FirstError extends Error {
    /**
     * @param {Failure} subFailure
     * @param {number} index
     */
    constructor(subFailure: Failure, index: number);
    subFailure: Failure;
    index: number;
}
/** An error travelling down the errback side of a chain (`failure.value` is the error). */
export class Failure {
    /** @param {unknown} value  the error (a Failure is returned as it is) */
    constructor(value: unknown);
    /** The error: usually an Error, whatever was thrown otherwise. @type {unknown} */
    value: unknown;
    /** Set when the failure was handed to an awaiting Promise. */
    handled: boolean | undefined;
    /**
     * The error's class (its constructor), or null for null/undefined.
     * @returns {Function | null}
     */
    get type(): Function | null;
    /**
     * The first of `types` (classes or error names) that matches, else null.
     * @template {ErrorMatch[]} M
     * @param {M} types
     * @returns {M[number] | null}
     */
    check<M extends ErrorMatch[]>(...types: M): M[number] | null;
    /**
     * Like check, but re-raises this failure when nothing matches.
     * @template {ErrorMatch[]} M
     * @param {M} types
     * @returns {M[number]}
     */
    trap<M extends ErrorMatch[]>(...types: M): M[number];
    /** The error's message (or the value as text). */
    getErrorMessage(): string;
    /** @returns {string | undefined} */
    get stack(): string | undefined;
    toString(): string;
}
/**
 * One level of a chain: [callback, its args, errback, its args].
 * @typedef {[Function, unknown[], Function, unknown[]]} ChainLevel
 */
/**
 * A result that arrives later, with a chain of callbacks and errbacks
 * (twisted.internet.defer.Deferred); `await` gives its result.
 * @template [T=unknown]
 * @implements {PromiseLike<T>}
 */
export class Deferred<T = unknown> implements PromiseLike<T> {
    /** Turn on to record where each Deferred was created (also on with the debug flag). */
    static debug: boolean;
    /**
     * Called with (failure, deferred) for a chain left with an unhandled failure.
     * @type {(failure: Failure, deferred: Deferred<unknown>) => void}
     */
    static onUnhandledError: (failure: Failure, deferred: Deferred<unknown>) => void;
    static succeed: typeof succeed;
    static fail: typeof fail;
    static fromPromise: typeof fromPromise;
    static maybeDeferred: typeof maybeDeferred;
    static gatherResults: typeof gatherResults;
    static deferLater: typeof deferLater;
    static abortable: typeof abortable;
    /**
     * @param {((d: Deferred<T>) => void) | null} [canceller] called by cancel()
     *   before the Deferred is called; if it does not fire the Deferred,
     *   cancel() errbacks it with a CancelledError.
     */
    constructor(canceller?: ((d: Deferred<T>) => void) | null);
    /** Whether callback() or errback() was called. */
    called: boolean;
    /** Pauses in force (a callback's Deferred being waited for counts one). */
    paused: number;
    /** The result at the current end of the chain (a Failure on the errback side). @type {unknown} */
    result: unknown;
    /** @private @type {ChainLevel[]} */
    private _callbacks;
    /** @private @type {Function | null} */
    private _canceller;
    /** @private */
    private _running;
    /** @private */
    private _suppressAlreadyCalled;
    /** @private */
    private _checkScheduled;
    /** @private */
    private _reported;
    /** @private @type {string | undefined} */
    private _creationStack;
    /**
     * Add a callback and an errback at the same level of the chain. Each
     * returns the next result (a Deferred or Promise is waited for); throwing,
     * or returning a Failure, goes on down the errback side.
     * @template [U=T]
     * @template [V=never]
     * @template {unknown[]} [CA=[]]
     * @template {unknown[]} [EA=[]]
     * @param {((result: T, ...args: CA) => U | PromiseLike<U>) | null} callback
     *   called with the result (and callbackArgs); null passes the result on
     * @param {((failure: Failure, ...args: EA) => V | PromiseLike<V>) | null} [errback]
     *   called with the Failure (and errbackArgs); null passes the failure on
     * @param {{callbackArgs?: CA, errbackArgs?: EA}} [options]
     * @returns {Deferred<U | V>}
     */
    addCallbacks<U = T, V = never, CA extends unknown[] = [], EA extends unknown[] = []>(callback: ((result: T, ...args: CA) => U | PromiseLike<U>) | null, errback?: ((failure: Failure, ...args: EA) => V | PromiseLike<V>) | null, { callbackArgs, errbackArgs }?: {
        callbackArgs?: CA;
        errbackArgs?: EA;
    }): Deferred<U | V>;
    /**
     * Add a callback: `fn(result, ...args)`; its return value is the next result.
     * @template U
     * @template {unknown[]} A
     * @param {(result: T, ...args: A) => U | PromiseLike<U>} fn
     * @param {A} args
     * @returns {Deferred<U>}
     */
    addCallback<U, A extends unknown[]>(fn: (result: T, ...args: A) => U | PromiseLike<U>, ...args: A): Deferred<U>;
    /**
     * Add an errback: `fn(failure, ...args)`; returning normally goes back to
     * the callback side with its return value.
     * @template {unknown[]} A
     * @template [V=never]
     * @param {(failure: Failure, ...args: A) => V | PromiseLike<V>} fn
     * @param {A} args
     * @returns {Deferred<T | V>}
     */
    addErrback<A extends unknown[], V = never>(fn: (failure: Failure, ...args: A) => V | PromiseLike<V>, ...args: A): Deferred<T | V>;
    /**
     * Add `fn` as both callback and errback: it gets the result or the Failure.
     * @template U
     * @template {unknown[]} A
     * @param {(resultOrFailure: T | Failure, ...args: A) => U | PromiseLike<U>} fn
     * @param {A} args
     * @returns {Deferred<U>}
     */
    addBoth<U, A extends unknown[]>(fn: (resultOrFailure: T | Failure, ...args: A) => U | PromiseLike<U>, ...args: A): Deferred<U>;
    /**
     * Fire `other` with this chain's result at this point (then continue with undefined).
     * @param {Deferred<T>} other
     * @returns {Deferred<void>}
     */
    chainDeferred(other: Deferred<T>): Deferred<void>;
    /**
     * Fire with a result (not a Deferred); the chain runs.
     * @param {T} result
     */
    callback(result: T): void;
    /**
     * Fire with an error (wrapped in a Failure); the errback side runs.
     * @param {unknown} [fail]
     */
    errback(fail?: unknown): void;
    /**
     * @private
     * @param {unknown} result
     */
    private _start;
    /** Hold the chain: callbacks wait until unpause(). */
    pause(): void;
    /** Let a paused chain go on. */
    unpause(): void;
    /**
     * Cancel: before the Deferred fired, call the canceller and, unless it fired
     * the Deferred, errback it with CancelledError (a later callback() from the
     * operation is then ignored once). While waiting on a Deferred returned by a
     * callback, cancel that one. `reason` becomes the CancelledError's `cause`
     * (an AbortSignal's reason, with `abortable`).
     * @param {unknown} [reason]
     */
    cancel(reason?: unknown): void;
    /**
     * Cancel the Deferred after `ms` milliseconds; it then fails with TimeoutError.
     * @param {number} ms
     * @returns {Deferred<T>}
     */
    addTimeout(ms: number): Deferred<T>;
    /** @private */
    private _run;
    /** @private */
    private _scheduleUnhandledCheck;
    /**
     * A Promise for the result at this point of the chain; `await d` uses it.
     * The chain itself goes on unchanged. A failure handed to a Promise this way
     * counts as handled (the Promise rejects with `failure.value`).
     * @template [R1=T]
     * @template [R2=never]
     * @param {((value: T) => R1 | PromiseLike<R1>) | null} [onFulfilled]
     * @param {((reason: unknown) => R2 | PromiseLike<R2>) | null} [onRejected]
     * @returns {Promise<R1 | R2>}
     */
    then<R1 = T, R2 = never>(onFulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null, onRejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null): Promise<R1 | R2>;
    /**
     * A Promise of the result, with `onRejected` for an error.
     * @template [R=never]
     * @param {((reason: unknown) => R | PromiseLike<R>) | null} [onRejected]
     * @returns {Promise<T | R>}
     */
    catch<R = never>(onRejected?: ((reason: unknown) => R | PromiseLike<R>) | null): Promise<T | R>;
    /**
     * A Promise of the result that runs `onFinally` either way.
     * @param {(() => void) | null} [onFinally]
     * @returns {Promise<T>}
     */
    finally(onFinally?: (() => void) | null): Promise<T>;
    toString(): string;
}
/**
 * One operation's result for many waiters: each wait() gets a Deferred of its
 * own, so one waiter's callbacks cannot change what the others receive. The
 * source Deferred's result is consumed (a failure is reported through the
 * waiters, not the source).
 * @template T
 */
export class SharedResult<T> {
    /** @param {Deferred<T>} source */
    constructor(source: Deferred<T>);
    fired: boolean;
    /** @type {T | Failure | undefined} */
    result: T | Failure | undefined;
    /** @private @type {Deferred<T>[]} */
    private _waiters;
    /**
     * A Deferred of its own for the result.
     * @param {{signal?: AbortSignal | null}} [options]  cancel the wait (not the operation)
     * @returns {Deferred<T>}
     */
    wait({ signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<T>;
    /**
     * @private
     * @param {Deferred<T>} d
     */
    private _fire;
}
/**
 * What `check` and `trap` match: an error class, or an error's name.
 */
export type ErrorMatch = (abstract new (...args: never[]) => unknown) | string;
/**
 * One level of a chain: [callback, its args, errback, its args].
 */
export type ChainLevel = [Function, unknown[], Function, unknown[]];
