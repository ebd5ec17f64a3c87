// The Twisted Deferred for the browser (and node): a result that arrives later,
// with a chain of callbacks and errbacks.
//
//   const d = new Deferred();
//   d.addCallback((x) => x + 1).addErrback((f) => { f.trap(RpcError); return 0; });
//   d.callback(41);              // the chain runs: 42
//   const value = await d;       // a Deferred is a thenable
//
// Semantics follow twisted.internet.defer:
// - a callback's return value is the input of the next callback; throwing (or
//   returning a Failure) switches the chain to the errback side, and an errback
//   that returns normally switches it back;
// - a callback that returns a Deferred (or a Promise) pauses the chain until that
//   one fires, and its result continues the chain;
// - `failure.trap(Type, ...)` returns the matching type or re-raises the failure;
// - a chain that ends in a failure nobody handled is reported through
//   `Deferred.onUnhandledError` one tick later.
//
// Cancellation also comes from an AbortSignal: `abortable(d, signal)` cancels
// `d` when the signal aborts (every call and wait of the client takes
// `{signal}` and does this).

import { isDebug } from "./debug.js";

/** A Deferred was fired a second time. */
export class AlreadyCalledError extends Error {
  /** @param {string} [message] */
  constructor(message = "the Deferred has already been called") {
    super(message);
    this.name = "AlreadyCalledError";
  }
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
  constructor(message = "the Deferred was cancelled", { cause = undefined } = {}) {
    super(message);
    this.name = "CancelledError";
    /** @type {unknown} */
    this.cause = cause;
  }
}

/** `addTimeout(ms)` ran out: `timeout` is the ms. */
export class TimeoutError extends Error {
  /** @param {number} ms */
  constructor(ms) {
    super(`timed out after ${ms} ms`);
    this.name = "TimeoutError";
    this.timeout = ms;
  }
}

/** gatherResults failed: `subFailure` is the first failure, `index` its position. */
export class FirstError extends Error {
  /**
   * @param {Failure} subFailure
   * @param {number} index
   */
  constructor(subFailure, index) {
    super(`the Deferred at index ${index} failed: ${subFailure.getErrorMessage()}`);
    this.name = "FirstError";
    this.subFailure = subFailure;
    this.index = index;
  }
}

/**
 * What `check` and `trap` match: an error class, or an error's name.
 * @typedef {(abstract new (...args: never[]) => unknown) | string} ErrorMatch
 */

/**
 * @param {unknown} v
 * @param {string} name
 * @returns {unknown}
 */
function field(v, name) {
  return v !== null && typeof v === "object" ? /** @type {Record<string, unknown>} */ (v)[name] : undefined;
}

/** An error travelling down the errback side of a chain (`failure.value` is the error). */
export class Failure {
  /** @param {unknown} value  the error (a Failure is returned as it is) */
  constructor(value) {
    if (value instanceof Failure) return value;
    /** The error: usually an Error, whatever was thrown otherwise. @type {unknown} */
    this.value = value === undefined ? new Error("unknown error") : value;
    /** Set when the failure was handed to an awaiting Promise. */
    this.handled = false;
  }

  /**
   * The error's class (its constructor), or null for null/undefined.
   * @returns {Function | null}
   */
  get type() {
    return this.value == null ? null : /** @type {object} */ (this.value).constructor;
  }

  /**
   * The first of `types` (classes or error names) that matches, else null.
   * @template {ErrorMatch[]} M
   * @param {M} types
   * @returns {M[number] | null}
   */
  check(...types) {
    for (const t of types) {
      if (typeof t === "function") {
        if (this.value instanceof t) return t;
      } else if (typeof t === "string") {
        if (this.value != null && (field(this.value, "name") === t || this.type?.name === t)) return t;
      }
    }
    return null;
  }

