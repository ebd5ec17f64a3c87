// Field formatting: UTC timestamps to local time and "5 min ago", durations
// as h:mm:ss, counts as 1.2K; and a ticker that keeps relative times on a page
// current.
//
//   formatAgo("2026-11-30T03:00:00Z")     // "5 min ago"
//   formatLocalTime("2026-11-30T03:00:00Z") // "06:00" in Moscow
//   formatDuration(3725)                   // "1:02:05"
//   formatCount(12345)                     // "12K"
//
//   setAgo(el, stream.created_at, "started ");   // text + tooltip, kept current by
//   new Ticker(document.body).start();           // the ticker

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
export function parseTime(value) {
  if (value === null || value === undefined || value === "") return null;
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value;
  let d;
  if (typeof value === "number") d = new Date(value < 1e12 ? value * 1000 : value);
  else d = new Date(String(value));
  return Number.isNaN(d.getTime()) ? null : d;
}

/**
 * @param {Date} date
 * @param {string | undefined} timeZone
 * @returns {string}
 */
function dayKey(date, timeZone) {
  return new Intl.DateTimeFormat("en-CA", { timeZone, year: "numeric", month: "2-digit", day: "2-digit" })
    .format(date);
}

/**
 * Local time of a timestamp: "14:05" today, "30 Nov, 14:05" this year,
 * "30 Nov 2025, 14:05" before. `locale`/`timeZone` default to the browser's.
 * @param {Timestamp} value
 * @param {{now?: number, locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatLocalTime(value, { now = Date.now(), locale = undefined, timeZone = undefined } = {}) {
  const d = parseTime(value);
  if (d === null) return "";
  const nowDate = new Date(now);
  const time = new Intl.DateTimeFormat(locale, { hour: "2-digit", minute: "2-digit", timeZone }).format(d);
  if (dayKey(d, timeZone) === dayKey(nowDate, timeZone)) return time;
  const sameYear = dayKey(d, timeZone).slice(0, 4) === dayKey(nowDate, timeZone).slice(0, 4);
  const date = new Intl.DateTimeFormat(locale, {
    day: "numeric", month: "short", year: sameYear ? undefined : "numeric", timeZone,
  }).format(d);
  return `${date}, ${time}`;
}

/**
 * The full local date and time (for a tooltip).
 * @param {Timestamp} value
 * @param {{locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatFullTime(value, { locale = undefined, timeZone = undefined } = {}) {
  const d = parseTime(value);
  if (d === null) return "";
  return new Intl.DateTimeFormat(locale, { dateStyle: "medium", timeStyle: "medium", timeZone }).format(d);
}

/**
 * "just now", "5 min ago", "3 h ago", "yesterday", "4 days ago", or the local date.
 * @param {Timestamp} value
 * @param {number} [now]  ms since the epoch
 * @param {{locale?: string, timeZone?: string}} [options]
 * @returns {string}
 */
export function formatAgo(value, now = Date.now(), options = {}) {
  const d = parseTime(value);
  if (d === null) return "";
  const s = Math.round((now - d.getTime()) / 1000);
  if (s < -60) {
    const m = Math.round(-s / 60);
    return m < 60 ? `in ${m} min` : `in ${Math.round(m / 60)} h`;
  }
  if (s < 60) return "just now";
  if (s < 90) return "1 min ago";
  const min = Math.round(s / 60);
  if (min < 60) return `${min} min ago`;
  const h = Math.floor(s / 3600);
  if (h < 24) return `${h} h ago`;
  if (h < 48) return "yesterday";
  const days = Math.floor(h / 24);
  if (days < 30) return `${days} days ago`;
  return formatLocalTime(d, { now, ...options });
}

/**
 * Seconds as h:mm:ss ("0:00:42", "1:02:05", "26:00:00"); "" for no value.
 * @param {number | string | null | undefined} seconds
 * @returns {string}
 */
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(Number(seconds))) return "";
  let s = Math.max(0, Math.floor(Number(seconds)));
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return `${h}:${String(m).padStart(2, "0")}:${String(s).padStart(2, "0")}`;
}

