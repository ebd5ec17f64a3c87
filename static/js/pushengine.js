// Everything of the client in one import:
//   import { Api, Session, Events, LiveStreamsView } from "/static/js/pushengine.js";

export { setDebug, isDebug, logger } from "./debug.js";
export {
  Deferred, Failure, SharedResult, AlreadyCalledError, CancelledError, TimeoutError, FirstError,
  succeed, fail, fromPromise, maybeDeferred, gatherResults, deferLater,
} from "./deferred.js";
export { DeferredManager } from "./deferredmanager.js";
export { Emitter } from "./emitter.js";
export { Api, RpcError, NetworkError, ErrorCode } from "./api.js";
export { Session, Subscription, SessionDestroyedError } from "./session.js";
export {
  Events, backoffDelay, parseTransport, TRANSPORTS, TRANSPORT_NAMES, unusableTransports, forgetUnusableTransports,
} from "./events.js";
export { Dispatcher, Transport, TransportError } from "./transport.js";
export { LongPollTransport } from "./transport-longpoll.js";
export { SseTransport } from "./transport-sse.js";
export { WsTransport } from "./transport-ws.js";
export { ViewList, makeComparator, compareValues, parseOrder } from "./viewlist.js";
export { View, reconcile, flash } from "./view.js";
export {
  StreamView, LiveStreamsView, RecentStreamsView, UserStreamsView, WordStreamsView,
  NearStreamsView, HomeStreamsView, hueFor, initialOf, setAvatar, userName,
} from "./streamview.js";
export {
  parseTime, formatLocalTime, formatFullTime, formatAgo, formatDuration, elapsedSeconds,
  formatCount, plural, setAgo, setElapsed, refreshTimes, Ticker,
} from "./updater.js";
export { UserCache } from "./usercache.js";
