// What every example page shares: the session and its event transport, the
// connection status, page parameters, online counts.

import {
  Api, Session, Events, Ticker, RpcError, plural, parseTransport, TRANSPORT_NAMES,
  UserCache, setAvatar, userName,
} from "/static/js/pushengine.js";

/** The transport the page asks for: ?transport=ws|sse|longpoll, else "auto". */
export function transportParam() {
  return parseTransport(new URLSearchParams(location.search).get("transport"));
}

/** Keep a forced ?transport= on links to the other example pages. */
function keepTransport(transport) {
  if (transport === "auto") return;
  document.addEventListener("click", (e) => {
    const a = e.target instanceof Element ? e.target.closest("a[href]") : null;
    if (!a) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith("/examples/")) return;
    if (url.searchParams.has("transport")) return;
    url.searchParams.set("transport", transport);
    a.href = url.pathname + url.search + url.hash;
  }, true);
}

/**
 * Create the session and start its events (the transport of ?transport=, or
 * the automatic choice); the status pill follows it and names the transport.
 */
export function connect() {
  const api = new Api();
  const session = new Session(api);
  const transport = transportParam();
  const events = new Events(session, { transport });
  const status = document.getElementById("status");
  if (status) {
    const text = document.createElement("span");
    const via = document.createElement("small");
    via.className = "pe-transport";
    status.replaceChildren(text, via);
    const show = (state, info = {}) => {
      status.dataset.state = state;
      if (state === "connected") text.textContent = "Live updates";
      else if (state === "retrying") text.textContent = `Connection lost, retrying in ${Math.max(1, Math.round(info.delay / 1000))} s`;
      else if (state === "stopped") text.textContent = "Stopped";
      else text.textContent = "Connecting…";
    };
    const showTransport = (name) => {
      status.dataset.transport = name;
      via.textContent = `via ${TRANSPORT_NAMES[name] ?? name}`;
      via.title = transport === "auto" ? "chosen automatically (?transport=ws|sse|longpoll forces one)"
        : "forced by ?transport=";
    };
    show(events.state === "stopped" ? "connecting" : events.state);
    events.on("state", show);
    events.on("transport", showTransport);
  }
  keepTransport(transport);
  // Release the session when the page goes away for good (not into the back/forward cache).
  window.addEventListener("pagehide", (e) => {
    if (!e.persisted) session.destroy({ keepalive: true }).addErrback(() => undefined);
  });
  new Ticker(document.body, 1000).start();
  const users = pageUserCache(api);
  window.pushengine = { api, session, events, users, views: [] };
  events.start();
  return { api, session, events, users };
}

/**
 * The page's user profiles (user.public_profiles, at most 2 loads in flight),
 * each loaded again after ?user_ttl= seconds (default 60). Every period the
 * users the page shows (its views' streams, and those passed to watchUser)
 * whose profile expired are loaded again: a renamed user appears renamed.
 */
const watchedUsers = new Set();

export function watchUser(id) {
  if (id != null) watchedUsers.add(id);
}

function pageUserCache(api) {
  const seconds = Number.parseFloat(new URLSearchParams(location.search).get("user_ttl") ?? "");
  const ttl = Number.isFinite(seconds) && seconds > 0 ? Math.max(0.5, seconds) * 1000 : 60000;
  const users = UserCache.forApi(api, { ttl, concurrency: 2 });
  users.startRefresh(() => {
    const ids = new Set(watchedUsers);
    for (const view of window.pushengine?.views ?? []) {
      for (const s of view.items) if (s.user_id != null) ids.add(s.user_id);
    }
    return ids;
  }, ttl / 2);
  return users;
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
export function mount(view, { emptyText = "Nothing here yet.", onState = null, describeError = describe } = {}) {
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
      notice(describeError(f));
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
export function renderUserChips(container, streams, { exclude = null, max = 12, users = null } = {}) {
  const seen = new Set();
  const items = [];
  for (const s of streams) {
    if (s.user_id == null || seen.has(s.user_id) || s.user_id === exclude) continue;
    seen.add(s.user_id);
    const li = document.createElement("li");
    li.className = "pe-chip";
    const a = document.createElement("a");
    a.href = userHref(s);
    a.dataset.userId = String(s.user_id);
    const avatar = document.createElement("span");
    avatar.className = "pe-avatar";
    avatar.setAttribute("aria-hidden", "true");
    // the profile's name and avatar when the cache has them (it asks for the rest)
    const profile = users ? users.peek(s.user_id) : undefined;
    if (users && !users.isFresh(s.user_id)) users.get(s.user_id).addErrback(() => undefined);
    const name = userName(s.user_id, profile, s.user_name);
    setAvatar(avatar, s.user_id, name, profile?.avatar);
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
