// UserCache: user profiles loaded on demand, each user once, with a bounded
// number of loads in flight (through a DeferredManager).
//
//   const users = new UserCache((id) => api.call("users.get", [id]), { concurrency: 4 });
//   users.get(340699).addCallback((profile) => ...);
//
// The loader is injected: (id) => profile, a Deferred or a Promise of one.
// Asking for a user whose load is running waits for that load; a failed load
// is not remembered (the next get tries again). At most `maxSize` profiles are
// kept, the least recently used going first.

import { SharedResult, gatherResults, succeed } from "./deferred.js";
import { DeferredManager } from "./deferredmanager.js";
import { logger } from "./debug.js";

const log = logger("usercache");

export class UserCache {
  /**
   * @param {Function} loader  (id) => profile | Deferred | Promise
   * @param {object} [options]
   * @param {DeferredManager} [options.manager]  share one with other loaders
   * @param {number} [options.concurrency]       loads in flight (own manager)
   * @param {number} [options.maxSize]           profiles kept
   */
  constructor(loader, { manager = null, concurrency = 4, maxSize = 5000 } = {}) {
    this.loader = loader;
    this.manager = manager ?? new DeferredManager(concurrency);
    this.maxSize = maxSize;
    this.loads = 0; // loader calls made
    this._profiles = new Map();
    this._loading = new Map();
  }

  /** The profile if it is loaded, else undefined. */
  peek(id) {
    return this._profiles.get(id);
  }

  /** Put a profile known from elsewhere into the cache. */
  set(id, profile) {
    this._profiles.delete(id);
    this._profiles.set(id, profile);
    while (this._profiles.size > this.maxSize) {
      this._profiles.delete(this._profiles.keys().next().value);
    }
  }

  forget(id) {
    this._profiles.delete(id);
  }

  /** A Deferred for the profile of user `id`. */
  get(id) {
    if (this._profiles.has(id)) {
      const profile = this._profiles.get(id);
      this.set(id, profile); // most recently used
      return succeed(profile);
    }
    let shared = this._loading.get(id);
    if (!shared) {
      this.loads += 1;
      log("loading user", id);
      const d = this.manager.run(this.loader, id).addCallbacks(
        (profile) => {
          this._loading.delete(id);
          this.set(id, profile);
          return profile;
        },
        (f) => {
          this._loading.delete(id);
          log("loading user", id, "failed:", f.value);
          return f;
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
}
