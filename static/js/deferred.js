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

import { isDebug } from "./debug.js";

export class AlreadyCalledError extends Error {
  constructor(message = "the Deferred has already been called") {
    super(message);
    this.name = "AlreadyCalledError";
  }
}

export class CancelledError extends Error {
  constructor(message = "the Deferred was cancelled") {
    super(message);
    this.name = "CancelledError";
  }
}

export class TimeoutError extends Error {
  constructor(ms) {
    super(`timed out after ${ms} ms`);
    this.name = "TimeoutError";
    this.timeout = ms;
  }
}

/** gatherResults failed: `subFailure` is the first failure, `index` its position. */
export class FirstError extends Error {
  constructor(subFailure, index) {
    super(`the Deferred at index ${index} failed: ${subFailure.getErrorMessage()}`);
    this.name = "FirstError";
    this.subFailure = subFailure;
    this.index = index;
  }
}

/** An error travelling down the errback side of a chain (`failure.value` is the error). */
export class Failure {
  constructor(value) {
    if (value instanceof Failure) return value;
    this.value = value === undefined ? new Error("unknown error") : value;
    this.handled = false; // set when the failure was handed to an awaiting Promise
  }

  /** The error's class (its constructor), or null for null/undefined. */
  get type() {
    return this.value == null ? null : this.value.constructor;
  }

  /** The first of `types` (classes or error names) that matches, else null. */
  check(...types) {
    for (const t of types) {
      if (typeof t === "function") {
        if (this.value instanceof t) return t;
      } else if (typeof t === "string") {
        if (this.value != null && (this.value.name === t || this.type?.name === t)) return t;
      }
    }
    return null;
  }

  /** Like check, but re-raises this failure when nothing matches. */
  trap(...types) {
    const found = this.check(...types);
    if (found === null) throw this;
    return found;
  }

  getErrorMessage() {
    const v = this.value;
    if (v != null && typeof v.message === "string") return v.message;
    return String(v);
  }

  get stack() {
    return this.value?.stack;
  }

  toString() {
    const name = this.value?.name ?? this.type?.name ?? typeof this.value;
    return `[Failure ${name}: ${this.getErrorMessage()}]`;
  }
}

const PASS = (x) => x;

function isThenable(x) {
  return x !== null && (typeof x === "object" || typeof x === "function") &&
    typeof x.then === "function";
}

export class Deferred {
  /**
   * @param {(d: Deferred) => void} [canceller] called by cancel() before the
   *   Deferred is called; if it does not fire the Deferred, cancel() errbacks it
   *   with a CancelledError.
   */
  constructor(canceller) {
    this.called = false;
    this.paused = 0;
    this.result = undefined;
    this._callbacks = [];
    this._canceller = canceller ?? null;
    this._running = false;
    this._suppressAlreadyCalled = false;
    this._checkScheduled = false;
    this._reported = false;
    if (Deferred.debug || isDebug()) this._creationStack = new Error("created here").stack;
  }

  // -- adding callbacks ---------------------------------------------------

  /**
   * Add a callback and an errback at the same level of the chain.
   * @param {Function|null} callback  called with the result (and callbackArgs)
   * @param {Function|null} errback   called with the Failure (and errbackArgs)
   */
  addCallbacks(callback, errback = null, { callbackArgs = [], errbackArgs = [] } = {}) {
    this._callbacks.push([callback ?? PASS, callbackArgs, errback ?? PASS, errbackArgs]);
    if (this.called) this._run();
    return this;
  }

  addCallback(fn, ...args) {
    return this.addCallbacks(fn, null, { callbackArgs: args });
  }

  addErrback(fn, ...args) {
    return this.addCallbacks(null, fn, { errbackArgs: args });
  }

  addBoth(fn, ...args) {
    return this.addCallbacks(fn, fn, { callbackArgs: args, errbackArgs: args });
  }

  /** Fire `other` with this chain's result at this point (then continue with undefined). */
  chainDeferred(other) {
    return this.addCallbacks((r) => { other.callback(r); }, (f) => { other.errback(f); });
  }

  // -- firing ---------------------------------------------------------------

  callback(result) {
    if (result instanceof Deferred) {
      throw new TypeError("callback() takes a result, not a Deferred");
    }
    this._start(result);
  }

  errback(fail) {
    this._start(new Failure(fail === undefined ? new Error("errback() called without an error") : fail));
  }

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

  pause() {
    this.paused += 1;
  }

  unpause() {
    this.paused -= 1;
    if (this.paused === 0 && this.called) this._run();
  }

