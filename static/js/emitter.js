// A minimal event emitter: on(name, fn) returns a function that removes fn.

export class Emitter {
  constructor() {
    this._listeners = new Map();
  }

  on(name, fn) {
    if (!this._listeners.has(name)) this._listeners.set(name, new Set());
    this._listeners.get(name).add(fn);
    return () => this.off(name, fn);
  }

  off(name, fn) {
    this._listeners.get(name)?.delete(fn);
  }

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
