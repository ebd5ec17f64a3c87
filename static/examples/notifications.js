// New streams from people you follow, each shown once per user (the view's
// once_per_user option, kept in a Bloom filter per user: see docs/bloom.md).
// The session must be authorized: ?token=<JWT signed with --secret>, whose
// subject is the user; ?follow=5,6 lists the users followed.
import { StreamView } from "/static/js/streamview.js";
import { connect, mount, notice, textParam, userHref } from "./common.js";

/** Streams that the users followed start: stream.subscribe_followed_new. */
class FollowedNewStreamsView extends StreamView {
  constructor({ users, ...options }) {
    super({ method: "stream.subscribe_followed_new", params: [users], ...options });
    this.users = users;
  }
}

const { session } = connect();
const token = textParam("token");
const rawFollow = textParam("follow");
// Ids made of digits are numbers in the objects (user_id: 340699).
const follow = rawFollow.split(",").map((s) => s.trim()).filter(Boolean).slice(0, 100)
  .map((v) => (/^\d{1,15}$/.test(v) ? Number(v) : v));
document.getElementById("follow").value = rawFollow;
document.getElementById("token").value = token;
const list = document.getElementById("list");
const who = document.getElementById("who");

if (!token) {
  list.dataset.empty = "Not signed in.";
  notice("This list is personal: open the page with ?token=<a JWT signed with the engine's "
    + "--secret, whose sub is your user id>&follow=<ids of the people you follow>.");
} else if (follow.length === 0) {
  list.dataset.empty = "Enter the ids of the people you follow above.";
} else {
  session.authorize(token).addCallbacks(
    (userId) => {
      who.textContent = `Signed in as user ${userId}.`;
      const view = new FollowedNewStreamsView({ container: list, session, users: follow, limit: 20, userHref });
      mount(view, { emptyText: "Nothing new. A stream that someone you follow starts appears here, once." });
    },
    (f) => {
      list.dataset.empty = "Not signed in.";
      notice(`Could not sign in: ${f?.value?.message ?? f}`);
    },
  );
}
