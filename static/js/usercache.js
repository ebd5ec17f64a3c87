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
import { logger } from "./debug.js";

const log = logger("usercache");
const METHOD_NOT_FOUND = -32601;

function same(a, b) {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

export class UserCache extends Emitter {
  /**
   * @param {Function} loader  (id) => profile | Deferred | Promise; with `batch`, (ids) => profiles
   * @param {object} [options]
   * @param {DeferredManager} [options.manager]  share one with other loaders
   * @param {number} [options.concurrency]       loads in flight (own manager)
   * @param {number} [options.maxSize]           profiles kept
   * @param {number} [options.ttl]               ms a profile is used before it is loaded again
   * @param {number} [options.batch]             0: one id per load; N: up to N ids per load
   * @param {Function} [options.now]             the clock, () => ms
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
    this.loads = 0; // users loaded (ids sent to the loader)
    this.requests = 0; // loader calls made
    this._profiles = new Map(); // id -> {profile, at}
    this._loading = new Map(); // id -> SharedResult
    this._queued = []; // batch mode: [{id, d}] waiting for this turn's load
    this._timer = null;
  }

  /**
   * A cache whose loads are `user.public_profiles` calls of `api` (up to 100
   * ids each). Where the engine has no profiles (-32601), every user is null.
   */
  static forApi(api, options = {}) {
    const load = (ids) => api.call("user.public_profiles", [ids]).addErrback((f) => {
      if (f.value?.code === METHOD_NOT_FOUND) return ids.map(() => null);
      return f;
    });
    return new UserCache(load, { batch: 100, ...options });
  }

  /** The profile if it is loaded (fresh or not), else undefined. */
  peek(id) {
    return this._profiles.get(id)?.profile;
  }

  /** Whether the profile of `id` is loaded and younger than the ttl. */
  isFresh(id) {
    const entry = this._profiles.get(id);
    return entry !== undefined && this.now() - entry.at < this.ttl;
  }

  /** Put a profile known from elsewhere into the cache (fresh from now). */
  set(id, profile) {
    const old = this._profiles.get(id);
    this._profiles.delete(id);
    this._profiles.set(id, { profile, at: this.now() });
    while (this._profiles.size > this.maxSize) {
      this._profiles.delete(this._profiles.keys().next().value);
    }
    if (!old || !same(old.profile, profile)) this.emit("change", id, profile, old?.profile);
  }

  forget(id) {
    this._profiles.delete(id);
  }

  /** A Deferred for the profile of user `id` (loaded when absent or older than the ttl). */
  get(id) {
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
          return this.peek(id);
        },
        (f) => {
          this._loading.delete(id);
          log("loading user", id, "failed:", f.value);
          const known = this._profiles.get(id);
          return known ? known.profile : f; // the last profile beats an error
        },
      );
      shared = new SharedResult(d);
      if (!shared.fired) this._loading.set(id, shared);
    }
    return shared.wait();
  }

  /** A Deferred for the profiles of `ids`, in order. */
  getMany(ids) {
    return gatherResults(ids.map((id) => this.get(id)), true);
  }

  /** Load again the profiles of `ids` that are missing or expired; fires when done (errors ignored). */
  refresh(ids) {
    const stale = [...new Set(ids)].filter((id) => id != null && !this.isFresh(id));
    return gatherResults(stale.map((id) => this.get(id).addErrback(() => undefined)));
  }

  /**
   * Every `every` ms (default: the ttl, at least 1 s), refresh the ids that
   * `getIds()` gives (the users a page shows). Returns a function that stops.
   */
  startRefresh(getIds, every = null) {
    this.stopRefresh();
    const period = Math.max(1000, every ?? (Number.isFinite(this.ttl) ? this.ttl : 60000));
    this._timer = setInterval(() => {
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

  stopRefresh() {
    if (this._timer !== null) clearInterval(this._timer);
    this._timer = null;
  }

  // -- loading ------------------------------------------------------------------

  _load(id) {
    if (!this.batch) {
      this.requests += 1;
      return this.manager.run(this.loader, id);
    }
    const d = new Deferred();
    this._queued.push({ id, d });
    if (this._queued.length === 1) queueMicrotask(() => this._flush());
    return d;
  }

  /** Batch mode: this turn's ids, `batch` at a time, each batch one load in the manager. */
  _flush() {
    const queued = this._queued;
    this._queued = [];
    for (let i = 0; i < queued.length; i += this.batch) {
      const part = queued.slice(i, i + this.batch);
      const ids = part.map((q) => q.id);
      this.requests += 1;
      this.manager.run(this.loader, ids).addCallbacks(
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
