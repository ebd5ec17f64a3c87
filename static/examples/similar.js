// Similar streams: live public streams whose title is like a text, most alike
// first, kept current as titles change (stream.subscribe_similar). Each stream
// the engine shows carries `_similarity`, the Jaccard similarity of the two
// titles' word sets; the card shows it and marks the words the titles share.
import { StreamView } from "/static/js/streamview.js";
import { RpcError } from "/static/js/pushengine.js";
import { connect, describe, intParam, textParam, userHref, replaceView, showOnline } from "./common.js";

/** The engine's words when it has no stream.subscribe_similar: installed
 * without the `similar` extra, its built-in views leave the view out. */
export const HOW_TO_ENABLE = "This engine serves no similar views: they need the similar extra. "
  + "Install it with pip install 'pushengine[similar]' and restart the engine.";

/** A failure to subscribe, said for this page: a missing method is the extra. */
export function describeSimilarError(failure) {
  const e = failure?.value ?? failure;
  if (e instanceof RpcError && e.code === -32601) return HOW_TO_ENABLE;
  return describe(failure);
}

/** Lower-cased words: runs of letters and digits, as the engine splits them. */
export function words(text) {
  return (String(text ?? "").match(/[\p{L}\p{N}]+/gu) ?? []).map((w) => w.toLowerCase());
}

class SimilarStreamsView extends StreamView {
  constructor({ text, ...options }) {
    super({ method: "stream.subscribe_similar", params: [text], order: "-_similarity", ...options });
    this.text = text;
    this.words = new Set(words(text));
  }

  fill(li, s, old) {
    super.fill(li, s, old);
    const doc = li.ownerDocument;
    let badge = li.querySelector(".pe-similarity");
    if (!badge) {
      badge = doc.createElement("span");
      badge.className = "pe-badge pe-similarity";
      li.querySelector(".pe-thumb").append(badge);
    }
    const percent = Math.round((s._similarity ?? 0) * 100);
    badge.textContent = `${percent}% alike`;
    badge.dataset.level = percent >= 80 ? "high" : "some";
    badge.title = `Jaccard similarity of the word sets: ${(s._similarity ?? 0).toFixed(3)}`;
    // The title, with the words it shares with the text marked.
    const title = li.querySelector(".pe-title");
    const parts = String(s.title ?? "").split(/([\p{L}\p{N}]+)/u);
    title.replaceChildren(...parts.map((part, i) => {
      if (i % 2 === 1 && this.words.has(part.toLowerCase())) {
        const mark = doc.createElement("mark");
        mark.textContent = part;
        return mark;
      }
      return doc.createTextNode(part);
    }));
  }
}

const { api, session, users } = connect();
const container = document.getElementById("list");
const input = document.getElementById("q");
const limit = intParam("limit", 20, 1, 50);
const hint = container.dataset.empty;
let view = null;
let current = null;
const online = showOnline(api, () => view, document.getElementById("online"));

function follow(raw) {
  const text = words(raw).join(" ");
  if (text === current) return;
  current = text;
  const url = new URL(location.href);
  if (text) url.searchParams.set("q", raw.trim());
  else url.searchParams.delete("q");
  history.replaceState(null, "", url);
  document.title = text ? `“${raw.trim()}” · Similar streams · pushengine` : "Similar streams · pushengine";
  if (!text) {
    view?.unsubscribe()?.addErrback(() => undefined);
    view = null;
    container.replaceChildren();
    container.dataset.empty = hint;
    document.getElementById("online").textContent = "";
    return;
  }
  view = replaceView(view, () => new SimilarStreamsView({ container, session, text, limit, userHref, userCache: users }), {
    emptyText: `No live stream has a title like “${raw.trim()}” yet. Streams like it appear here as soon as they start.`,
    onState: () => online(),
    describeError: describeSimilarError,
  });
}

let timer = null;
input.addEventListener("input", () => {
  clearTimeout(timer);
  timer = setTimeout(() => follow(input.value), 300);
});
document.getElementById("search").addEventListener("submit", (e) => {
  e.preventDefault();
  clearTimeout(timer);
  follow(input.value);
});

input.value = textParam("q");
follow(input.value);
if (!input.value) input.focus();
