// Search: public streams whose title has a word, kept current as you watch.
import { WordStreamsView } from "/static/js/streamview.js";
import { connect, intParam, textParam, userHref, replaceView, showOnline } from "./common.js";

const { api, session, users } = connect();
const container = document.getElementById("list");
const input = document.getElementById("q");
const limit = intParam("limit", 20, 1, 50);
const hint = container.dataset.empty;
let view = null;
let current = null;
const online = showOnline(api, () => view, document.getElementById("online"));

function search(text) {
  const word = text.trim().split(/\s+/)[0] ?? "";
  if (word === current) return;
  current = word;
  const url = new URL(location.href);
  if (word) url.searchParams.set("q", word);
  else url.searchParams.delete("q");
  history.replaceState(null, "", url);
  document.title = word ? `“${word}” · Search · pushengine` : "Search · pushengine";
  if (!word) {
    view?.unsubscribe()?.addErrback(() => undefined);
    view = null;
    container.replaceChildren();
    container.dataset.empty = hint;
    document.getElementById("online").textContent = "";
    return;
  }
  view = replaceView(view, () => new WordStreamsView({ container, session, word, limit, userHref, userCache: users }), {
    emptyText: `No public stream has “${word}” in its title yet. Matching streams appear here as soon as they start.`,
    onState: () => online(),
  });
}

let timer = null;
input.addEventListener("input", () => {
  clearTimeout(timer);
  timer = setTimeout(() => search(input.value), 300);
});
document.getElementById("search").addEventListener("submit", (e) => {
  e.preventDefault();
  clearTimeout(timer);
  search(input.value);
});

input.value = textParam("q");
search(input.value);
if (!input.value) input.focus();
