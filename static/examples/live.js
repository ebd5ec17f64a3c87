// Live now: the newest public live streams.
import { LiveStreamsView } from "/static/js/streamview.js";
import { connect, intParam, userHref, limitControl, replaceView, showOnline } from "./common.js";

const { api, session, users } = connect();
const container = document.getElementById("list");
let view = null;
const online = showOnline(api, () => view, document.getElementById("online"));
const options = {
  emptyText: "Nobody is streaming right now. New streams appear here by themselves.",
  onState: () => online(),
};
const make = (limit) => () => new LiveStreamsView({ container, session, limit, userHref, userCache: users });

view = replaceView(null, make(intParam("limit", 10, 1, 50)), options);
limitControl(document.getElementById("limit"), view.limit, (limit) => {
  view = replaceView(view, make(limit), options);
});
