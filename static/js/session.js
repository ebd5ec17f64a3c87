// Session: one engine session and its subscriptions.
//
// The session is created on first use. When the engine answers 1001 (unknown
// session: it restarted, or the session timed out), the next call creates a new
// session, authorizes it again with the last token, subscribes every open
// subscription again (each handler gets the new state through setState) and
// then retries the failed call once. Pages never see the 1001.
//
//   const session = new Session(new Api());
//   session.subscribe("stream.subscribe_public_live", [10], handler)
//     .addCallback((sub) => ...);      // handler.setState(state) was called
//   const sub = await session.subscribe(method, params, handler, { signal });
//
// A handler is any object with setState(list) and apply(event); View is one.
// Events (events.js) delivers the events of a subscription to its handler.
// Every method that talks to the engine returns a Deferred (await-able) and
// takes `{signal}`: when the AbortSignal aborts, the call is cancelled.

import { Deferred, Failure, SharedResult, abortable, fail, succeed } from "./deferred.js";
import { Api, ErrorCode, RpcError } from "./api.js";
import { Emitter } from "./emitter.js";
import { logger } from "./debug.js";

const log = logger("session");

/** @typedef {import("./api.js").Item} Item */
/** @typedef {import("./api.js").PushEvent} PushEvent */

/**
 * What receives a subscription's state and events (a View is one).
 * @typedef {object} SubscriptionHandler
 * @property {(state: Item[], sub: Subscription) => void} setState  the initial state, and each new one after a resubscribe
 * @property {(event: PushEvent, sub: Subscription) => void} apply  one event of the subscription
 * @property {(failure: Failure, sub: Subscription) => void} [onError]  the engine refused the subscription when it was restored
 */

/**
 * A user id as the engine gives it.
 * @typedef {string | number} UserId
 */

/**
 * What a Session emits.
 * @typedef {object} SessionEvents
 * @property {[sid: string, generation: number]} created  a session was created (or made again)
 * @property {[sid: string]} lost                 the engine no longer knows this session
 * @property {[userId: UserId]} authorized
 * @property {[sub: Subscription]} subscribed     a subscription has its key and state
 * @property {[sub: Subscription]} settled        a subscribe call finished (either way)
 * @property {[sub: Subscription, failure: Failure]} resubscribe-failed
 * @property {[]} destroyed
 */

/** The session was destroyed: nothing more can be done with it. */
export class SessionDestroyedError extends Error {
  constructor() {
    super("the session was destroyed");
    this.name = "SessionDestroyedError";
  }
}

/**
 * @param {Failure} failure
 * @returns {boolean}
 */
function isUnknownSession(failure) {
  return failure.check(RpcError) !== null &&
    /** @type {RpcError} */ (failure.value).code === ErrorCode.UNKNOWN_SESSION;
}

/** One subscription of a session: a view method with its params, and a handler. */
export class Subscription {
  /**
   * @param {Session} session
   * @param {string} method          the view method, e.g. "stream.subscribe_public_live"
   * @param {unknown[]} params       its params after the session id
   * @param {SubscriptionHandler} handler
   */
  constructor(session, method, params, handler) {
    this.session = session;
    this.method = method;
    this.params = params;
    this.handler = handler;
    /** The engine's key of the view, once subscribed. @type {string | null} */
    this.key = null;
    this.closed = false;
  }

  /**
   * Close it (Session.unsubscribe).
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<boolean>}
   */
  unsubscribe(options = {}) {
    return this.session.unsubscribe(this, options);
  }
}

/**
 * One engine session and its subscriptions; restores itself after error 1001.
 * @extends {Emitter<SessionEvents & import("./emitter.js").EventMap>}
 */
export class Session extends Emitter {
  /**
   * Events emitted: "created" (sid, generation), "lost" (sid), "authorized"
   * (user id), "subscribed" (subscription), "settled" (a subscribe finished),
   * "resubscribe-failed" (subscription, failure), "destroyed".
   * @param {Api} api
   * @param {{token?: string | null}} [options]  a JWT to authorize every session with
   */
  constructor(api, { token = null } = {}) {
    super();
    this.api = api;
    /** The session id, while there is a session. @type {string | null} */
    this.sid = null;
    /** How many sessions were created; events.js starts seq again on a change. */
    this.generation = 0;
    /** @type {string | null} */
    this.token = token;
    /** @type {UserId | null} */
    this.userId = null;
    this.destroyed = false;
    /** Subscribe calls in flight. */
    this.subscribing = 0;
    /** @private @type {Set<Subscription>} */
    this._subs = new Set();
    /** @private @type {SharedResult<string> | null} */
    this._opening = null;
  }

  /** The subscriptions that are open, in subscribe order. */
  get subscriptions() {
    return [...this._subs];
  }

