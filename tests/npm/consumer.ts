// A TypeScript consumer of the npm package: it uses the whole public API and
// is compiled with `tsc --noEmit --strict` against the declarations the
// package ships (tests/npm/test_package.py, in a project where the packed
// tarball is installed). It is never run: it checks that the types say what
// the client does.
import {
  Api, Session, Subscription, SessionDestroyedError, Events, EventsStoppedError, View, ViewList,
  StreamView, LiveStreamsView, RecentStreamsView, UserStreamsView, WordStreamsView, UserCache,
  Deferred, Failure, SharedResult, CancelledError, TimeoutError, AlreadyCalledError, FirstError,
  RpcError, NetworkError, ErrorCode, TransportError, DeferredManager, Emitter, Ticker,
  succeed, fail, fromPromise, maybeDeferred, gatherResults, deferLater, abortable,
  parseTransport, backoffDelay, TRANSPORTS, TRANSPORT_NAMES, unusableTransports, forgetUnusableTransports,
  makeComparator, compareValues, parseOrder, sameValue, reconcile, flash, hueFor, initialOf, setAvatar, userName,
  parseTime, formatLocalTime, formatFullTime, formatAgo, formatDuration, elapsedSeconds, formatCount, plural,
  setAgo, setElapsed, refreshTimes, setDebug, isDebug, logger, SUBPROTOCOL, socketUrl,
  Dispatcher, LongPollTransport, SseTransport, WsTransport,
} from "@pushengine/client";
import type {
  Item, PushEvent, SubscriptionHandler, EventsOptions, TransportName, ConnectionState, StateInfo,
  Stream, Profile, UserId, WebSocketConstructor, EventSourceConstructor, FetchLike, Order,
} from "@pushengine/client";
import { Deferred as SameDeferred } from "@pushengine/client/deferred.js";
import { Api as SameApi } from "@pushengine/client/api.js";
import { WsTransport as SameWs } from "@pushengine/client/transport-ws.js";
import { WebSocket as NodeWebSocket } from "ws";
import { EventSource as NodeEventSource } from "eventsource";

// The same classes through the submodules.
const sameDeferred: typeof Deferred = SameDeferred;
const sameApi: typeof Api = SameApi;
const sameWs: typeof WsTransport = SameWs;
void [sameDeferred, sameApi, sameWs];

// -- the WebSocket and EventSource classes of Node and of the browser fit -------------------
const nodeWs: WebSocketConstructor = NodeWebSocket;
const nodeEs: EventSourceConstructor = NodeEventSource;
const browserWs: WebSocketConstructor = globalThis.WebSocket;
const browserEs: EventSourceConstructor = globalThis.EventSource;
const nodeFetch: FetchLike = globalThis.fetch;
void [browserWs, browserEs];