  /**
   * Like check, but re-raises this failure when nothing matches.
   * @template {ErrorMatch[]} M
   * @param {M} types
   * @returns {M[number]}
   */
  trap(...types) {
    const found = this.check(...types);
    if (found === null) throw this;
    return found;
  }

  /** The error's message (or the value as text). */
  getErrorMessage() {
    const message = field(this.value, "message");
    if (typeof message === "string") return message;
    return String(this.value);
  }

  /** @returns {string | undefined} */
  get stack() {
    const stack = field(this.value, "stack");
    return typeof stack === "string" ? stack : undefined;
  }

  toString() {
    const name = field(this.value, "name") ?? this.type?.name ?? typeof this.value;
    return `[Failure ${name}: ${this.getErrorMessage()}]`;
  }
}

/** @type {(x: unknown) => unknown} */
const PASS = (x) => x;

/**
 * @param {unknown} x
 * @returns {x is PromiseLike<unknown>}
 */
function isThenable(x) {
  return x !== null && (typeof x === "object" || typeof x === "function") &&
    typeof /** @type {{then?: unknown}} */ (x).then === "function";
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
export class Deferred {
  /**
   * @param {((d: Deferred<T>) => void) | null} [canceller] called by cancel()
   *   before the Deferred is called; if it does not fire the Deferred,
   *   cancel() errbacks it with a CancelledError.
   */
  constructor(canceller) {
    /** Whether callback() or errback() was called. */
    this.called = false;
    /** Pauses in force (a callback's Deferred being waited for counts one). */
    this.paused = 0;
    /** The result at the current end of the chain (a Failure on the errback side). @type {unknown} */
    this.result = undefined;
    /** @private @type {ChainLevel[]} */
    this._callbacks = [];
    /** @private @type {Function | null} */
    this._canceller = canceller ?? null;
    /** @private */
    this._running = false;
    /** @private */
    this._suppressAlreadyCalled = false;
    /** @private */
    this._checkScheduled = false;
    /** @private */
    this._reported = false;
    /** @private @type {string | undefined} */
    this._creationStack = undefined;
    if (Deferred.debug || isDebug()) this._creationStack = new Error("created here").stack;
  }

  // -- adding callbacks ---------------------------------------------------

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
  addCallbacks(callback, errback = null, { callbackArgs = /** @type {CA} */ (/** @type {unknown} */ ([])), errbackArgs = /** @type {EA} */ (/** @type {unknown} */ ([])) } = {}) {
    this._callbacks.push([callback ?? PASS, callbackArgs, errback ?? PASS, errbackArgs]);
    if (this.called) this._run();
    return /** @type {Deferred<U | V>} */ (/** @type {unknown} */ (this));
  }

  /**
   * Add a callback: `fn(result, ...args)`; its return value is the next result.
   * @template U
   * @template {unknown[]} A
   * @param {(result: T, ...args: A) => U | PromiseLike<U>} fn
   * @param {A} args
   * @returns {Deferred<U>}
   */
  addCallback(fn, ...args) {
    return this.addCallbacks(fn, null, { callbackArgs: args });
  }

  /**
   * Add an errback: `fn(failure, ...args)`; returning normally goes back to
   * the callback side with its return value.
   * @template {unknown[]} A
   * @template [V=never]
   * @param {(failure: Failure, ...args: A) => V | PromiseLike<V>} fn
   * @param {A} args
   * @returns {Deferred<T | V>}
   */
  addErrback(fn, ...args) {
    return this.addCallbacks(null, fn, { errbackArgs: args });
  }

  /**
   * Add `fn` as both callback and errback: it gets the result or the Failure.
   * @template U
   * @template {unknown[]} A
   * @param {(resultOrFailure: T | Failure, ...args: A) => U | PromiseLike<U>} fn
   * @param {A} args
   * @returns {Deferred<U>}
   */
  addBoth(fn, ...args) {
    return this.addCallbacks(fn, fn, { callbackArgs: args, errbackArgs: args });
  }

  /**
   * Fire `other` with this chain's result at this point (then continue with undefined).
   * @param {Deferred<T>} other
   * @returns {Deferred<void>}
   */
  chainDeferred(other) {
    return this.addCallbacks((r) => { other.callback(r); }, (f) => { other.errback(f); });
  }

  // -- firing ---------------------------------------------------------------

  /**
   * Fire with a result (not a Deferred); the chain runs.
   * @param {T} result
   */
  callback(result) {
    if (result instanceof Deferred) {
      throw new TypeError("callback() takes a result, not a Deferred");
    }
    this._start(result);
  }

  /**
   * Fire with an error (wrapped in a Failure); the errback side runs.
   * @param {unknown} [fail]
   */
  errback(fail) {
    this._start(new Failure(fail === undefined ? new Error("errback() called without an error") : fail));
  }

  /**
   * @private
   * @param {unknown} result
   */
  _start(result) {
    if (this.called) {
      if (this._suppressAlreadyCalled) {
        this._suppressAlreadyCalled = false;
        return;
      }
      throw new AlreadyCalledError();
    }
    this.called = true;
    this.result = result;
    this._run();
  }

  /** Hold the chain: callbacks wait until unpause(). */
  pause() {
    this.paused += 1;
  }

  /** Let a paused chain go on. */
  unpause() {
    this.paused -= 1;
    if (this.paused === 0 && this.called) this._run();
  }

  /**
   * Cancel: before the Deferred fired, call the canceller and, unless it fired
   * the Deferred, errback it with CancelledError (a later callback() from the
   * operation is then ignored once). While waiting on a Deferred returned by a
   * callback, cancel that one. `reason` becomes the CancelledError's `cause`
   * (an AbortSignal's reason, with `abortable`).
   * @param {unknown} [reason]
   */
  cancel(reason = undefined) {
    if (!this.called) {
      if (this._canceller) {
        this._canceller(this);
      } else {
        this._suppressAlreadyCalled = true;
      }
      if (!this.called) {
        this.errback(reason === undefined ? new CancelledError()
          : new CancelledError("the Deferred was cancelled: the signal aborted", { cause: reason }));
      }
    } else if (this.result instanceof Deferred) {
      this.result.cancel(reason);
    }
  }

  /**
   * Cancel the Deferred after `ms` milliseconds; it then fails with TimeoutError.
   * @param {number} ms
   * @returns {Deferred<T>}
   */
  addTimeout(ms) {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.cancel();
    }, ms);
    return /** @type {Deferred<T>} */ (this.addBoth((r) => {
      clearTimeout(timer);
      if (timedOut && r instanceof Failure && r.check(CancelledError)) {
        return new Failure(new TimeoutError(ms));
      }
      return r;
    }));
  }

  /** @private */
  _run() {
    if (this._running) return; // the running loop picks up what was added
    this._running = true;
    try {
      while (this._callbacks.length > 0 && this.paused === 0) {
        const [cb, cbArgs, eb, ebArgs] = /** @type {ChainLevel} */ (this._callbacks.shift());
        const failed = this.result instanceof Failure;
        const fn = failed ? eb : cb;
        if (fn === PASS) continue;
        let current;
        try {
          current = fn(this.result, ...(failed ? ebArgs : cbArgs));
          if (current === this) {
            throw new TypeError("a callback returned the Deferred it was added to");
          }
        } catch (e) {
          current = new Failure(e);
        }
        if (!(current instanceof Deferred) && isThenable(current)) {
          current = fromPromise(current);
        }
        this.result = current;
        if (current instanceof Deferred) {
          // Pause until the returned Deferred fires; its result goes on down
          // this chain (and it is left holding undefined, as in Twisted).
          this.paused += 1;
          /** @type {Deferred<unknown>} */ (current).addBoth((r) => {
            this.paused -= 1;
            this.result = r;
            this._run();
            return undefined;
          });
        }
      }
    } finally {
      this._running = false;
    }
    if (this.paused === 0 && this.result instanceof Failure && this._callbacks.length === 0) {
      this._scheduleUnhandledCheck();
    }
  }

  /** @private */
  _scheduleUnhandledCheck() {
    if (this._checkScheduled || this._reported) return;
    this._checkScheduled = true;
    setTimeout(() => {
      this._checkScheduled = false;
      const r = this.result;
      if (r instanceof Failure && !r.handled && this.paused === 0 &&
          this._callbacks.length === 0 && !this._reported) {
        this._reported = true;
        try {
          Deferred.onUnhandledError(r, this);
        } catch (_) { /* a broken hook must not break anything else */ }
      }
    }, 0);
  }

  // -- Promise interoperability --------------------------------------------

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
  then(onFulfilled, onRejected) {
    /** @type {Promise<T>} */
    const p = new Promise((resolve, reject) => {
      this.addCallbacks(
        (r) => { resolve(r); return r; },
        (f) => { f.handled = true; reject(f.value); return f; },
      );
    });
    return p.then(onFulfilled, onRejected);
  }

  /**
   * A Promise of the result, with `onRejected` for an error.
   * @template [R=never]
   * @param {((reason: unknown) => R | PromiseLike<R>) | null} [onRejected]
   * @returns {Promise<T | R>}
   */
  catch(onRejected) {
    return this.then(undefined, onRejected);
  }

  /**
   * A Promise of the result that runs `onFinally` either way.
   * @param {(() => void) | null} [onFinally]
   * @returns {Promise<T>}
   */
  finally(onFinally) {
    return this.then().finally(onFinally);
  }

  toString() {
    const state = !this.called ? "pending"
      : this.paused ? "paused"
        : this.result instanceof Failure ? `failed ${this.result}` : "fired";
    return `<Deferred ${state}>`;
  }

  /** Turn on to record where each Deferred was created (also on with the debug flag). */
  static debug = false;

  /**
   * Called with (failure, deferred) for a chain left with an unhandled failure.
   * @type {(failure: Failure, deferred: Deferred<unknown>) => void}
   */
  static onUnhandledError = (failure, deferred) => {
    const extra = deferred._creationStack ? ["\nDeferred", deferred._creationStack] : [];
    console.error("Unhandled error in Deferred:", failure.value, ...extra);
  };

  // The helpers below, as in Twisted (defer.succeed, ...).
  static succeed = succeed;
  static fail = fail;
  static fromPromise = fromPromise;
  static maybeDeferred = maybeDeferred;
  static gatherResults = gatherResults;
  static deferLater = deferLater;
  static abortable = abortable;
}


