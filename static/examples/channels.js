// A channel of the channels recipe (docs/recipes/channels.yaml): its newest
// messages, newest first, kept current by the engine. The page never
// publishes to the engine itself — a page cannot hold the publish key, and
// /api/publish refuses any request with an Origin — it posts what the form
// holds to a path of the site's backend (?send=), which checks it and
// publishes with the key (docs/recipes/channels_backend.py is such a
// backend). Without ?send= the page only reads.
import { View, setAvatar, formatLocalTime, formatFullTime } from "/static/js/pushengine.js";
import { connect, mount, notice, showOnline, textParam } from "./common.js";

const CHANNEL = /^[A-Za-z0-9_.-]{1,64}$/;
const LIMIT = 50;

/** A message as a list item: avatar, author, local time, text (as text, never HTML). */
class ChannelView extends View {
  renderItem(m) {
    const li = document.createElement("li");
    li.className = "pe-message";
    li.dataset.id = String(m.id);
    const avatar = document.createElement("span");
    avatar.className = "pe-avatar";
    avatar.setAttribute("aria-hidden", "true");
    const head = document.createElement("div");
    head.className = "pe-message-head";
    const author = document.createElement("span");
    author.className = "pe-message-author";
    const time = document.createElement("time");
    time.className = "pe-message-time";
    head.append(author, time);
    const text = document.createElement("p");
    text.className = "pe-message-text";
    li.append(avatar, head, text);
    this.updateItem(li, m);
    return li;
  }

  updateItem(li, m) {
    const name = typeof m.author === "string" && m.author ? m.author : "someone";
    setAvatar(li.querySelector(".pe-avatar"), name, name, null);
    li.querySelector(".pe-message-author").textContent = name;
    const time = li.querySelector(".pe-message-time");
    const when = Number.isFinite(m.sent_at) ? new Date(m.sent_at).toISOString() : null;
    time.dateTime = when ?? "";
    time.textContent = when ? formatLocalTime(when) : "";
    time.title = when ? formatFullTime(when) : "";
    li.querySelector(".pe-message-text").textContent = typeof m.text === "string" ? m.text : "";
    return li;
  }
}

/**
 * Where the form posts: a path of this site ("/chat/send"), or for a demo a
 * backend on this machine (http://127.0.0.1:9000/send). Anything else is
 * ignored, so that a link cannot make the page send what people type elsewhere.
 */
export function sendTarget(value) {
  if (!value) return null;
  if (value.startsWith("/") && !value.startsWith("//")) return value;
  try {
    const url = new URL(value);
    if (url.protocol === "http:" && ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)) return url.href;
  } catch {
    // not a URL
  }
  return null;
}

const { api, session } = connect();
const channel = CHANNEL.test(textParam("channel")) ? textParam("channel") : "general";
document.getElementById("channel-name").textContent = channel;
document.getElementById("channel").value = channel;
document.title = `#${channel} · pushengine`;

const view = new ChannelView({
  container: document.getElementById("list"), session, method: "channel.subscribe",
  params: [channel], limit: LIMIT, order: "-sent_at",
});
const online = showOnline(api, () => view, document.getElementById("online"));
mount(view, { emptyText: "No messages yet. New ones appear here by themselves.", onState: () => online() })
  .addCallback((sub) => {
    if (!sub) {
      // the node has no ChannelView (1002): say how to start one that has
      notice("This node has no channels: start it with --views docs/recipes/channels.yaml.");
    }
    return sub;
  });

document.getElementById("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  const next = document.getElementById("channel").value.trim();
  if (!CHANNEL.test(next)) {
    notice("A channel name is 1 to 64 letters, digits, '_', '.' or '-'.");
    return;
  }
  const url = new URL(location.href);
  url.searchParams.set("channel", next);
  location.assign(url);
});

const target = sendTarget(textParam("send"));
const form = document.getElementById("send");
if (target) {
  form.hidden = false;
  const author = document.getElementById("author");
  author.value = localStorage.getItem("pe-channel-author") ?? "";
  const text = document.getElementById("text");
  const state = document.getElementById("send-state");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    state.textContent = "Sending…";
    localStorage.setItem("pe-channel-author", author.value);
    try {
      const response = await fetch(target, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        credentials: "include",
        body: JSON.stringify({ channel, author: author.value, text: text.value }),
      });
      const answer = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error(answer.error ?? `HTTP ${response.status}`);
      text.value = "";
      state.textContent = "";   // the message arrives through the engine, like everyone's
    } catch (error) {
      state.textContent = `Not sent: ${error.message}`;
    }
  });
} else {
  document.getElementById("read-only").hidden = false;
}