async function flow(signal: AbortSignal): Promise<void> {
  const api = new Api({ url: "http://127.0.0.1:8080/api/jsonrpc", apiKey: null, timeout: 30000, fetch: nodeFetch });
  const session = new Session(api, { token: null });
  const options: EventsOptions = {
    transport: "ws", WebSocket: nodeWs, EventSource: nodeEs, base: 500, max: 30000, remember: true,
    ws: { rpc: true, offerSubprotocol: false, openTimeout: 10000, attachTimeout: 10000 },
    sse: { probeTimeout: 10000 }, longpoll: { timeout: 30 },
  };
  const events = new Events(session, options).start();

  // await on every call and wait
  const sid: string = await session.open({ signal });
  const count: number = await api.call<number>("stats.online", [], { session: sid, signal, timeout: 5000 });
  const userId: UserId = await session.authorize("a.jwt.token", { signal });
  const name: TransportName = await events.connected({ signal, timeout: 10000 });
  const online = await session.call<number>("stats.online", [], { signal, retry: true });
  void [count, userId, name, online];

  // a handler of one's own
  const handler: SubscriptionHandler = {
    setState(state: Item[], sub: Subscription) { void [state, sub.key]; },
    apply(event: PushEvent) {
      switch (event.action) {
        case "insert": case "delete": { const obj: Item = event.obj; void obj; break; }
        case "update": { const old: Item | undefined = event.old; void old; break; }
        case "reset": { const state: Item[] = event.obj; void state; break; }
        case "ping": break;
      }
    },
    onError(failure: Failure) { void failure.value; },
  };
  const sub: Subscription = await session.subscribe("stream.subscribe_public_live", [10], handler, { signal });
  const closed: boolean = await sub.unsubscribe({ signal });
  void closed;

  // the next event, and all of them
  const ev: PushEvent = await events.next({ key: sub.key, filter: (e) => e.action !== "ping", signal, timeout: 1000 });
  void ev.seq;
  for await (const e of events.iterate({ key: sub.key, signal })) {
    if (e.action === "insert") break;
  }
  for await (const e of events) { void e; break; }
  events.on("state", (state: ConnectionState, info: StateInfo) => { void [state, info.delay, info.error]; });
  events.on("transport", (n: TransportName) => { void n; });
  events.on("fallback", (from: TransportName, to: TransportName, error: TransportError) => { void [from, to, error]; });
  const given: [TransportName, TransportError][] = events.given;
  const lastSeq: number = events.lastSeq;
  const current: TransportName | null = events.transport;
  void [given, lastSeq, current, events.failures, events.candidates()];

  // views: plain, typed, without a container, and stream cards
  // an interface (no index signature) is an object type a view accepts
  interface Message { id: number; text: string; channel: string }
  const messages = new View<Message>({
    session, method: "session.subscribe", params: ["ChannelView", { channel: "news" }], limit: 20, order: "-id",
    renderItem: (m: Message) => { const li = document.createElement("li"); li.textContent = m.text; return li; },
    updateItem: (node: Element, m: Message, old: Message) => { node.textContent = `${old.text} -> ${m.text}`; },
  });
  const msub: Subscription = await messages.subscribe({ signal });
  const texts: string[] = (await messages.until((items) => items.length > 0, { signal, timeout: 5000 }))
    .map((m) => m.text);
  messages.on("change", (change) => { void change.action; });
  messages.on("error", (failure: Failure) => { void failure; });
  const node: Element | undefined = messages.nodeFor(1);
  void [msub, texts, node, messages.key, messages.ready];
  messages.unsubscribe()?.addErrback(() => false);

  const users = UserCache.forApi(api, { ttl: 60000, concurrency: 2, maxSize: 100 });
  const profile: Profile = await users.get(340699, { signal });
  const profiles: Profile[] = await users.getMany([1, 2]);
  users.on("change", (id: UserId, p: Profile, old: Profile | undefined) => { void [id, p, old]; });
  const stop: () => void = users.startRefresh(() => [1, 2, null], 30000);
  stop();
  void [profile?.name, profiles, users.peek(1), users.isFresh(1)];
  const own = new UserCache((id: UserId) => ({ id, name: `user ${id}` }));
  void own;

  const container = document.createElement("ol");
  const live = new LiveStreamsView({ container, session, limit: 10, userCache: users,
    userHref: (s: Stream) => `/users/${String(s.user_id)}` });
  await live.subscribe({ signal });
  const streams: Stream[] = live.items;
  void streams.map((s) => [s.title, s.live, s.viewers]);
  new RecentStreamsView({ container, session });
  new UserStreamsView({ container, session, userId: 340699 });
  new WordStreamsView({ container, session, word: "cats" });
  new StreamView({ container, session, method: "stream.subscribe_near", params: [55.75, 37.62, 5] });

  // pure list logic
  const order: Order = "-created_at";
  const list = new ViewList<Stream>({ order, limit: 10, idField: "id" });
  const changed: boolean = list.setState(streams) || list.apply({ key: "k", seq: 1, action: "reset", obj: [] });
  void [changed, list.get(1), list.has(1), list.length, list.upsert(streams[0]), list.remove(1)];
  const cmp = makeComparator(["-viewers", "created_at"]);
  void [cmp, compareValues(1, "a"), parseOrder("a,-b"), sameValue({ a: 1 }, { a: 1 })];
  reconcile<Stream>(container, streams, new Map(), new Map(), {
    make: () => document.createElement("li"), update: () => undefined,
  });
  flash(container, "pe-updated");

  await session.destroy({ keepalive: true });
}

