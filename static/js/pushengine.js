// Everything of the client in one import:
//   import { Api, Session, Events, LiveStreamsView } from "/static/js/pushengine.js";
//   import { Api, Session, Events } from "@pushengine/client";   // the npm package

export { setDebug, isDebug, logger } from "./debug.js";
export {
  Deferred, Failure, SharedResult, AlreadyCalledError, CancelledError, TimeoutError, FirstError,
  succeed, fail, fromPromise, maybeDeferred, gatherResults, deferLater, abortable,
} from "./deferred.js";
export { DeferredManager } from "./deferredmanager.js";
export { Emitter } from "./emitter.js";
export { Api, RpcError, NetworkError, ErrorCode, withQuery } from "./api.js";
export { Session, Subscription, SessionDestroyedError } from "./session.js";
export {
  Events, EventsStoppedError, backoffDelay, parseTransport, TRANSPORTS, TRANSPORT_NAMES, unusableTransports,
  forgetUnusableTransports,
} from "./events.js";
export { Dispatcher, Transport, TransportError } from "./transport.js";
export { LongPollTransport } from "./transport-longpoll.js";
export { SseTransport } from "./transport-sse.js";
export { WsTransport, SUBPROTOCOL, socketUrl } from "./transport-ws.js";
export { ViewList, makeComparator, compareValues, parseOrder, sameValue } from "./viewlist.js";
export { View, reconcile, flash } from "./view.js";
export {
  StreamView, LiveStreamsView, RecentStreamsView, UserStreamsView, WordStreamsView,
  hueFor, initialOf, setAvatar, userName,
} from "./streamview.js";
export {
  parseTime, formatLocalTime, formatFullTime, formatAgo, formatDuration, elapsedSeconds,
  formatCount, plural, setAgo, setElapsed, refreshTimes, Ticker,
} from "./updater.js";
export { UserCache } from "./usercache.js";

// The types of the API (for TypeScript; JSDoc typedefs, nothing at run time).
/** @typedef {import("./api.js").Item} Item */
/** @typedef {import("./api.js").PushEvent} PushEvent */
/** @typedef {import("./api.js").CallOptions} CallOptions */
/** @typedef {import("./api.js").FetchLike} FetchLike */
/** @typedef {import("./session.js").SubscriptionHandler} SubscriptionHandler */
/** @typedef {import("./session.js").UserId} UserId */
/** @typedef {import("./events.js").EventsOptions} EventsOptions */
/** @typedef {import("./events.js").TransportName} TransportName */
/** @typedef {import("./events.js").WaitOptions} WaitOptions */
/** @typedef {import("./transport.js").ConnectionState} ConnectionState */
/** @typedef {import("./transport.js").StateInfo} StateInfo */
/** @typedef {import("./transport-ws.js").WebSocketConstructor} WebSocketConstructor */
/** @typedef {import("./transport-ws.js").WebSocketLike} WebSocketLike */
/** @typedef {import("./transport-sse.js").EventSourceConstructor} EventSourceConstructor */
/** @typedef {import("./transport-sse.js").EventSourceLike} EventSourceLike */
/** @typedef {import("./viewlist.js").Order} Order */
/** @typedef {import("./view.js").ViewOptions} ViewOptions */
/** @typedef {import("./streamview.js").Stream} Stream */
/** @typedef {import("./streamview.js").StreamViewOptions} StreamViewOptions */
/** @typedef {import("./usercache.js").Profile} Profile */
