/**
 * Turn debug output on or off; `persist` keeps the choice in localStorage.
 * @param {boolean} on
 * @param {boolean} [persist]
 */
export function setDebug(on: boolean, persist?: boolean): void;
/** Whether debug output is on. */
export function isDebug(): boolean;
/**
 * A function that logs `[pushengine:name] ...` when debug is on.
 * @param {string} name
 * @returns {(...args: unknown[]) => void}
 */
export function logger(name: string): (...args: unknown[]) => void;
