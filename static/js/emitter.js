// A minimal event emitter: on(name, fn) returns a function that removes fn.

/**
 * A map from event name to the arguments its listeners get.
 * @typedef {Record<string, unknown[]>} EventMap
 */

/**
 * `on`/`off`/`emit` with listeners typed by the event map `E`.
 * @template {EventMap} [E=EventMap]
 */
export class Emitter {
  constructor() {
    /** @private @type {Map<keyof E, Set<Function>>} */
    this._listeners = new Map();
  }

  /**
   * Call `fn` on every `name` event; returns a function that removes it.
   * @template {keyof E & string} K
   * @param {K} name
   * @param {(...args: E[K]) => void} fn
   * @returns {() => void}
   */
  on(name, fn) {
    let set = this._listeners.get(name);
    if (!set) this._listeners.set(name, set = new Set());
    set.add(fn);
    return () => this.off(name, fn);
  }

  /**
   * Remove a listener added with on().
   * @template {keyof E & string} K
   * @param {K} name
   * @param {(...args: E[K]) => void} fn
   */
  off(name, fn) {
    this._listeners.get(name)?.delete(fn);
  }

  /**
   * Call the listeners of `name` with `args` (a listener that throws is
   * reported and does not stop the others).
   * @template {keyof E & string} K
   * @param {K} name
   * @param {E[K]} args
   */
  emit(name, ...args) {
    const listeners = this._listeners.get(name);
    if (!listeners) return;
    for (const fn of [...listeners]) {
      try {
        fn(...args);
      } catch (e) {
        console.error(`pushengine: a "${name}" listener failed:`, e);
      }
    }
  }
}