  /**
   * The open subscriptions with this key (normally one).
   * @param {string} key
   * @returns {Subscription[]}
   */
  subscriptionsFor(key) {
    const found = [];
    for (const sub of this._subs) if (sub.key === key) found.push(sub);
    return found;
  }

  /**
   * A Deferred for the session id, creating the session (and restoring the
   * authorization and the subscriptions of a lost one) when there is none.
   * `signal` cancels this wait (the session is still made for the others).
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<string>}
   */
  open({ signal = null } = {}) {
    if (signal?.aborted) return abortable(new Deferred(), signal);
    if (this.destroyed) return fail(new SessionDestroyedError());
    if (this.sid) return abortable(succeed(this.sid), signal);
    if (!this._opening) {
      this._opening = new SharedResult(this._create());
    }
    return this._opening.wait({ signal });
  }

  /**
   * @private
   * @returns {Deferred<string>}
   */
  _create() {
    /** @type {string} */
    let sid = "";
    return this.api.call("session.create", [])
      .addCallback((newSid) => {
        sid = /** @type {string} */ (newSid);
        log("created", sid);
        if (this.token) {
          return this.api.call("session.authorize", [sid, this.token], { session: sid })
            .addCallback((userId) => { this.userId = /** @type {UserId} */ (userId); });
        }
        return undefined;
      })
      .addCallback(() => this._resubscribeAll(sid))
      .addCallbacks(
        () => {
          this._opening = null;
          if (this.destroyed) {
            this._destroyRemote(sid).addErrback(() => undefined);
            throw new SessionDestroyedError();
          }
          this.sid = sid;
          this.generation += 1;
          this.emit("created", sid, this.generation);
          return sid;
        },
        (f) => {
          this._opening = null;
          throw f;
        },
      );
  }

  /**
   * Subscribe the open subscriptions again in a new session.
   * @private
   * @param {string} sid
   * @returns {Deferred<undefined>}
   */
  _resubscribeAll(sid) {
    const subs = [...this._subs];
    if (subs.length) log("subscribing again", subs.length, "in", sid);
    /** @type {Deferred<undefined>} */
    let chain = succeed(undefined);
    for (const sub of subs) {
      chain = chain.addCallback(() => this.api.call(sub.method, [sid, ...sub.params], { session: sid })
        .addCallbacks(
          (answer) => {
            const [key, state] = /** @type {[string, Item[]]} */ (answer);
            if (sub.closed) return undefined;
            sub.key = key;
            sub.handler.setState(state, sub);
            this.emit("subscribed", sub);
            return undefined;
          },
          (f) => {
            if (isUnknownSession(f)) throw f; // the new session is gone too: start over
            if (f.check(RpcError) === null) throw f; // network: start over later
            // The engine refuses this subscription now (e.g. a limit): drop it.
            this._subs.delete(sub);
            sub.closed = true;
            this.emit("resubscribe-failed", sub, f);
            sub.handler.onError?.(f, sub);
            return undefined;
          },
        ));
    }
    return chain;
  }

  /**
   * Forget `sid` after the engine said it does not know it (the transports
   * call this on error 1001).
   * @param {string | null} sid
   */
  _lost(sid) {
    if (this.sid === sid && sid !== null) {
      log("session lost", sid);
      this.sid = null;
      this.emit("lost", sid);
    }
  }

  /**
   * Call a session method: `params` follow the session id. On error 1001 the
   * session is restored and, unless `retry` is false, the call made once more.
   * `signal` cancels the call (the request is aborted).
   * @template [R=unknown]
   * @param {string} method
   * @param {unknown[]} [params]
   * @param {{retry?: boolean, timeout?: number, signal?: AbortSignal | null}} [options]
   * @returns {Deferred<R>}
   */
  call(method, params = [], { retry = true, timeout = undefined, signal = null } = {}) {
    return this._call(method, params, { retry, timeout, signal }).addCallback(({ result }) => /** @type {R} */ (result));
  }

  /**
   * As call, with the session id the call was made in: {sid, result}.
   * @private
   * @param {string} method
   * @param {unknown[]} params
   * @param {{retry?: boolean, timeout?: number, signal?: AbortSignal | null}} options
   * @returns {Deferred<{sid: string, result: unknown}>}
   */
  _call(method, params, { retry = true, timeout = undefined, signal = null }) {
    const d = this.open({ signal }).addCallback((sid) => {
      /** @type {import("./api.js").CallOptions} */
      const options = { session: sid };
      if (timeout !== undefined) options.timeout = timeout;
      return this.api.call(method, [sid, ...params], options).addCallbacks(
        (result) => ({ sid, result }),
        (f) => {
          if (!isUnknownSession(f)) throw f;
          this._lost(sid);
          if (!retry || this.destroyed) throw f;
          return this._call(method, params, { retry: false, timeout });
        },
      );
    });
    return abortable(d, signal);
  }

