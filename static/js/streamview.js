// Views of Stream objects rendered as cards: thumbnail (or a generated
// placeholder), live badge, running time or duration, title, user, how long
// ago it started or ended, viewers. One class per default Stream view.
//
//   const view = new LiveStreamsView({ container, session, limit: 10 });
//   view.subscribe();
//
// Options besides View's: `userHref(stream)` makes the user name a link;
// `userCache` (a UserCache) shows each stream's user by the profile's name and
// avatar (user.public_profiles), falling back on the stream's `user_name`,
// and follows the cache's changes (a renamed user is shown renamed once the
// cache reloads the profile).
//
// For a Stream view without a class of its own (streams near a place, a
// user's home stream), give StreamView the method and params:
//   new StreamView({ container, session, method: "stream.subscribe_near", params: [lat, lon, km] });

import { View } from "./view.js";
import { formatDuration, plural, setAgo, setElapsed } from "./updater.js";

/** @typedef {import("./session.js").UserId} UserId */
/** @typedef {import("./usercache.js").UserCache} UserCache */
/** @typedef {import("./usercache.js").Profile} Profile */

/**
 * A Stream object of the default views file.
 * @typedef {object} Stream
 * @property {string | number} id
 * @property {string} [title]
 * @property {UserId | null} [user_id]
 * @property {string} [user_name]
 * @property {boolean} [live]
 * @property {boolean} [public]
 * @property {string | number} [created_at]  UTC (ISO 8601), or seconds/ms since the epoch
 * @property {string | number | null} [ended_at]
 * @property {number | null} [duration]  seconds
 * @property {number | null} [viewers]
 * @property {string | null} [thumbnail]  an image URL
 */

/**
 * The options of a StreamView: those of View, and
 * @typedef {object} StreamViewExtras
 * @property {((stream: Stream) => string | null) | null} [userHref]  makes the user name a link
 * @property {UserCache | null} [userCache]  shows users by their profiles
 */
/** @typedef {import("./view.js").ViewOptions<Stream> & StreamViewExtras} StreamViewOptions */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {Document} doc
 * @param {K} tag
 * @param {string | null} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
