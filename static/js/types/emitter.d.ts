/**
 * A map from event name to the arguments its listeners get.
 * @typedef {Record<string, unknown[]>} EventMap
 */
/**
 * `on`/`off`/`emit` with listeners typed by the event map `E`.
 * @template {EventMap} [E=EventMap]
 */
export class Emitter<E extends EventMap = EventMap> {
    /** @private @type {Map<keyof E, Set<Function>>} */
    private _listeners;
    /**
     * Call `fn` on every `name` event; returns a function that removes it.
     * @template {keyof E & string} K
     * @param {K} name
     * @param {(...args: E[K]) => void} fn
     * @returns {() => void}
     */
    on<K extends keyof E & string>(name: K, fn: (...args: E[K]) => void): () => void;
    /**
     * Remove a listener added with on().
     * @template {keyof E & string} K
     * @param {K} name
     * @param {(...args: E[K]) => void} fn
     */
    off<K extends keyof E & string>(name: K, fn: (...args: E[K]) => void): void;
    /**
     * Call the listeners of `name` with `args` (a listener that throws is
     * reported and does not stop the others).
     * @template {keyof E & string} K
     * @param {K} name
     * @param {E[K]} args
     */
    emit<K extends keyof E & string>(name: K, ...args: E[K]): void;
}
/**
 * A map from event name to the arguments its listeners get.
 */
export type EventMap = Record<string, unknown[]>;
