// A user's public streams, live and ended; people streaming now to pick from.
import { LiveStreamsView, UserStreamsView } from "/static/js/streamview.js";
import { plural } from "/static/js/updater.js";
import { connect, intParam, textParam, mount, replaceView, renderUserChips, showOnline } from "./common.js";

const { api, session } = connect();
const raw = textParam("user");
// Ids made of digits are numbers in the objects (user_id: 340699).
const userId = /^\d{1,15}$/.test(raw) ? Number(raw) : raw || null;
document.getElementById("user").value = raw;

// People streaming now: a live view without container, shown as chips.
const chips = document.getElementById("people");
const people = new LiveStreamsView({ session, limit: 30 });
people.on("change", () => renderUserChips(chips, people.items, { exclude: userId }));
mount(people);

if (userId !== null) {
  const heading = document.getElementById("heading");
  const sub = document.getElementById("subheading");
  const online = document.getElementById("online");
  sub.replaceChildren(document.createTextNode(""), online);
  let view = null;
  const update = showOnline(api, () => view, online);
  view = replaceView(null, () => new UserStreamsView({
    container: document.getElementById("list"), session, userId, limit: intParam("limit", 20, 1, 50),
  }), {
    emptyText: "No public streams yet. They appear here as soon as this user starts one.",
    onState: () => update(),
  });
  view.on("change", () => {
    const name = view.items.find((s) => s.user_name)?.user_name;
    heading.textContent = name ? `Streams of ${name}` : `Streams of user ${userId}`;
    document.title = `${heading.textContent} · pushengine`;
    const live = view.items.filter((s) => s.live).length;
    sub.firstChild.textContent = `${plural(view.items.length, "public stream", "public streams")}` +
      (live ? `, ${live} live now. ` : ". ");
  });
}
