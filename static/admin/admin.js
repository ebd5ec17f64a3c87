// The admin page: the engine's own client and push, showing the engine.
//
// The page asks for the admin key in a form and keeps it in sessionStorage
// (this tab only). The key travels in the body of the admin.* calls, never
// in a URL. admin.subscribe puts the page's session into the internal view
// of node statistics ("$admin.NodeStats"): every node publishes its figures
// once a second, and their events reach the page over the same transports
// as any view's (WebSocket, SSE or long-polling). ?transport= forces one.

import {
  Api, Session, Events, RpcError, ErrorCode, parseTransport, TRANSPORT_NAMES,
} from "/static/js/pushengine.js";

const STORE = "pushengine.admin.key";
const WINDOW = 300; // seconds of the chart
const STALE_MS = 6000; // no statistics for that long: subscribe again
const $ = (id) => document.getElementById(id);

const api = new Api();
const transport = parseTransport(new URLSearchParams(location.search).get("transport"));
let key = null;
let session = null;
let events = null;
let watchdog = null;
let lastEventAt = 0;

// node id -> {stats, history: [[time, in, out], ...]}
const nodes = new Map();
window.pushengineAdmin = { api, nodes, get session() { return session; }, get events() { return events; } };

// -- signing in and out -------------------------------------------------------

function showLogin(message = "") {
  $("dash").hidden = true;
  $("signout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  setStatus("signed-out", "Signed out");
  $("key").focus();
}

function showDash() {
  $("login").hidden = true;
  $("dash").hidden = false;
  $("signout").hidden = false;
}

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.textContent = text;
}

function describe(failure) {
  const e = failure?.value ?? failure;
  if (e instanceof RpcError) return `${e.message} (${e.code})`;
  return `could not reach the engine: ${e?.message ?? e}`;
}

/** The internal view's handler: the state, then the events of every node. */
const handler = {
  setState(state) {
    nodes.clear();
    for (const stats of state) {
      const { history = [], ...figures } = stats;
      nodes.set(figures.node, { stats: figures, history: history.slice() });
    }
    lastEventAt = Date.now();
    schedule();
  },
  apply(ev) {
    lastEventAt = Date.now();
    if (ev.action === "insert" || ev.action === "update") {
      const stats = ev.obj;
      const entry = nodes.get(stats.node) ?? { stats, history: [] };
      entry.stats = stats;
      entry.history.push([stats.time, stats.in_rate, stats.out_rate]);
      const oldest = stats.time - WINDOW - 5;
      while (entry.history.length && entry.history[0][0] < oldest) entry.history.shift();
      nodes.set(stats.node, entry);
    } else if (ev.action === "delete") {
      nodes.delete(ev.obj.node ?? ev.obj.id);
    } else if (ev.action === "reset") {
      this.setState(ev.obj ?? []);
      return;
    } else {
      return;
    }
    schedule();
  },
  onError(failure) {
    signOut(`The engine refused the admin view: ${describe(failure)}`);
  },
};

function signIn(given) {
  key = given;
  $("login-error").textContent = "";
  setStatus("connecting", "Connecting…");
  session = new Session(api);
  events = new Events(session, { transport });
  events.on("state", (state, info) => {
    if (state === "connected") setStatus("connected", `Live · ${TRANSPORT_NAMES[events.transport] ?? ""}`);
    else if (state === "retrying") setStatus("retrying", `Connection lost, retrying in ${Math.max(1, Math.round(info.delay / 1000))} s`);
    else if (state === "connecting") setStatus("connecting", "Connecting…");
  });
  session.subscribe("admin.subscribe", [key], handler).addCallbacks(
    () => {
      sessionStorage.setItem(STORE, key);
      showDash();
      events.start();
      startWatchdog();
    },
    (f) => {
      const e = f?.value;
      const refused = e instanceof RpcError
        && (e.code === ErrorCode.NOT_AUTHORIZED || e.code === 1007);
      signOut(refused ? `The engine refused: ${e.message}` : `Cannot open the admin view: ${describe(f)}`,
        { forget: refused });
    },
  );
}