// -- the Deferred: Twisted's chain, and await -----------------------------------------------
async function deferreds(): Promise<void> {
  const d = new Deferred<number>((self) => { void self.called; });
  const chained: Deferred<string> = d.addCallback((n: number) => n + 1).addCallback((n, suffix: string) => `${n}${suffix}`, "!");
  const recovered: Deferred<string | null> = chained.addErrback((f: Failure) => {
    const t = f.trap(RpcError, "NetworkError");
    void t;
    if (f.check(CancelledError)) return null;
    throw f;
  });
  const both: Deferred<boolean> = recovered.addBoth((r) => !(r instanceof Failure));
  d.callback(41);
  const value: boolean = await both;
  const viaPromise: string = await succeed(1).then((n) => String(n));
  const gathered: number[] = await gatherResults([succeed(1), Promise.resolve(2), 3]);
  const later: string = await deferLater(10, (x: string) => x, "x");
  const maybe: number = await maybeDeferred((a: number, b: number) => a + b, 1, 2);
  const fromP: string = await fromPromise(Promise.resolve("p"));
  const shared = new SharedResult<number>(succeed(5));
  const waited: number = await shared.wait({ signal: AbortSignal.timeout(1000) });
  const timed: Deferred<number> = new Deferred<number>().addTimeout(100);
  timed.cancel(new Error("why"));
  const failed: Deferred<never> = fail(new TimeoutError(5));
  failed.addErrback(() => undefined);
  const manager = new DeferredManager(2);
  const run: number = await manager.run((x: number) => x * 2, 21);
  const cancellable = abortable(new Deferred<number>(), AbortSignal.abort());
  await cancellable.catch((e: unknown) => e instanceof CancelledError ? e.cause : e);
  void [value, viaPromise, gathered, later, maybe, fromP, waited, run, manager.peak, manager.waiting];
  Deferred.onUnhandledError = (failure: Failure, deferred: Deferred<unknown>) => { void [failure, deferred]; };
  void [AlreadyCalledError, FirstError, SessionDestroyedError, EventsStoppedError];
}

// -- everything else that is exported -------------------------------------------------------
function rest(): void {
  const err = new RpcError(ErrorCode.UNKNOWN_SESSION, "unknown session", undefined, "session.get_events");
  const net = new NetworkError("down", { status: 502 });
  void [err.code, err.method, net.status, ErrorCode.LIMIT_REACHED];
  const t: TransportName | "auto" = parseTransport("websocket");
  const names: readonly TransportName[] = TRANSPORTS;
  void [t, names, TRANSPORT_NAMES.ws, backoffDelay(3, { base: 500, max: 30000 }), unusableTransports()];
  forgetUnusableTransports();
  void [hueFor(7), initialOf("Anna"), userName(1, null, "fallback"), parseTime("2030-01-01T00:00:00Z")];
  void [formatLocalTime(0), formatFullTime(0), formatAgo(0), formatDuration(61), elapsedSeconds(0), formatCount(1200)];
  void plural(2, "viewer", "viewers");
  const span = document.createElement("span");
  setAvatar(span, 1, "Anna", null);
  setAgo(span, "2030-01-01T00:00:00Z", "started ");
  setElapsed(span, 0);
  refreshTimes(document.body);
  new Ticker(document.body, 1000).start().stop();
  setDebug(isDebug(), false);
  logger("consumer")("hello", 1);
  const emitter = new Emitter<{ ping: [n: number] }>();
  const off: () => void = emitter.on("ping", (n: number) => { void n; });
  emitter.emit("ping", 1);
  off();
  void [SUBPROTOCOL, socketUrl("/api/ws", "http://h/"), Dispatcher, LongPollTransport, SseTransport];
}

void [flow, deferreds, rest];