// -- helpers ------------------------------------------------------------------

/**
 * A Deferred that has its result already.
 * @template T
 * @param {T} result
 * @returns {Deferred<T>}
 */
export function succeed(result) {
  /** @type {Deferred<T>} */
  const d = new Deferred();
  d.callback(result);
  return d;
}

/**
 * A Deferred that has failed already.
 * @template [T=never]
 * @param {unknown} error
 * @returns {Deferred<T>}
 */
export function fail(error) {
  /** @type {Deferred<T>} */
  const d = new Deferred();
  d.errback(error);
  return d;
}

/**
 * A Deferred for a Promise (or any thenable).
 * @template T
 * @param {T | PromiseLike<T>} promise
 * @returns {Deferred<T>}
 */
export function fromPromise(promise) {
  /** @type {Deferred<T>} */
  const d = new Deferred();
  Promise.resolve(promise).then(
    (v) => { if (!d.called) d.callback(v); },
    (e) => { if (!d.called) d.errback(e); },
  );
  return d;
}

/**
 * Call fn(...args) and always get a Deferred: for its result, its Promise or its exception.
 * @template T
 * @template {unknown[]} A
 * @param {(...args: A) => T | PromiseLike<T>} fn
 * @param {A} args
 * @returns {Deferred<T>}
 */
