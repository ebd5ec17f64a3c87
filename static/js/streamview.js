// Views of Stream objects rendered as cards: thumbnail (or a generated
// placeholder), live badge, running time or duration, title, user, how long
// ago it started or ended, viewers. One class per default Stream view.
//
//   const view = new LiveStreamsView({ container, session, limit: 10 });
//   view.subscribe();
//
// Options besides View's: `userHref(stream)` makes the user name a link.

import { View } from "./view.js";
import { formatDuration, plural, setAgo, setElapsed } from "./updater.js";

function el(doc, tag, className, text) {
  const node = doc.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A stable hue (0-359) for a value, for placeholders; neighbouring ids get distant hues. */
export function hueFor(value) {
  const s = String(value);
  let h = 0x811c9dc5; // FNV-1a
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return Math.floor(((h * 0.6180339887) % 1) * 360);
}

/** The first letter or digit of a text, upper-cased ("?" when none). */
export function initialOf(text) {
  const m = String(text ?? "").match(/[\p{L}\p{N}]/u);
  return m ? m[0].toUpperCase() : "?";
}

export class StreamView extends View {
  constructor({ userHref = null, ...options } = {}) {
    super({ order: "-created_at", ...options });
    this.userHref = userHref;
  }

  renderItem(stream) {
    const doc = this.container.ownerDocument;
    const li = el(doc, "li", "pe-card");
    const thumb = el(doc, "div", "pe-thumb");
    const badge = el(doc, "span", "pe-badge pe-live-badge", "LIVE");
    const time = el(doc, "span", "pe-badge pe-time");
    thumb.append(el(doc, "div", "pe-thumb-image"), badge, time);
    const meta = el(doc, "div", "pe-meta");
    const title = el(doc, "h3", "pe-title");
    const user = el(doc, this.userHref ? "a" : "span", "pe-user");
    const facts = el(doc, "div", "pe-facts");
    facts.append(el(doc, "time", "pe-ago"), el(doc, "span", "pe-viewers"));
    meta.append(title, user, facts);
    li.append(thumb, meta);
    this.fill(li, stream, null);
    return li;
  }

  updateItem(node, stream, old) {
    this.fill(node, stream, old);
  }

  /** Write a stream's fields into its card (all of them, or those that changed). */
  fill(li, s, old) {
    li.dataset.id = String(s.id);
    li.classList.toggle("pe-is-live", Boolean(s.live));
    const q = (sel) => li.querySelector(sel);
    if (!old || old.thumbnail !== s.thumbnail || old.title !== s.title || old.id !== s.id) {
      this.fillThumbnail(q(".pe-thumb-image"), s);
    }
    q(".pe-title").textContent = s.title ?? "";
    q(".pe-title").title = s.title ?? "";
    const user = q(".pe-user");
    user.textContent = s.user_name ?? (s.user_id != null ? `user ${s.user_id}` : "");
    if (this.userHref) {
      const href = this.userHref(s);
      if (href) user.setAttribute("href", href);
      else user.removeAttribute("href");
    }
    const time = q(".pe-time");
    if (s.live) {
      setElapsed(time, s.created_at);
      setAgo(q(".pe-ago"), s.created_at, "started ");
    } else {
      time.removeAttribute("data-elapsed");
      time.textContent = s.duration ? formatDuration(s.duration) : "";
      setAgo(q(".pe-ago"), s.ended_at ?? s.created_at, s.ended_at ? "ended " : "");
    }
    time.hidden = time.textContent === "";
    q(".pe-viewers").textContent = s.viewers == null ? ""
      : plural(s.viewers, s.live ? "watching" : "viewer", s.live ? "watching" : "viewers");
  }

  fillThumbnail(box, s) {
    const doc = box.ownerDocument;
    box.replaceChildren();
    const placeholder = () => {
      const ph = el(doc, "div", "pe-placeholder");
      ph.style.setProperty("--hue", String(hueFor(s.id)));
      ph.append(el(doc, "span", null, initialOf(s.title || s.user_name)));
      return ph;
    };
    if (s.thumbnail) {
      const img = el(doc, "img");
      img.alt = "";
      img.loading = "lazy";
      img.decoding = "async";
      img.addEventListener("error", () => img.replaceWith(placeholder()), { once: true });
      img.src = s.thumbnail;
      box.append(img);
    } else {
      box.append(placeholder());
    }
  }
}

/** Live public streams, newest first. */
export class LiveStreamsView extends StreamView {
  constructor(options = {}) {
    super({ method: "stream.subscribe_public_live", ...options });
  }
}

/** Ended public streams, newest first. */
export class RecentStreamsView extends StreamView {
  constructor(options = {}) {
    super({ method: "stream.subscribe_public_recent", ...options });
  }
}

/** One user's public streams. */
export class UserStreamsView extends StreamView {
  constructor({ userId, ...options }) {
    super({ method: "stream.subscribe_user", params: [userId], ...options });
    this.userId = userId;
  }
}

/** Public streams whose title has a word (in any inflected form). */
export class WordStreamsView extends StreamView {
  constructor({ word, ...options }) {
    super({ method: "stream.subscribe_word", params: [word], ...options });
    this.word = word;
  }
}

/** Public streams within `km` of a place. */
export class NearStreamsView extends StreamView {
  constructor({ lat, lon, km, ...options }) {
    super({ method: "stream.subscribe_near", params: [lat, lon, km], ...options });
  }
}

/** The home stream of an authorized session: own and followed users' streams. */
export class HomeStreamsView extends StreamView {
  constructor({ users, ...options }) {
    super({ method: "stream.subscribe_home", params: [users], ...options });
  }
}