function el(doc, tag, className, text) {
  const node = doc.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * A stable hue (0-359) for a value, for placeholders; neighbouring ids get distant hues.
 * @param {unknown} value
 * @returns {number}
 */
export function hueFor(value) {
  const s = String(value);
  let h = 0x811c9dc5; // FNV-1a
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return Math.floor(((h * 0.6180339887) % 1) * 360);
}

/**
 * The first letter or digit of a text, upper-cased ("?" when none).
 * @param {string | null | undefined} text
 * @returns {string}
 */
export function initialOf(text) {
  const m = String(text ?? "").match(/[\p{L}\p{N}]/u);
  return m ? m[0].toUpperCase() : "?";
}

/**
 * An avatar URL the page may load: data: images, http(s), or the site's own paths.
 * @param {unknown} url
 * @returns {url is string}
 */
function usableAvatar(url) {
  return typeof url === "string" && /^(data:image\/|https?:\/\/|\/(?!\/))/i.test(url);
}

/**
 * Show a user's avatar in `span` (class pe-avatar): the profile's image when
 * it has one, over the name's initial on a colour of the user's own (drawn by
 * CSS from data-initial, so the text of the element stays the name).
 * @param {HTMLElement} span
 * @param {UserId | null} userId
 * @param {string} name
 * @param {string | null} [url]
 */
export function setAvatar(span, userId, name, url = null) {
  span.style.setProperty("--hue", String(hueFor(userId ?? name)));
  span.dataset.initial = initialOf(name);
  let img = span.querySelector("img");
  if (usableAvatar(url)) {
    if (!img) {
      const made = span.ownerDocument.createElement("img");
      made.alt = "";
      made.decoding = "async";
      made.addEventListener("error", () => made.remove(), { once: true });
      span.append(made);
      img = made;
    }
    if (img.getAttribute("src") !== url) img.src = url;
  } else if (img) {
    img.remove();
  }
}

/**
 * The name to show for a user: the profile's, else the object's user_name, else "user <id>".
 * @param {UserId | null | undefined} userId
 * @param {Profile | undefined} profile
 * @param {string | null} [fallback]
 * @returns {string}
 */
export function userName(userId, profile, fallback = null) {
  if (profile && typeof profile.name === "string" && profile.name) return profile.name;
  if (fallback) return fallback;
  return userId != null ? `user ${userId}` : "";
}

/**
 * Stream objects rendered as cards.
 * @extends {View<Stream>}
 */
export class StreamView extends View {
  /** @param {StreamViewOptions} [options] */
  constructor({ userHref = null, userCache = null, ...options } = {}) {
    super({ order: "-created_at", ...options });
    this.userHref = userHref;
    this.userCache = userCache;
    /** @private @type {(() => void) | null} */
    this._offUsers = null;
    this._followUsers();
  }

  /**
   * @param {{signal?: AbortSignal | null}} [options]
   * @returns {import("./deferred.js").Deferred<import("./session.js").Subscription>}
   */
  subscribe(options = {}) {
    this._followUsers();
    return super.subscribe(options);
  }

  unsubscribe() {
    this._offUsers?.();
    this._offUsers = null;
    return super.unsubscribe();
  }

  /** @private */
  _followUsers() {
    if (this.userCache && !this._offUsers) {
      this._offUsers = this.userCache.on("change", (id) => this.refreshUser(id));
    }
  }

  /**
   * Show the current profile of user `id` on every card of theirs.
   * @param {UserId} id
   */
  refreshUser(id) {
    for (const s of this.items) {
      if (s.user_id !== id) continue;
      const node = this.nodeFor(s[/** @type {"id"} */ (this.idField)]);
      /** @type {HTMLElement | null | undefined} */
      const el = node?.querySelector?.(".pe-user");
      if (el) this.fillUser(el, s);
    }
  }

  /**
   * Write a stream's user (avatar and name) into its element; ask the cache when it has no fresh profile.
   * @param {HTMLElement} el
   * @param {Stream} s
   */
  fillUser(el, s) {
    const id = s.user_id ?? null;
    const cache = this.userCache;
    const profile = id !== null && cache ? cache.peek(id) : undefined;
    const name = userName(id, profile, s.user_name);
    /** @type {HTMLElement | null} */
    let avatar = el.querySelector(".pe-avatar");
    /** @type {HTMLElement | null} */
    let label = el.querySelector(".pe-user-name");
    if (!avatar || !label) {
      avatar = el.ownerDocument.createElement("span");
      avatar.className = "pe-avatar pe-avatar-small";
      avatar.setAttribute("aria-hidden", "true");
      label = el.ownerDocument.createElement("span");
      label.className = "pe-user-name";
      el.replaceChildren(avatar, label);
    }
    avatar.hidden = id === null && !name;
    setAvatar(avatar, id, name, profile?.avatar);
    label.textContent = name;
    el.dataset.userId = id === null ? "" : String(id);
    if (id !== null && cache && !cache.isFresh(id)) {
      cache.get(id).addErrback(() => undefined); // "change" redraws the cards
    }
  }

  /**
   * @param {Stream} stream
   * @returns {HTMLElement}
   */
  renderItem(stream) {
    const doc = /** @type {Element} */ (this.container).ownerDocument;
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

  /**
   * @param {Element} node
   * @param {Stream} stream
   * @param {Stream} old
   */
  updateItem(node, stream, old) {
    this.fill(/** @type {HTMLElement} */ (node), stream, old);
  }

  /**
   * Write a stream's fields into its card (all of them, or those that changed).
   * @param {HTMLElement} li
   * @param {Stream} s
   * @param {Stream | null} old
   */
  fill(li, s, old) {
    li.dataset.id = String(s.id);
    li.classList.toggle("pe-is-live", Boolean(s.live));
    const q = (/** @type {string} */ sel) => /** @type {HTMLElement} */ (li.querySelector(sel));
    if (!old || old.thumbnail !== s.thumbnail || old.title !== s.title || old.id !== s.id) {
      this.fillThumbnail(q(".pe-thumb-image"), s);
    }
    q(".pe-title").textContent = s.title ?? "";
    q(".pe-title").title = s.title ?? "";
    const user = q(".pe-user");
    if (!old || old.user_id !== s.user_id || old.user_name !== s.user_name) this.fillUser(user, s);
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
      setAgo(q(".pe-ago"), s.ended_at ?? s.created_at ?? null, s.ended_at ? "ended " : "");
    }
    time.hidden = time.textContent === "";
    q(".pe-viewers").textContent = s.viewers == null ? ""
      : plural(s.viewers, s.live ? "watching" : "viewer", s.live ? "watching" : "viewers");
  }

  /**
   * @param {HTMLElement} box
   * @param {Stream} s
   */
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
  /** @param {StreamViewOptions} [options] */
  constructor(options = {}) {
    super({ method: "stream.subscribe_public_live", ...options });
  }
}

/** Ended public streams, newest first. */
export class RecentStreamsView extends StreamView {
  /** @param {StreamViewOptions} [options] */
  constructor(options = {}) {
    super({ method: "stream.subscribe_public_recent", ...options });
  }
}

/** One user's public streams. */
export class UserStreamsView extends StreamView {
  /** @param {StreamViewOptions & {userId: UserId}} options */
  constructor({ userId, ...options }) {
    super({ method: "stream.subscribe_user", params: [userId], ...options });
    this.userId = userId;
  }
}

/** Public streams whose title has a word (in any inflected form). */
export class WordStreamsView extends StreamView {
  /** @param {StreamViewOptions & {word: string}} options */
  constructor({ word, ...options }) {
    super({ method: "stream.subscribe_word", params: [word], ...options });
    this.word = word;
  }
}
