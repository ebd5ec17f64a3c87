// The examples' index: a small live preview and the number of sessions online.
import { LiveStreamsView } from "/static/js/streamview.js";
import { connect, userHref, mount, showOnline } from "./common.js";

const { api, session, users } = connect();
showOnline(api, null, document.getElementById("online"));
mount(new LiveStreamsView({ container: document.getElementById("list"), session, limit: 4, userHref, userCache: users }), {
  emptyText: "Nobody is streaming right now.",
});
