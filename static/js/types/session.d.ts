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
    constructor();
}
/** One subscription of a session: a view method with its params, and a handler. */
export class Subscription {
    /**
     * @param {Session} session
     * @param {string} method          the view method, e.g. "stream.subscribe_public_live"
     * @param {unknown[]} params       its params after the session id
     * @param {SubscriptionHandler} handler
     */
    constructor(session: Session, method: string, params: unknown[], handler: SubscriptionHandler);
    session: Session;
    method: string;
    params: unknown[];
    handler: SubscriptionHandler;
    /** The engine's key of the view, once subscribed. @type {string | null} */
    key: string | null;
    closed: boolean;
    /**
     * Close it (Session.unsubscribe).
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<boolean>}
     */
    unsubscribe(options?: {
        signal?: AbortSignal | null;
    }): Deferred<boolean>;
}
/**
 * One engine session and its subscriptions; restores itself after error 1001.
 * @extends {Emitter<SessionEvents & import("./emitter.js").EventMap>}
 */
export class Session extends Emitter<SessionEvents & import("./emitter.js").EventMap> {
    /**
     * Events emitted: "created" (sid, generation), "lost" (sid), "authorized"
     * (user id), "subscribed" (subscription), "settled" (a subscribe finished),
     * "resubscribe-failed" (subscription, failure), "destroyed".
     * @param {Api} api
     * @param {{token?: string | null}} [options]  a JWT to authorize every session with
     */
    constructor(api: Api, { token }?: {
        token?: string | null;
    });
    api: Api;
    /** The session id, while there is a session. @type {string | null} */
    sid: string | null;
    /** How many sessions were created; events.js starts seq again on a change. */
    generation: number;
    /** @type {string | null} */
    token: string | null;
    /** @type {UserId | null} */
    userId: UserId | null;
    destroyed: boolean;
    /** Subscribe calls in flight. */
    subscribing: number;
    /** @private @type {Set<Subscription>} */
    private _subs;
    /** @private @type {SharedResult<string> | null} */
    private _opening;
    /** The subscriptions that are open, in subscribe order. */
    get subscriptions(): Subscription[];
    /**
     * The open subscriptions with this key (normally one).
     * @param {string} key
     * @returns {Subscription[]}
     */
    subscriptionsFor(key: string): Subscription[];
    /**
     * A Deferred for the session id, creating the session (and restoring the
     * authorization and the subscriptions of a lost one) when there is none.
     * `signal` cancels this wait (the session is still made for the others).
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<string>}
     */
    open({ signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<string>;
    /**
     * @private
     * @returns {Deferred<string>}
     */
    private _create;
    /**
     * Subscribe the open subscriptions again in a new session.
     * @private
     * @param {string} sid
     * @returns {Deferred<undefined>}
     */
    private _resubscribeAll;
    /**
     * Forget `sid` after the engine said it does not know it (the transports
     * call this on error 1001).
     * @param {string | null} sid
     */
    _lost(sid: string | null): void;
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
    call<R = unknown>(method: string, params?: unknown[], { retry, timeout, signal }?: {
        retry?: boolean;
        timeout?: number;
        signal?: AbortSignal | null;
    }): Deferred<R>;
    /**
     * As call, with the session id the call was made in: {sid, result}.
     * @private
     * @param {string} method
     * @param {unknown[]} params
     * @param {{retry?: boolean, timeout?: number, signal?: AbortSignal | null}} options
     * @returns {Deferred<{sid: string, result: unknown}>}
     */
    private _call;
    /**
     * Authorize the session with a JWT; the token is used again for a new session.
     * @param {string} token
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<UserId>}
     */
    authorize(token: string, { signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<UserId>;
    /**
     * Extend the authorization with a new token of the same user (before the
     * old one's `exp`); the token is used again for a new session. Error 1003
     * when it names another user or the authorization has ended already.
     * @param {string} token
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<UserId>}
     */
    refresh(token: string, { signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<UserId>;
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
    subscribe(method: string, params: unknown[], handler: SubscriptionHandler, { signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<Subscription>;
    /**
     * @private
     * @param {Subscription} sub
     * @param {AbortSignal | null} signal
     * @returns {Deferred<Subscription>}
     */
    private _subscribe;
    /**
     * Close a subscription; the engine is told unless another one shares the
     * key. Fires with true when it was open.
     * @param {Subscription} sub
     * @param {{signal?: AbortSignal | null}} [options]
     * @returns {Deferred<boolean>}
     */
    unsubscribe(sub: Subscription, { signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<boolean>;
    /**
     * @private
     * @param {string} sid
     * @param {string} key
     * @param {AbortSignal | null} [signal]
     * @returns {Deferred<boolean>}
     */
    private _unsubscribeRemote;
    /**
     * Destroy the session: subscriptions are closed, events.js stops polling.
     * `keepalive` lets the request finish while the page unloads.
     * @param {{keepalive?: boolean}} [options]
     * @returns {Deferred<boolean>}
     */
    destroy({ keepalive }?: {
        keepalive?: boolean;
    }): Deferred<boolean>;
    /**
     * @private
     * @param {string} sid
     * @param {boolean} [keepalive]
     * @returns {Deferred<boolean>}
     */
    private _destroyRemote;
}
export type Item = import("./api.js").Item;
export type PushEvent = import("./api.js").PushEvent;
/**
 * What receives a subscription's state and events (a View is one).
 */
export type SubscriptionHandler = {
    /**
     * the initial state, and each new one after a resubscribe
     */
    setState: (state: Item[], sub: Subscription) => void;
    /**
     * one event of the subscription
     */
    apply: (event: PushEvent, sub: Subscription) => void;
    /**
     * the engine refused the subscription when it was restored
     */
    onError?: ((failure: Failure, sub: Subscription) => void) | undefined;
};
/**
 * A user id as the engine gives it.
 */
export type UserId = string | number;
/**
 * What a Session emits.
 */
export type SessionEvents = {
    /**
     * a session was created (or made again)
     */
    created: [sid: string, generation: number];
    /**
     * the engine no longer knows this session
     */
    lost: [sid: string];
    authorized: [userId: UserId];
    /**
     * a subscription has its key and state
     */
    subscribed: [sub: Subscription];
    /**
     * a subscribe call finished (either way)
     */
    settled: [sub: Subscription];
    "resubscribe-failed": [sub: Subscription, failure: Failure];
    destroyed: [];
};
import { Deferred } from "./deferred.js";
import { Emitter } from "./emitter.js";
import { Api } from "./api.js";
import { Failure } from "./deferred.js";