export function maybeDeferred(fn, ...args) {
  /** @type {unknown} */
  let r;
  try {
    r = fn(...args);
  } catch (e) {
    return fail(e);
  }
  if (r instanceof Deferred) return r;
  if (r instanceof Failure) return fail(r);
  if (isThenable(r)) return /** @type {Deferred<T>} */ (fromPromise(r));
  return succeed(/** @type {T} */ (r));
}

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
export function gatherResults(deferreds, consumeErrors = false) {
  /** @type {Deferred<T>[]} */
  const inputs = Array.from(deferreds, (x) => (x instanceof Deferred ? x : maybeDeferred(() => x)));
  /** @type {T[]} */
  const results = new Array(inputs.length);
  let remaining = inputs.length;
  /** @type {Deferred<T[]>} */
  const d = new Deferred(() => {
    for (const input of inputs) if (!input.called) input.cancel();
  });
  if (remaining === 0) {
    d.callback(results);
    return d;
  }
  inputs.forEach((input, i) => {
    input.addCallbacks(
      (r) => {
        results[i] = r;
        remaining -= 1;
        if (remaining === 0 && !d.called) d.callback(results);
        return r;
      },
      (f) => {
        if (!d.called) d.errback(new FirstError(f, i));
        return consumeErrors ? undefined : f;
      },
    );
  });
  return d;
}