function signOut(message = "", { forget = true } = {}) {
  if (forget) sessionStorage.removeItem(STORE);
  key = null;
  clearInterval(watchdog);
  watchdog = null;
  if (session) session.destroy({ keepalive: true }).addErrback(() => undefined);
  session = null;
  events = null;
  nodes.clear();
  showLogin(message);
}

/**
 * The statistics come every second. When they stop while the transport says
 * it is connected (the session was resumed on another node, which does not
 * know the page), subscribe again.
 */
function startWatchdog() {
  clearInterval(watchdog);
  watchdog = setInterval(() => {
    if (!session || !events || events.state !== "connected") return;
    if (Date.now() - lastEventAt < STALE_MS) return;
    lastEventAt = Date.now();
    session.call("admin.subscribe", [key]).addCallbacks(
      ([, state]) => handler.setState(state),
      (f) => setStatus("retrying", `Statistics interrupted: ${describe(f)}`),
    );
  }, 2000);
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const given = $("key").value;
  $("key").value = "";
  if (given) signIn(given);
});

$("signout").addEventListener("click", () => signOut());

window.addEventListener("resize", () => schedule());

window.addEventListener("pagehide", (e) => {
  if (!e.persisted && session) session.destroy({ keepalive: true }).addErrback(() => undefined);
});

// -- drawing --------------------------------------------------------------------------

let scheduled = false;
function schedule() {
  if (scheduled) return;
  scheduled = true;
  setTimeout(() => {
    scheduled = false;
    render();
  }, 30);
}

const number = new Intl.NumberFormat("en-GB", { maximumFractionDigits: 1 });
const fmt = (n) => (typeof n === "number" && Number.isFinite(n) ? number.format(n) : "–");

function el(tag, { text = null, cls = null, data = null, title = null } = {}, children = []) {
  const node = document.createElement(tag);
  if (text !== null) node.textContent = text;
  if (cls) node.className = cls;
  if (title) node.title = title;
  if (data) for (const [k, v] of Object.entries(data)) node.dataset[k] = v;
  node.append(...children);
  return node;
}

function setText(id, text) {
  const node = $(id);
  if (node.textContent !== text) node.textContent = text;
}

function render() {
  const all = [...nodes.values()].map((n) => n.stats);
  const sum = (field) => all.reduce((total, s) => total + (Number(s[field]) || 0), 0);
  setText("total-nodes", fmt(all.length));
  setText("total-sessions", fmt(sum("sessions")));
  const admins = sum("admin_pages");
  setText("total-admin", admins ? `${fmt(admins)} of them admin pages` : "");
  setText("total-streams", fmt(sum("streams")));
  setText("total-waiting", fmt(sum("waiting")));
  setText("total-subscriptions", fmt(sum("subscriptions")));
  setText("total-views", `${fmt(sum("views"))} view instances`);
  setText("rate-in", fmt(sum("in_rate")));
  setText("rate-out", fmt(sum("out_rate")));
  setText("total-in", `${fmt(sum("events_in"))} in all`);
  setText("total-out", `${fmt(sum("events_out"))} in all`);
  renderNodes(all);
  renderViews(all);
  renderChart();
}

/** A component's state as a badge: its kind (green when up, red and "down" when not). */
function badge(state) {
  if (!state || state.kind === "none") return el("span", { text: "not used", cls: "ad-badge ad-off", data: { up: "none" } });
  let text = state.kind ?? state.backend ?? "up";
  if (state.backend === "memcached" && state.servers_total) text = `${state.servers_up}/${state.servers_total} servers`;
  if (!state.up) text += " down";
  const title = [state.up ? "up" : "down", state.state, state.error, state.broker ?? state.server]
    .filter(Boolean).join(" · ");
  return el("span", { text, cls: `ad-badge ${state.up ? "ad-up" : "ad-down"}`, title, data: { up: String(Boolean(state.up)) } });
}

