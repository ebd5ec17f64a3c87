// Recently ended: public streams that have ended, newest first.
import { RecentStreamsView } from "/static/js/streamview.js";
import { connect, intParam, userHref, limitControl, replaceView, showOnline } from "./common.js";

const { api, session, users } = connect();
const container = document.getElementById("list");
let view = null;
const online = showOnline(api, () => view, document.getElementById("online"));
const options = {
  emptyText: "No stream has ended yet. They appear here when they do.",
  onState: () => online(),
};
const make = (limit) => () => new RecentStreamsView({ container, session, limit, userHref, userCache: users });

view = replaceView(null, make(intParam("limit", 10, 1, 50)), options);
limitControl(document.getElementById("limit"), view.limit, (limit) => {
  view = replaceView(view, make(limit), options);
});