/**
 * A Deferred that fires with fn(...args) (or undefined) after `ms` milliseconds; cancel() stops the timer.
 * @template [T=undefined]
 * @template {unknown[]} [A=unknown[]]
 * @param {number} ms
 * @param {((...args: A) => T | PromiseLike<T>)} [fn]
 * @param {A} args
 * @returns {Deferred<T>}
 */
export function deferLater(ms, fn = undefined, ...args) {
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer = undefined;
  /** @type {Deferred<undefined>} */
  const d = new Deferred(() => clearTimeout(timer));
  timer = setTimeout(() => d.callback(undefined), ms);
  if (fn) return d.addCallback(() => fn(...args));
  return /** @type {Deferred<T>} */ (/** @type {unknown} */ (d));
}

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
export function abortable(d, signal) {
  if (!signal) return d;
  if (signal.aborted) {
    d.cancel(signal.reason);
    return d;
  }
  const onAbort = () => d.cancel(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  d.addBoth((r) => {
    signal.removeEventListener("abort", onAbort);
    return r;
  });
  return d;
}


/**
 * One operation's result for many waiters: each wait() gets a Deferred of its
 * own, so one waiter's callbacks cannot change what the others receive. The
 * source Deferred's result is consumed (a failure is reported through the
 * waiters, not the source).
 * @template T
 */
export class SharedResult {
  /** @param {Deferred<T>} source */
  constructor(source) {
    this.fired = false;
    /** @type {T | Failure | undefined} */
    this.result = undefined;
    /** @private @type {Deferred<T>[]} */
    this._waiters = [];
    source.addBoth((r) => {
      this.fired = true;
      this.result = r;
      const waiters = this._waiters;
      this._waiters = [];
      for (const w of waiters) this._fire(w);
      return undefined;
    });
  }

  /**
   * A Deferred of its own for the result.
   * @param {{signal?: AbortSignal | null}} [options]  cancel the wait (not the operation)
   * @returns {Deferred<T>}
   */
  wait({ signal = null } = {}) {
    /** @type {Deferred<T>} */
    const d = new Deferred();
    if (this.fired) this._fire(d);
    else this._waiters.push(d);
    return abortable(d, signal);
  }

  /**
   * @private
   * @param {Deferred<T>} d
   */
  _fire(d) {
    if (d.called) return; // cancelled while waiting
    if (this.result instanceof Failure) d.errback(new Failure(this.result.value));
    else d.callback(/** @type {T} */ (this.result));
  }
}
