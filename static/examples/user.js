// A user's public streams, live and ended; people streaming now to pick from.
import { LiveStreamsView, UserStreamsView, userName } from "/static/js/streamview.js";
import { plural } from "/static/js/updater.js";
import { connect, intParam, textParam, mount, replaceView, renderUserChips, showOnline, watchUser } from "./common.js";

const { api, session, users } = connect();
const raw = textParam("user");
// Ids made of digits are numbers in the objects (user_id: 340699).
const userId = /^\d{1,15}$/.test(raw) ? Number(raw) : raw || null;
document.getElementById("user").value = raw;

// People streaming now: a live view without container, shown as chips.
const chips = document.getElementById("people");
const people = new LiveStreamsView({ session, limit: 30 });
const drawChips = () => renderUserChips(chips, people.items, { exclude: userId, users });
people.on("change", drawChips);
users.on("change", drawChips);
mount(people);

if (userId !== null) {
  const heading = document.getElementById("heading");
  const sub = document.getElementById("subheading");
  const online = document.getElementById("online");
  sub.replaceChildren(document.createTextNode(""), online);
  let view = null;
  const update = showOnline(api, () => view, online);
  view = replaceView(null, () => new UserStreamsView({
    container: document.getElementById("list"), session, userId, userCache: users, limit: intParam("limit", 20, 1, 50),
  }), {
    emptyText: "No public streams yet. They appear here as soon as this user starts one.",
    onState: () => update(),
  });
  // the heading names the user by their profile (the user cache), else as their streams do
  const name = () => userName(userId, users.peek(userId), view.items.find((s) => s.user_name)?.user_name);
  const title = () => {
    heading.textContent = `Streams of ${name()}`;
    document.title = `${heading.textContent} · pushengine`;
  };
  watchUser(userId);
  users.get(userId).addErrback(() => undefined);
  users.on("change", (id) => { if (id === userId) title(); });
  view.on("change", () => {
    title();
    const live = view.items.filter((s) => s.live).length;
    sub.firstChild.textContent = `${plural(view.items.length, "public stream", "public streams")}` +
      (live ? `, ${live} live now. ` : ". ");
  });
}
