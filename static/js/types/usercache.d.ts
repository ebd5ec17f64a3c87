/** @typedef {import("./session.js").UserId} UserId */
/**
 * A user's public profile (the fields the views file declares public), or
 * null for a user the engine does not know.
 * @typedef {{id: UserId, name?: string | null, avatar?: string | null, [field: string]: unknown} | null} Profile
 */
/**
 * Loads one profile: (id) => profile, or a Deferred or Promise of one.
 * @typedef {(id: UserId) => Profile | undefined | PromiseLike<Profile | undefined>} ProfileLoader
 */
/**
 * Loads profiles in batches: (ids) => the profiles in the same order.
 * @typedef {(ids: UserId[]) => (Profile | undefined)[] | PromiseLike<(Profile | undefined)[]>} BatchLoader
 */
/**
 * What a UserCache emits: "change" (id, profile, the old one) when a profile
 * arrived or changed.
 * @typedef {object} UserCacheEvents
 * @property {[id: UserId, profile: Profile, old: Profile | undefined]} change
 */
/**
 * User profiles loaded on demand, each user once, a bounded number of loads
 * in flight, kept for `ttl` ms.
 * @extends {Emitter<UserCacheEvents & import("./emitter.js").EventMap>}
 */
export class UserCache extends Emitter<UserCacheEvents & import("./emitter.js").EventMap> {
    /**
     * A cache whose loads are `user.public_profiles` calls of `api` (up to 100
     * ids each). Where the engine has no profiles (-32601), every user is null.
     * @param {import("./api.js").Api} api
     * @param {ConstructorParameters<typeof UserCache>[1]} [options]
     * @returns {UserCache}
     */
    static forApi(api: import("./api.js").Api, options?: ConstructorParameters<typeof UserCache>[1]): UserCache;
    /**
     * @param {ProfileLoader | BatchLoader} loader  (id) => profile | Deferred | Promise; with `batch`, (ids) => profiles
     * @param {object} [options]
     * @param {DeferredManager | null} [options.manager]  share one with other loaders
     * @param {number} [options.concurrency]       loads in flight (own manager)
     * @param {number} [options.maxSize]           profiles kept
     * @param {number} [options.ttl]               ms a profile is used before it is loaded again
     * @param {number} [options.batch]             0: one id per load; N: up to N ids per load
     * @param {() => number} [options.now]         the clock, () => ms
     */
    constructor(loader: ProfileLoader | BatchLoader, { manager, concurrency, maxSize, ttl, batch, now, }?: {
        manager?: DeferredManager | null | undefined;
        concurrency?: number | undefined;
        maxSize?: number | undefined;
        ttl?: number | undefined;
        batch?: number | undefined;
        now?: (() => number) | undefined;
    });
    loader: ProfileLoader | BatchLoader;
    manager: DeferredManager;
    maxSize: number;
    ttl: number;
    batch: number;
    now: () => number;
    /** Users loaded (ids sent to the loader). */
    loads: number;
    /** Loader calls made. */
    requests: number;
    /** @private @type {Map<UserId, {profile: Profile, at: number}>} */
    private _profiles;
    /** @private @type {Map<UserId, SharedResult<Profile>>} */
    private _loading;
    /** @private batch mode: what waits for this turn's load @type {{id: UserId, d: Deferred<Profile | undefined>}[]} */
    private _queued;
    /** @private @type {ReturnType<typeof setInterval> | null} */
    private _timer;
    /**
     * The profile if it is loaded (fresh or not), else undefined.
     * @param {UserId} id
     * @returns {Profile | undefined}
     */
    peek(id: UserId): Profile | undefined;
    /**
     * Whether the profile of `id` is loaded and younger than the ttl.
     * @param {UserId} id
     * @returns {boolean}
     */
    isFresh(id: UserId): boolean;
    /**
     * Put a profile known from elsewhere into the cache (fresh from now).
     * @param {UserId} id
     * @param {Profile} profile
     */
    set(id: UserId, profile: Profile): void;
    /**
     * Drop a profile.
     * @param {UserId} id
     */
    forget(id: UserId): void;
    /**
     * A Deferred for the profile of user `id` (loaded when absent or older than the ttl).
     * @param {UserId} id
     * @param {{signal?: AbortSignal | null}} [options]  cancel this wait (the load goes on for the others)
     * @returns {Deferred<Profile>}
     */
    get(id: UserId, { signal }?: {
        signal?: AbortSignal | null;
    }): Deferred<Profile>;
    /**
     * A Deferred for the profiles of `ids`, in order.
     * @param {UserId[]} ids
     * @returns {Deferred<Profile[]>}
     */
    getMany(ids: UserId[]): Deferred<Profile[]>;
    /**
     * Load again the profiles of `ids` that are missing or expired; fires when done (errors ignored).
     * @param {Iterable<UserId | null | undefined>} ids
     * @returns {Deferred<(Profile | undefined)[]>}
     */
    refresh(ids: Iterable<UserId | null | undefined>): Deferred<(Profile | undefined)[]>;
    /**
     * Every `every` ms (default: the ttl, at least 1 s), refresh the ids that
     * `getIds()` gives (the users a page shows). Returns a function that stops.
     * @param {() => Iterable<UserId | null | undefined>} getIds
     * @param {number | null} [every]  ms
     * @returns {() => void}
     */
    startRefresh(getIds: () => Iterable<UserId | null | undefined>, every?: number | null): () => void;
    /** Stop what startRefresh started. */
    stopRefresh(): void;
    /**
     * @private
     * @param {UserId} id
     * @returns {Deferred<Profile | undefined>}
     */
    private _load;
    /**
     * Batch mode: this turn's ids, `batch` at a time, each batch one load in the manager.
     * @private
     */
    private _flush;
}
export type UserId = import("./session.js").UserId;
/**
 * A user's public profile (the fields the views file declares public), or
 * null for a user the engine does not know.
 */
export type Profile = {
    id: UserId;
    name?: string | null;
    avatar?: string | null;
    [field: string]: unknown;
} | null;
/**
 * Loads one profile: (id) => profile, or a Deferred or Promise of one.
 */
export type ProfileLoader = (id: UserId) => Profile | undefined | PromiseLike<Profile | undefined>;
/**
 * Loads profiles in batches: (ids) => the profiles in the same order.
 */
export type BatchLoader = (ids: UserId[]) => (Profile | undefined)[] | PromiseLike<(Profile | undefined)[]>;
/**
 * What a UserCache emits: "change" (id, profile, the old one) when a profile
 * arrived or changed.
 */
export type UserCacheEvents = {
    change: [id: UserId, profile: Profile, old: Profile | undefined];
};
import { Emitter } from "./emitter.js";
import { DeferredManager } from "./deferredmanager.js";
import { Deferred } from "./deferred.js";