function uptime(stats) {
  const s = Math.max(0, Math.round(stats.time - stats.started));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function renderNodes(all) {
  const rows = all.sort((a, b) => String(a.node).localeCompare(String(b.node))).map((s) => el("tr", { data: { node: s.node } }, [
    el("td", { text: s.node, cls: "ad-key" }),
    el("td", { text: fmt(s.sessions), cls: "n", data: { field: "sessions" } }),
    el("td", { text: fmt(s.streams), cls: "n", data: { field: "streams" } }),
    el("td", { text: fmt(s.waiting), cls: "n", data: { field: "waiting" } }),
    el("td", { text: fmt(s.in_rate), cls: "n" }),
    el("td", { text: fmt(s.out_rate), cls: "n" }),
    el("td", { data: { field: "feed" } }, [badge(s.feed)]),
    el("td", { data: { field: "memcache" } }, [badge(s.memcache)]),
    el("td", { data: { field: "redis" } }, [badge(s.redis)]),
    el("td", { text: uptime(s), cls: "n" }),
  ]));
  $("nodes").tBodies[0].replaceChildren(...rows);
}

function renderViews(all) {
  const counts = new Map();
  for (const s of all) {
    for (const { key: viewKey, subscribers } of s.busiest ?? []) {
      counts.set(viewKey, (counts.get(viewKey) ?? 0) + subscribers);
    }
  }
  const top = [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 10);
  $("views").tBodies[0].replaceChildren(...top.map(([viewKey, n]) => el("tr", { data: { key: viewKey } }, [
    el("td", { text: viewKey, cls: "ad-key", title: viewKey }),
    el("td", { text: fmt(n), cls: "n" }),
  ])));
  $("views-empty").hidden = top.length > 0;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

/** A round upper bound for the y axis. */
function niceMax(value) {
  if (value <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function renderChart() {
  // every node's points, summed per second
  const perSecond = new Map();
  let end = 0;
  for (const { history } of nodes.values()) {
    for (const [t, rin, rout] of history) {
      const second = Math.round(t);
      const point = perSecond.get(second) ?? [0, 0];
      point[0] += rin;
      point[1] += rout;
      perSecond.set(second, point);
      end = Math.max(end, second);
    }
  }
  const chart = $("chart");
  const W = Math.max(320, Math.round(chart.clientWidth || 900));
  const H = 220;
  chart.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const left = 48;
  const bottom = 22;
  const top = 10;
  const start = end - WINDOW;
  const points = [...perSecond].filter(([t]) => t >= start).sort((a, b) => a[0] - b[0]);
  const ymax = niceMax(Math.max(0, ...points.map(([, p]) => Math.max(p[0], p[1]))) * 1.1);
  const x = (t) => left + ((t - start) / WINDOW) * (W - left - 8);
  const y = (v) => top + (1 - v / ymax) * (H - top - bottom);
  const parts = [];
  for (let i = 0; i <= 4; i += 1) {
    const v = (ymax * i) / 4;
    parts.push(svg("line", { x1: left, x2: W - 8, y1: y(v), y2: y(v), class: "ad-grid" }));
    parts.push(svg("text", { x: left - 6, y: y(v) + 4, class: "ad-axis", "text-anchor": "end" }, fmt(v)));
  }
  for (let m = 0; m <= WINDOW / 60; m += 1) {
    const t = start + m * 60;
    const label = m === WINDOW / 60 ? "now" : `−${WINDOW / 60 - m} min`;
    parts.push(svg("text", { x: x(t), y: H - 5, class: "ad-axis", "text-anchor": m === 0 ? "start" : m === WINDOW / 60 ? "end" : "middle" }, label));
  }
  for (const [index, cls] of [[0, "ad-line-in"], [1, "ad-line-out"]]) {
    if (points.length === 0) continue;
    const path = points.map(([t, p]) => `${x(t).toFixed(1)},${y(p[index]).toFixed(1)}`).join(" ");
    parts.push(svg("polyline", { points: path, class: cls, "data-series": index ? "out" : "in" }));
  }
  chart.replaceChildren(...parts);
}

// -- publishing and looking up -------------------------------------------------------------

function exampleChange() {
  const id = 900000 + Math.floor(Math.random() * 99999);
  return JSON.stringify([{ type: "Stream", action: "upsert", obj: {
    id, title: "Published from the admin page", user_id: 1, live: true, public: true,
    created_at: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
  } }], null, 2);
}
$("change").value = exampleChange();

$("publish-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const result = $("publish-result");
  let changes;
  try {
    changes = JSON.parse($("change").value);
  } catch (err) {
    result.dataset.ok = "false";
    result.textContent = `Not JSON: ${err.message}`;
    return;
  }
  result.dataset.ok = "";
  result.textContent = "Publishing…";
  api.call("admin.publish", [key, changes]).addCallbacks(
    ({ accepted }) => {
      result.dataset.ok = "true";
      result.textContent = `Accepted ${accepted} change${accepted === 1 ? "" : "s"}.`;
    },
    (f) => {
      result.dataset.ok = "false";
      result.textContent = `Refused: ${describe(f)}`;
    },
  );
});

function lookupTable(found) {
  const info = el("dl", { cls: "ad-info" }, [
    el("dt", { text: "Node" }), el("dd", { text: `${found.node}${found.here ? "" : " (from the registry)"}`, data: { field: "node" } }),
    el("dt", { text: "User" }), el("dd", { text: found.user === null ? "anonymous" : String(found.user), data: { field: "user" } }),
    el("dt", { text: "Delivery" }), el("dd", { text: found.delivery ?? "none attached", data: { field: "delivery" } }),
    el("dt", { text: "Last seq" }), el("dd", { text: fmt(found.last_seq) }),
    el("dt", { text: "Queued" }), el("dd", { text: found.queued === null ? "–" : fmt(found.queued) }),
  ]);
  const rows = found.subscriptions.map((s) => el("tr", { data: { key: s.key } }, [
    el("td", { text: s.key, cls: "ad-key", title: s.key }),
    el("td", { text: s.limit === null ? "–" : fmt(s.limit), cls: "n" }),
    el("td", { text: s.objects === null ? "–" : fmt(s.objects), cls: "n" }),
    el("td", { text: s.subscribers === null ? "–" : fmt(s.subscribers), cls: "n" }),
  ]));
  const table = el("table", { cls: "ad-table", data: { role: "subscriptions" } }, [
    el("thead", {}, [el("tr", {}, [el("th", { text: "Subscription" }), el("th", { text: "Limit", cls: "n" }),
      el("th", { text: "Objects", cls: "n" }), el("th", { text: "Subscribers", cls: "n" })])]),
    el("tbody", {}, rows),
  ]);
  const none = el("p", { cls: "ad-empty", text: "No subscriptions." });
  return [info, rows.length ? table : none];
}

$("lookup-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const out = $("lookup-result");
  const sid = $("sid").value.trim();
  if (!sid) return;
  out.replaceChildren(el("p", { text: "Looking up…", cls: "ad-empty" }));
  api.call("admin.session", [key, sid]).addCallbacks(
    (found) => {
      out.dataset.sid = sid;
      out.replaceChildren(...(found === null
        ? [el("p", { cls: "ad-error", text: "No such session on any node the engine knows of." })]
        : lookupTable(found)));
    },
    (f) => out.replaceChildren(el("p", { cls: "ad-error", text: `Refused: ${describe(f)}` })),
  );
});

// -- start -------------------------------------------------------------------------------------

const kept = sessionStorage.getItem(STORE);
if (kept) signIn(kept);
else showLogin();
