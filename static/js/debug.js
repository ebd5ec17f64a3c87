// Console debug output for the pushengine client, off by default.
//
// Switch it on with `?debug=1` in the page URL, with
// `localStorage.setItem("pushengine.debug", "1")`, or from code with
// `setDebug(true)`. Every module logs through `logger(name)`.

const STORAGE_KEY = "pushengine.debug";

function initialState() {
  try {
    const search = globalThis.location?.search ?? "";
    const flag = new URLSearchParams(search).get("debug");
    if (flag !== null) return flag !== "0" && flag !== "false";
  } catch (_) { /* no location (node) */ }
  try {
    return globalThis.localStorage?.getItem(STORAGE_KEY) === "1";
  } catch (_) { /* storage disabled */ }
  return false;
}

let enabled = initialState();

/**
 * Turn debug output on or off; `persist` keeps the choice in localStorage.
 * @param {boolean} on
 * @param {boolean} [persist]
 */
export function setDebug(on, persist = false) {
  enabled = Boolean(on);
  if (persist) {
    try {
      if (enabled) globalThis.localStorage?.setItem(STORAGE_KEY, "1");
      else globalThis.localStorage?.removeItem(STORAGE_KEY);
    } catch (_) { /* storage disabled */ }
  }
}

/** Whether debug output is on. */
export function isDebug() {
  return enabled;
}

/**
 * A function that logs `[pushengine:name] ...` when debug is on.
 * @param {string} name
 * @returns {(...args: unknown[]) => void}
 */
export function logger(name) {
  const prefix = `[pushengine:${name}]`;
  return (...args) => {
    if (enabled) console.debug(prefix, ...args);
  };
}