/**
 * Seconds from a timestamp to now (0 when in the future or invalid).
 * @param {Timestamp} value
 * @param {number} [now]
 * @returns {number}
 */
export function elapsedSeconds(value, now = Date.now()) {
  const d = parseTime(value);
  if (d === null) return 0;
  return Math.max(0, Math.floor((now - d.getTime()) / 1000));
}

/**
 * A count in few characters: 999, 1.2K, 12K, 1.2M, 3.4B.
 * @param {number | string | null | undefined} n
 * @returns {string}
 */
export function formatCount(n) {
  const v = Number(n);
  if (!Number.isFinite(v)) return "";
  const sign = v < 0 ? "-" : "";
  const a = Math.abs(Math.round(v));
  /** @type {[number, string][]} */
  const units = [[1e9, "B"], [1e6, "M"], [1e3, "K"]];
  for (const [size, suffix] of units) {
    if (a >= size) {
      const x = a / size;
      const text = x < 10 ? (Math.floor(x * 10) / 10).toFixed(1).replace(/\.0$/, "") : String(Math.floor(x));
      return `${sign}${text}${suffix}`;
    }
  }
  return `${sign}${a}`;
}

/**
 * "1 viewer", "12 viewers", "1.2K viewers".
 * @param {number | string} n
 * @param {string} one
 * @param {string} many
 * @returns {string}
 */
export function plural(n, one, many) {
  return `${formatCount(n)} ${Number(n) === 1 ? one : many}`;
}

// -- live page text ----------------------------------------------------------

/**
 * Show "prefix + N min ago" in `el`, with the local time as tooltip; the Ticker keeps it current.
 * @param {HTMLElement} el
 * @param {Timestamp} value
 * @param {string} [prefix]
 */
export function setAgo(el, value, prefix = "") {
  const d = parseTime(value);
  if (d === null) {
    el.removeAttribute("data-ago");
    el.textContent = "";
    return;
  }
  el.dataset.ago = d.toISOString();
  el.dataset.agoPrefix = prefix;
  el.title = formatFullTime(d);
  el.textContent = prefix + formatAgo(d);
  if (el.tagName === "TIME") el.setAttribute("datetime", d.toISOString());
}

/**
 * Show the time elapsed since `value` as h:mm:ss in `el`; the Ticker keeps it running.
 * @param {HTMLElement} el
 * @param {Timestamp} value
 */
export function setElapsed(el, value) {
  const d = parseTime(value);
  if (d === null) {
    el.removeAttribute("data-elapsed");
    el.textContent = "";
    return;
  }
  el.dataset.elapsed = d.toISOString();
  el.textContent = formatDuration(elapsedSeconds(d));
}

/**
 * Update every setAgo/setElapsed element under `root`.
 * @param {ParentNode} root
 * @param {number} [now]
 */
export function refreshTimes(root, now = Date.now()) {
  for (const el of root.querySelectorAll(/** @type {"html"} */ ("[data-ago]"))) {
    const text = (el.dataset.agoPrefix ?? "") + formatAgo(el.dataset.ago, now);
    if (el.textContent !== text) el.textContent = text;
  }
  for (const el of root.querySelectorAll(/** @type {"html"} */ ("[data-elapsed]"))) {
    const text = formatDuration(elapsedSeconds(el.dataset.elapsed, now));
    if (el.textContent !== text) el.textContent = text;
  }
}

/** Calls refreshTimes(root) every `interval` ms while started. */
export class Ticker {
  /**
   * @param {ParentNode} root
   * @param {number} [interval]  ms
   */
  constructor(root, interval = 1000) {
    this.root = root;
    this.interval = interval;
    /** @private @type {ReturnType<typeof setInterval> | null} */
    this._timer = null;
  }

  start() {
    if (this._timer === null) {
      this._timer = setInterval(() => refreshTimes(this.root), this.interval);
    }
    return this;
  }

  stop() {
    if (this._timer !== null) clearInterval(this._timer);
    this._timer = null;
  }
}
