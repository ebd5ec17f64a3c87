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
//
// A handler is any object with setState(list) and apply(event); View is one.
// Events (events.js) delivers the events of a subscription to its handler.

import { SharedResult, fail, succeed } from "./deferred.js";
import { ErrorCode, RpcError } from "./api.js";
import { Emitter } from "./emitter.js";
import { logger } from "./debug.js";

const log = logger("session");

export class SessionDestroyedError extends Error {
  constructor() {
    super("the session was destroyed");
    this.name = "SessionDestroyedError";
  }
}

function isUnknownSession(failure) {
  return failure.check(RpcError) !== null && failure.value.code === ErrorCode.UNKNOWN_SESSION;
}

/** One subscription of a session: a view method with its params, and a handler. */
export class Subscription {
  constructor(session, method, params, handler) {
    this.session = session;
    this.method = method;
    this.params = params;
    this.handler = handler;
    this.key = null;
    this.closed = false;
  }

  unsubscribe() {
    return this.session.unsubscribe(this);
  }
}

export class Session extends Emitter {
  /**
   * Events emitted: "created" (sid, generation), "lost" (sid), "authorized"
   * (user id), "subscribed" (subscription), "settled" (a subscribe finished),
   * "resubscribe-failed" (subscription, failure), "destroyed".
   */
  constructor(api, { token = null } = {}) {
    super();
    this.api = api;
    this.sid = null;
    this.generation = 0; // how many sessions were created; events.js resets seq on change
    this.token = token;
    this.userId = null;
    this.destroyed = false;
    this.subscribing = 0; // subscribe calls in flight
    this._subs = new Set();
    this._opening = null;
  }

  /** The subscriptions that are open, in subscribe order. */
  get subscriptions() {
    return [...this._subs];
  }

  /** The open subscriptions with this key (normally one). */
  subscriptionsFor(key) {
    const found = [];
    for (const sub of this._subs) if (sub.key === key) found.push(sub);
    return found;
  }

  /**
   * A Deferred for the session id, creating the session (and restoring the
   * authorization and the subscriptions of a lost one) when there is none.
   */
  open() {
    if (this.destroyed) return fail(new SessionDestroyedError());
    if (this.sid) return succeed(this.sid);
    if (!this._opening) {
      this._opening = new SharedResult(this._create());
    }
    return this._opening.wait();
  }

  _create() {
    let sid = null;
    return this.api.call("session.create", [])
      .addCallback((newSid) => {
        sid = newSid;
        log("created", sid);
        if (this.token) {
          return this.api.call("session.authorize", [sid, this.token], { session: sid })
            .addCallback((userId) => { this.userId = userId; });
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

  /** Subscribe the open subscriptions again in a new session. */
  _resubscribeAll(sid) {
    const subs = [...this._subs];
    if (subs.length) log("subscribing again", subs.length, "in", sid);
    let chain = succeed(undefined);
    for (const sub of subs) {
      chain = chain.addCallback(() => this.api.call(sub.method, [sid, ...sub.params], { session: sid })
        .addCallbacks(
          ([key, state]) => {
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

  /** Forget `sid` after the engine said it does not know it. */
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
   * With `withSid` the result is {sid, result}.
   */
  call(method, params = [], { retry = true, timeout = undefined, withSid = false } = {}) {
    return this.open().addCallback((sid) => {
      const options = { session: sid };
      if (timeout !== undefined) options.timeout = timeout;
      return this.api.call(method, [sid, ...params], options).addCallbacks(
        (result) => (withSid ? { sid, result } : result),
        (f) => {
          if (!isUnknownSession(f)) throw f;
          this._lost(sid);
          if (!retry || this.destroyed) throw f;
          return this.call(method, params, { retry: false, timeout, withSid });
        },
      );
    });
  }

  /** Authorize the session with a JWT; the token is used again for a new session. */
  authorize(token) {
    this.token = token;
    return this.call("session.authorize", [token]).addCallback((userId) => {
      this.userId = userId;
      this.emit("authorized", userId);
      return userId;
    });
  }

  /**
   * Subscribe with a view method (`stream.subscribe_public_live`, or
   * `session.subscribe` with [view, params, limit]) and its params after the
   * session id. `handler.setState(state)` gets the initial state; the
   * Deferred fires with the Subscription.
   */
  subscribe(method, params, handler) {
    const sub = new Subscription(this, method, params, handler);
    this.subscribing += 1;
    return this._subscribe(sub).addBoth((r) => {
      this.subscribing -= 1;
      this.emit("settled", sub);
      return r;
    });
  }

  _subscribe(sub) {
    return this.call(sub.method, sub.params, { withSid: true }).addCallback(({ sid, result }) => {
      const [key, state] = result;
      if (sub.closed) {
        this._unsubscribeRemote(sid, key);
        return sub;
      }
      if (sid !== this.sid) {
        // The session was replaced while this call was on its way, and the
        // new one was restored without this subscription: subscribe again.
        log("session changed during subscribe; again", sub.method);
        return this._subscribe(sub);
      }
      sub.key = key;
      this._subs.add(sub);
      log("subscribed", key, state.length, "objects");
      sub.handler.setState(state, sub);
      this.emit("subscribed", sub);
      return sub;
    });
  }

  /** Close a subscription; the engine is told unless another one shares the key. */
  unsubscribe(sub) {
    sub.closed = true;
    const wasOpen = this._subs.delete(sub);
    if (!wasOpen || !this.sid || sub.key === null) return succeed(false);
    if (this.subscriptionsFor(sub.key).length > 0) return succeed(true);
    return this._unsubscribeRemote(this.sid, sub.key);
  }

  _unsubscribeRemote(sid, key) {
    return this.api.call("session.unsubscribe", [sid, key], { session: sid }).addErrback((f) => {
      f.trap(RpcError);
      const code = f.value.code;
      if (code === ErrorCode.UNKNOWN_SESSION || code === ErrorCode.UNKNOWN_KEY) return false;
      throw f;
    });
  }

  /**
   * Destroy the session: subscriptions are closed, events.js stops polling.
   * `keepalive` lets the request finish while the page unloads.
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

  _destroyRemote(sid, keepalive = false) {
    return this.api.call("session.destroy", [sid], { session: sid, keepalive })
      .addErrback((f) => {
        if (isUnknownSession(f)) return true;
        throw f;
      });
  }
}