  /**
   * Authorize the session with a JWT; the token is used again for a new session.
   * @param {string} token
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<UserId>}
   */
  authorize(token, { signal = null } = {}) {
    this.token = token;
    return this.call("session.authorize", [token], { signal }).addCallback((answer) => {
      const userId = /** @type {UserId} */ (answer);
      this.userId = userId;
      this.emit("authorized", userId);
      return userId;
    });
  }

  /**
   * Extend the authorization with a new token of the same user (before the
   * old one's `exp`); the token is used again for a new session. Error 1003
   * when it names another user or the authorization has ended already.
   * @param {string} token
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<UserId>}
   */
  refresh(token, { signal = null } = {}) {
    return this.call("session.refresh", [token], { signal }).addCallback((answer) => {
      this.token = token;
      return /** @type {UserId} */ (answer);
    });
  }

  /**
   * Subscribe with a view method (`stream.subscribe_public_live`, or
   * `session.subscribe` with [view, params, limit]) and its params after the
   * session id. `handler.setState(state)` gets the initial state; the
   * Deferred fires with the Subscription. `signal` cancels the call (the
   * subscription is then not made on this side).
   * @param {string} method
   * @param {unknown[]} params
   * @param {SubscriptionHandler} handler
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<Subscription>}
   */
  subscribe(method, params, handler, { signal = null } = {}) {
    const sub = new Subscription(this, method, params, handler);
    this.subscribing += 1;
    const d = this._subscribe(sub, signal).addBoth((r) => {
      this.subscribing -= 1;
      this.emit("settled", sub);
      return r;
    });
    return /** @type {Deferred<Subscription>} */ (d);
  }

  /**
   * @private
   * @param {Subscription} sub
   * @param {AbortSignal | null} signal
   * @returns {Deferred<Subscription>}
   */
  _subscribe(sub, signal) {
    return this._call(sub.method, sub.params, { signal }).addCallback(({ sid, result }) => {
      const [key, state] = /** @type {[string, Item[]]} */ (result);
      if (sub.closed) {
        this._unsubscribeRemote(sid, key);
        return sub;
      }
      if (sid !== this.sid) {
        // The session was replaced while this call was on its way, and the
        // new one was restored without this subscription: subscribe again.
        log("session changed during subscribe; again", sub.method);
        return this._subscribe(sub, signal);
      }
      sub.key = key;
      this._subs.add(sub);
      log("subscribed", key, state.length, "objects");
      sub.handler.setState(state, sub);
      this.emit("subscribed", sub);
      return sub;
    });
  }

  /**
   * Close a subscription; the engine is told unless another one shares the
   * key. Fires with true when it was open.
   * @param {Subscription} sub
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {Deferred<boolean>}
   */
  unsubscribe(sub, { signal = null } = {}) {
    sub.closed = true;
    const wasOpen = this._subs.delete(sub);
    if (!wasOpen || !this.sid || sub.key === null) return succeed(false);
    if (this.subscriptionsFor(sub.key).length > 0) return succeed(true);
    return this._unsubscribeRemote(this.sid, sub.key, signal);
  }

  /**
   * @private
   * @param {string} sid
   * @param {string} key
   * @param {AbortSignal | null} [signal]
   * @returns {Deferred<boolean>}
   */
  _unsubscribeRemote(sid, key, signal = null) {
    return this.api.call("session.unsubscribe", [sid, key], { session: sid, signal }).addCallbacks(() => true, (f) => {
      f.trap(RpcError);
      const code = /** @type {RpcError} */ (f.value).code;
      if (code === ErrorCode.UNKNOWN_SESSION || code === ErrorCode.UNKNOWN_KEY) return false;
      throw f;
    });
  }

  /**
   * Destroy the session: subscriptions are closed, events.js stops polling.
   * `keepalive` lets the request finish while the page unloads.
   * @param {{keepalive?: boolean}} [options]
   * @returns {Deferred<boolean>}
   */
  destroy({ keepalive = false } = {}) {
    if (this.destroyed) return succeed(true);
    this.destroyed = true;
    const sid = this.sid;
    this.sid = null;
    for (const sub of this._subs) sub.closed = true;
    this._subs.clear();
    this.emit("destroyed");
    if (!sid) return succeed(true);
    return this._destroyRemote(sid, keepalive);
  }

  /**
   * @private
   * @param {string} sid
   * @param {boolean} [keepalive]
   * @returns {Deferred<boolean>}
   */
  _destroyRemote(sid, keepalive = false) {
    return this.api.call("session.destroy", [sid], { session: sid, keepalive })
      .addCallbacks(() => true, (f) => {
        if (isUnknownSession(f)) return true;
        throw f;
      });
  }
}
