// UserCache: user profiles loaded on demand, each user once, with a bounded
// number of loads in flight (through a DeferredManager), kept for `ttl` ms.
//
//   const users = UserCache.forApi(api, { ttl: 60000, concurrency: 2 });
//   users.get(340699).addCallback((profile) => ...);   // {id, name, avatar} or null
//   users.on("change", (id, profile, old) => ...);     // a profile arrived or changed
//   users.startRefresh(() => idsOnThePage);            // reload what expired, now and then
//
// The loader is injected: (id) => profile, a Deferred or a Promise of one;
// with `batch: N` it is (ids) => profiles in the same order, for at most N
// ids, and the ids asked for in one turn of the event loop go in one load
// (forApi: one user.public_profiles call). Asking for a user whose load is
// running waits for that load; a failed load is not remembered (the next get
// tries again; a user already known keeps its last profile). A profile older
// than `ttl` is loaded again on the next get; until then peek() gives the old
// one. At most `maxSize` profiles are kept, the least recently used going
// first. `null` (no such user) is a profile too: it is kept as long.

import { Deferred, Failure, SharedResult, gatherResults, succeed } from "./deferred.js";
import { DeferredManager } from "./deferredmanager.js";
import { Emitter } from "./emitter.js";
import { sameValue } from "./viewlist.js";
import { logger } from "./debug.js";

const log = logger("usercache");
const METHOD_NOT_FOUND = -32601;

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
export class UserCache extends Emitter {
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
  constructor(loader, {
    manager = null, concurrency = 4, maxSize = 5000, ttl = Infinity, batch = 0, now = () => Date.now(),
  } = {}) {
    super();
    this.loader = loader;
    this.manager = manager ?? new DeferredManager(concurrency);
    this.maxSize = maxSize;
    this.ttl = ttl;
    this.batch = batch;
    this.now = now;
    /** Users loaded (ids sent to the loader). */
    this.loads = 0;
    /** Loader calls made. */
    this.requests = 0;
    /** @private @type {Map<UserId, {profile: Profile, at: number}>} */
    this._profiles = new Map();
    /** @private @type {Map<UserId, SharedResult<Profile>>} */
    this._loading = new Map();
    /** @private batch mode: what waits for this turn's load @type {{id: UserId, d: Deferred<Profile | undefined>}[]} */
    this._queued = [];
    /** @private @type {ReturnType<typeof setInterval> | null} */
    this._timer = null;
  }

  /**
   * A cache whose loads are `user.public_profiles` calls of `api` (up to 100
   * ids each). Where the engine has no profiles (-32601), every user is null.
   * @param {import("./api.js").Api} api
   * @param {ConstructorParameters<typeof UserCache>[1]} [options]
   * @returns {UserCache}
   */
  static forApi(api, options = {}) {
    /** @type {BatchLoader} */
    const load = (ids) => api.call("user.public_profiles", [ids]).addErrback((f) => {
      if (/** @type {{code?: unknown}} */ (f.value)?.code === METHOD_NOT_FOUND) return ids.map(() => null);
      return f;
    }).addCallback((profiles) => /** @type {Profile[]} */ (profiles));
    return new UserCache(load, { batch: 100, ...options });
  }

  /**
   * The profile if it is loaded (fresh or not), else undefined.
   * @param {UserId} id
   * @returns {Profile | undefined}
   */
  peek(id) {
    return this._profiles.get(id)?.profile;
  }

  /**
   * Whether the profile of `id` is loaded and younger than the ttl.
   * @param {UserId} id
   * @returns {boolean}
   */
  isFresh(id) {
    const entry = this._profiles.get(id);
    return entry !== undefined && this.now() - entry.at < this.ttl;
  }

  /**
   * Put a profile known from elsewhere into the cache (fresh from now).
   * @param {UserId} id
   * @param {Profile} profile
   */
  set(id, profile) {
    const old = this._profiles.get(id);
    this._profiles.delete(id);
    this._profiles.set(id, { profile, at: this.now() });
    while (this._profiles.size > this.maxSize) {
      this._profiles.delete(/** @type {UserId} */ (this._profiles.keys().next().value));
    }
    if (!old || !sameValue(old.profile, profile)) this.emit("change", id, profile, old?.profile);
  }

  /**
   * Drop a profile.
   * @param {UserId} id
   */
  forget(id) {
    this._profiles.delete(id);
  }

