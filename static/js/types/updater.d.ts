/**
 * A timestamp as the engine sends it: an ISO 8601 string (UTC, "Z"), seconds
 * (below 1e12) or milliseconds since the epoch, or a Date.
 * @typedef {string | number | Date | null | undefined} Timestamp
 */
/**
 * A Date for an engine timestamp: an ISO 8601 string (UTC, "Z"), or a number
 * of seconds (below 1e12) or milliseconds since the epoch. null when invalid.
 * @param {Timestamp} value
 * @returns {Date | null}
 */
export function parseTime(value: Timestamp): Date | null;
/**
 * Local time of a timestamp: "14:05" today, "30 Nov, 14:05" this year,
 * "30 Nov 2025, 14:05" before. `locale`/`timeZone` default to the browser's.
 * @param {Timestamp} value
 * @param {{now?: number, locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatLocalTime(value: Timestamp, { now, locale, timeZone }?: {
    now?: number;
    locale?: string;
    timeZone?: string;
}): string;
/**
 * The full local date and time (for a tooltip).
 * @param {Timestamp} value
 * @param {{locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatFullTime(value: Timestamp, { locale, timeZone }?: {
    locale?: string;
    timeZone?: string;
}): string;
/**
 * "just now", "5 min ago", "3 h ago", "yesterday", "4 days ago", or the local date.
 * @param {Timestamp} value
 * @param {number} [now]  ms since the epoch
 * @param {{locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatAgo(value: Timestamp, now?: number, options?: {
    locale?: string;
    timeZone?: string;
}): string;
/**
 * Seconds as h:mm:ss ("0:00:42", "1:02:05", "26:00:00"); "" for no value.
 * @param {number | string | null | undefined} seconds
 * @returns {string}
 */
export function formatDuration(seconds: number | string | null | undefined): string;
/**
 * Seconds from a timestamp to now (0 when in the future or invalid).
 * @param {Timestamp} value
 * @param {number} [now]
 * @returns {number}
 */
export function elapsedSeconds(value: Timestamp, now?: number): number;
/**
 * A count in few characters: 999, 1.2K, 12K, 1.2M, 3.4B.
 * @param {number | string | null | undefined} n
 * @returns {string}
 */
export function formatCount(n: number | string | null | undefined): string;
/**
 * "1 viewer", "12 viewers", "1.2K viewers".
 * @param {number | string} n
 * @param {string} one
 * @param {string} many
 * @returns {string}
 */
export function plural(n: number | string, one: string, many: string): string;
/**
 * Show "prefix + N min ago" in `el`, with the local time as tooltip; the Ticker keeps it current.
 * @param {HTMLElement} el
 * @param {Timestamp} value
 * @param {string} [prefix]
 */
export function setAgo(el: HTMLElement, value: Timestamp, prefix?: string): void;
/**
 * Show the time elapsed since `value` as h:mm:ss in `el`; the Ticker keeps it running.
 * @param {HTMLElement} el
 * @param {Timestamp} value
 */
export function setElapsed(el: HTMLElement, value: Timestamp): void;
/**
 * Update every setAgo/setElapsed element under `root`.
 * @param {ParentNode} root
 * @param {number} [now]
 */
export function refreshTimes(root: ParentNode, now?: number): void;
/** Calls refreshTimes(root) every `interval` ms while started. */
export class Ticker {
    /**
     * @param {ParentNode} root
     * @param {number} [interval]  ms
     */
    constructor(root: ParentNode, interval?: number);
    root: ParentNode;
    interval: number;
    /** @private @type {ReturnType<typeof setInterval> | null} */
    private _timer;
    start(): this;
    stop(): void;
}
/**
 * A timestamp as the engine sends it: an ISO 8601 string (UTC, "Z"), seconds
 * (below 1e12) or milliseconds since the epoch, or a Date.
 */
export type Timestamp = string | number | Date | null | undefined;
