// What every example page shares: the session and its poll loop, the
// connection status, page parameters, online counts.

import { Api, Session, Events, Ticker, RpcError, plural, initialOf, hueFor } from "/static/js/pushengine.js";

/** Create the session and start its poll loop; the status pill follows it. */
export function connect() {
  const api = new Api();
  const session = new Session(api);
  const events = new Events(session);
  const status = document.getElementById("status");
  if (status) {
    const text = document.createElement("span");
    status.replaceChildren(text);
    const show = (state, info = {}) => {
      status.dataset.state = state;
      if (state === "connected") text.textContent = "Live updates";
      else if (state === "retrying") text.textContent = `Connection lost, retrying in ${Math.max(1, Math.round(info.delay / 1000))} s`;
      else if (state === "stopped") text.textContent = "Stopped";
      else text.textContent = "Connecting…";
    };
    show(events.state === "stopped" ? "connecting" : events.state);
    events.on("state", show);
  }
  // Release the session when the page goes away for good (not into the back/forward cache).
  window.addEventListener("pagehide", (e) => {
    if (!e.persisted) session.destroy({ keepalive: true }).addErrback(() => undefined);
  });
  new Ticker(document.body, 1000).start();
  window.pushengine = { api, session, events, views: [] };
  events.start();
  return { api, session, events };
}

/** An integer page parameter within [min, max]. */
export function intParam(name, fallback, min, max) {
  const v = Number.parseInt(new URLSearchParams(location.search).get(name) ?? "", 10);
  if (!Number.isFinite(v)) return fallback;
  return Math.min(max, Math.max(min, v));
}

export function textParam(name) {
  return (new URLSearchParams(location.search).get(name) ?? "").trim();
}

/** Where a user's name links to. */
export function userHref(stream) {
  return stream.user_id == null ? null : `/examples/user.html?user=${encodeURIComponent(stream.user_id)}`;
}

/** A message for a failed call. */
export function describe(failure) {
  const e = failure?.value ?? failure;
  if (e instanceof RpcError) return `The engine refused: ${e.message} (${e.code})`;
  return `Could not reach the engine: ${e?.message ?? e}`;
}

/** Show a message in the page's notice box (empty: hide it). */
export function notice(message) {
  const box = document.getElementById("notice");
  if (box) box.textContent = message ?? "";
}

/**
 * Subscribe a view and wire it to the page: the empty text once the state is
 * there, errors in the notice box, and the view listed in window.pushengine.
 */
export function mount(view, { emptyText = "Nothing here yet.", onState = null } = {}) {
  window.pushengine?.views.push(view);
  const container = view.container;
  if (container) container.dataset.empty = "Loading…";
  view.on("change", (ev) => {
    if (container) container.dataset.empty = emptyText;
    if (ev.action === "state" && onState) onState(view);
  });
  view.on("error", (f) => notice(describe(f)));
  return view.subscribe().addCallbacks(
    (sub) => {
      notice("");
      return sub;
    },
    (f) => {
      notice(describe(f));
      if (container) container.dataset.empty = "Not available.";
      return undefined;
    },
  );
}

/**
 * Keep `el` showing how many sessions watch the view `getView()` returns
 * (stats.online with its key; without getView: the whole service), every
 * 30 s. Returns the update function, to call when the view changed.
 */
export function showOnline(api, getView, el, { every = 30000 } = {}) {
  if (!el) return () => undefined;
  const update = () => {
    const view = getView ? getView() : null;
    const key = view ? view.key : null;
    if (getView && !key) return;
    api.call("stats.online", key ? [key] : []).addCallbacks(
      (n) => {
        el.textContent = view ? plural(n, "person watching this list", "people watching this list")
          : plural(n, "session online", "sessions online");
      },
      () => { el.textContent = ""; },
    );
  };
  setInterval(update, every);
  update();
  return update;
}

/** Render the distinct users of a list of streams as links (chips). */
export function renderUserChips(container, streams, { exclude = null, max = 12 } = {}) {
  const seen = new Set();
  const items = [];
  for (const s of streams) {
    if (s.user_id == null || seen.has(s.user_id) || s.user_id === exclude) continue;
    seen.add(s.user_id);
    const li = document.createElement("li");
    li.className = "pe-chip";
    const a = document.createElement("a");
    a.href = userHref(s);
    const avatar = document.createElement("span");
    avatar.className = "pe-avatar";
    avatar.style.setProperty("--hue", String(hueFor(s.user_id)));
    const name = s.user_name || `user ${s.user_id}`;
    avatar.textContent = initialOf(name);
    a.append(avatar, name);
    li.append(a);
    items.push(li);
    if (items.length >= max) break;
  }
  container.replaceChildren(...items);
}

/**
 * A limit selector: shows `limit`, and on change calls `onChange(newLimit)`
 * and puts ?limit= into the address (no reload).
 */
export function limitControl(select, limit, onChange) {
  if (!select) return;
  if (![...select.options].some((o) => Number(o.value) === limit)) {
    select.add(new Option(String(limit), String(limit)));
  }
  select.value = String(limit);
  select.addEventListener("change", () => {
    const n = Number(select.value);
    const url = new URL(location.href);
    url.searchParams.set("limit", String(n));
    history.replaceState(null, "", url);
    onChange(n);
  });
}

/** Unsubscribe `old` (if any) and mount the view `make()` builds in its place. */
export function replaceView(old, make, options) {
  if (old) {
    old.unsubscribe()?.addErrback(() => undefined);
    const list = window.pushengine?.views;
    if (list && list.includes(old)) list.splice(list.indexOf(old), 1);
  }
  const view = make();
  mount(view, options);
  return view;
}