  /**
   * A Deferred for the profile of user `id` (loaded when absent or older than the ttl).
   * @param {UserId} id
   * @param {{signal?: AbortSignal | null}} [options]  cancel this wait (the load goes on for the others)
   * @returns {Deferred<Profile>}
   */
  get(id, { signal = null } = {}) {
    const entry = this._profiles.get(id);
    if (entry && this.now() - entry.at < this.ttl) {
      this._profiles.delete(id); // most recently used
      this._profiles.set(id, entry);
      return succeed(entry.profile);
    }
    let shared = this._loading.get(id);
    if (!shared) {
      this.loads += 1;
      log(entry ? "reloading user" : "loading user", id);
      const d = this._load(id).addCallbacks(
        (profile) => {
          this._loading.delete(id);
          this.set(id, profile === undefined ? null : profile);
          return /** @type {Profile} */ (this.peek(id));
        },
        (f) => {
          this._loading.delete(id);
          log("loading user", id, "failed:", f.value);
          const known = this._profiles.get(id);
          return known ? known.profile : f; // the last profile beats an error
        },
      );
      shared = new SharedResult(/** @type {Deferred<Profile>} */ (d));
      if (!shared.fired) this._loading.set(id, shared);
    }
    return shared.wait({ signal });
  }

  /**
   * A Deferred for the profiles of `ids`, in order.
   * @param {UserId[]} ids
   * @returns {Deferred<Profile[]>}
   */
  getMany(ids) {
    return gatherResults(ids.map((id) => this.get(id)), true);
  }

  /**
   * Load again the profiles of `ids` that are missing or expired; fires when done (errors ignored).
   * @param {Iterable<UserId | null | undefined>} ids
   * @returns {Deferred<(Profile | undefined)[]>}
   */
  refresh(ids) {
    const stale = /** @type {UserId[]} */ ([...new Set(ids)].filter((id) => id != null && !this.isFresh(id)));
    return gatherResults(stale.map((id) => this.get(id).addErrback(() => undefined)));
  }

  /**
   * Every `every` ms (default: the ttl, at least 1 s), refresh the ids that
   * `getIds()` gives (the users a page shows). Returns a function that stops.
   * @param {() => Iterable<UserId | null | undefined>} getIds
   * @param {number | null} [every]  ms
   * @returns {() => void}
   */
  startRefresh(getIds, every = null) {
    this.stopRefresh();
    const period = Math.max(1000, every ?? (Number.isFinite(this.ttl) ? this.ttl : 60000));
    this._timer = setInterval(() => {
      /** @type {(UserId | null | undefined)[]} */
      let ids = [];
      try {
        ids = [...getIds()];
      } catch (e) {
        log("the ids to refresh could not be read:", e);
      }
      this.refresh(ids);
    }, period);
    return () => this.stopRefresh();
  }

  /** Stop what startRefresh started. */
  stopRefresh() {
    if (this._timer !== null) clearInterval(this._timer);
    this._timer = null;
  }

  // -- loading ------------------------------------------------------------------

  /**
   * @private
   * @param {UserId} id
   * @returns {Deferred<Profile | undefined>}
   */
  _load(id) {
    if (!this.batch) {
      this.requests += 1;
      return this.manager.run(/** @type {ProfileLoader} */ (this.loader), id);
    }
    /** @type {Deferred<Profile | undefined>} */
    const d = new Deferred();
    this._queued.push({ id, d });
    if (this._queued.length === 1) queueMicrotask(() => this._flush());
    return d;
  }

  /**
   * Batch mode: this turn's ids, `batch` at a time, each batch one load in the manager.
   * @private
   */
  _flush() {
    const queued = this._queued;
    this._queued = [];
    for (let i = 0; i < queued.length; i += this.batch) {
      const part = queued.slice(i, i + this.batch);
      const ids = part.map((q) => q.id);
      this.requests += 1;
      this.manager.run(/** @type {BatchLoader} */ (this.loader), ids).addCallbacks(
        (profiles) => {
          if (!Array.isArray(profiles) || profiles.length !== ids.length) {
            const error = new Error(`the loader gave ${Array.isArray(profiles) ? profiles.length : typeof profiles} profiles for ${ids.length} ids`);
            for (const q of part) q.d.errback(new Failure(error));
            return undefined;
          }
          part.forEach((q, j) => q.d.callback(profiles[j]));
          return undefined;
        },
        (f) => {
          for (const q of part) q.d.errback(new Failure(f.value));
          return undefined;
        },
      );
    }
  }
}