  /**
   * Cancel: before the Deferred fired, call the canceller and, unless it fired
   * the Deferred, errback it with CancelledError (a later callback() from the
   * operation is then ignored once). While waiting on a Deferred returned by a
   * callback, cancel that one.
   */
  cancel() {
    if (!this.called) {
      if (this._canceller) {
        this._canceller(this);
      } else {
        this._suppressAlreadyCalled = true;
      }
      if (!this.called) this.errback(new CancelledError());
    } else if (this.result instanceof Deferred) {
      this.result.cancel();
    }
  }

  /** Cancel the Deferred after `ms` milliseconds; it then fails with TimeoutError. */
  addTimeout(ms) {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.cancel();
    }, ms);
    return this.addBoth((r) => {
      clearTimeout(timer);
      if (timedOut && r instanceof Failure && r.check(CancelledError)) {
        return new Failure(new TimeoutError(ms));
      }
      return r;
    });
  }

  _run() {
    if (this._running) return; // the running loop picks up what was added
    this._running = true;
    try {
      while (this._callbacks.length > 0 && this.paused === 0) {
        const [cb, cbArgs, eb, ebArgs] = this._callbacks.shift();
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
          current.addBoth((r) => {
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
   */
  then(onFulfilled, onRejected) {
    const p = new Promise((resolve, reject) => {
      this.addCallbacks(
        (r) => { resolve(r); return r; },
        (f) => { f.handled = true; reject(f.value); return f; },
      );
    });
    return p.then(onFulfilled, onRejected);
  }

  catch(onRejected) {
    return this.then(undefined, onRejected);
  }

  finally(onFinally) {
    return this.then().finally(onFinally);
  }

  toString() {
    const state = !this.called ? "pending"
      : this.paused ? "paused"
        : this.result instanceof Failure ? `failed ${this.result}` : "fired";
    return `<Deferred ${state}>`;
  }
}

/** Turn on to record where each Deferred was created (also on with the debug flag). */
Deferred.debug = false;

/** Called with (failure, deferred) for a chain left with an unhandled failure. */
Deferred.onUnhandledError = (failure, deferred) => {
  const extra = deferred._creationStack ? ["\nDeferred", deferred._creationStack] : [];
  console.error("Unhandled error in Deferred:", failure.value, ...extra);
};

// -- helpers ------------------------------------------------------------------

export function succeed(result) {
  const d = new Deferred();
  d.callback(result);
  return d;
}

export function fail(error) {
  const d = new Deferred();
  d.errback(error);
  return d;
}

/** A Deferred for a Promise (or any thenable). */
export function fromPromise(promise) {
  const d = new Deferred();
  Promise.resolve(promise).then(
    (v) => { if (!d.called) d.callback(v); },
    (e) => { if (!d.called) d.errback(e); },
  );
  return d;
}

/** Call fn(...args) and always get a Deferred: for its result, its Promise or its exception. */
export function maybeDeferred(fn, ...args) {
  let r;
  try {
    r = fn(...args);
  } catch (e) {
    return fail(e);
  }
  if (r instanceof Deferred) return r;
  if (r instanceof Failure) return fail(r);
  if (isThenable(r)) return fromPromise(r);
  return succeed(r);
}

/**
 * A Deferred for the list of results of `deferreds` (Deferreds, Promises or
 * plain values), in order. The first failure fails it with a FirstError. With
 * `consumeErrors` the failures are consumed in the inputs (not reported there).
 * Cancelling it cancels the inputs that have not fired.
 */
export function gatherResults(deferreds, consumeErrors = false) {
  const inputs = Array.from(deferreds, (x) => (x instanceof Deferred ? x : maybeDeferred(() => x)));
  const results = new Array(inputs.length);
  let remaining = inputs.length;
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

/** A Deferred that fires with fn(...args) (or undefined) after `ms` milliseconds; cancel() stops the timer. */
export function deferLater(ms, fn = undefined, ...args) {
  let timer = null;
  const d = new Deferred(() => clearTimeout(timer));
  timer = setTimeout(() => d.callback(undefined), ms);
  if (fn) d.addCallback(() => fn(...args));
  return d;
}

Deferred.succeed = succeed;
Deferred.fail = fail;
Deferred.fromPromise = fromPromise;
Deferred.maybeDeferred = maybeDeferred;
Deferred.gatherResults = gatherResults;
Deferred.deferLater = deferLater;

/**
 * One operation's result for many waiters: each wait() gets a Deferred of its
 * own, so one waiter's callbacks cannot change what the others receive. The
 * source Deferred's result is consumed (a failure is reported through the
 * waiters, not the source).
 */
export class SharedResult {
  constructor(source) {
    this.fired = false;
    this.result = undefined;
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

  wait() {
    const d = new Deferred();
    if (this.fired) this._fire(d);
    else this._waiters.push(d);
    return d;
  }

  _fire(d) {
    if (d.called) return; // cancelled while waiting
    if (this.result instanceof Failure) d.errback(new Failure(this.result.value));
    else d.callback(this.result);
  }
}
