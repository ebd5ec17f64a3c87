"""Building the service: the one place where adapters are chosen.

The embedded default uses the in-process feed, store and online figures;
``--amqp``, ``--memcache``, ``--redis`` and ``--store-url`` swap in the real
ones. Everything else only sees the interfaces.
"""
from __future__ import annotations

from typing import Any, Callable, cast

from twisted.application import service, strports
from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python import usage
from twisted.web import http
from twisted.web.server import Site

from pushengine import __version__
from pushengine.metrics import prometheus as metrics
from pushengine.api.methods import Api, method_table
from pushengine.api.auth import ApiKeys, TokenVerifier
from pushengine.app.engine import build_engine
from pushengine.app.logs import NodeServices
from pushengine.app.shutdown import Shutdown, second_signal
from pushengine.feeds.memory import MemoryFeed
from pushengine.core.feedservice import FeedService
from pushengine.core.hooks import Hooks
from pushengine.core.interfaces import Interest
from pushengine.core.topics import NO_INTEREST
from pushengine.core.limits import CallRate
from pushengine.core.timings import (
    CALL_BUCKETS, DELIVERY_BUCKETS, INITIAL_STATE_BUCKETS, Timings)
from pushengine.core.tracing import NO_TRACER, Tracer
from pushengine.memcache import MemcacheClient, build_cache
from pushengine.memcache.online import OnlineCounter
from pushengine.api.publishing import Publisher
from pushengine.api.rpc import Dispatcher
from pushengine.core.sessions import SessionSettings
from pushengine.stores.memory import MemoryStore
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.longpoll import LongPolling
from pushengine.views.conditions import ViewDefinitionError
from pushengine.views.spec import load_catalog
from pushengine.web.app import WebApp
from pushengine.web.clients import ClientAddresses
from pushengine.web.connections import OpenConnections
from pushengine.web.health import Readiness
from pushengine.web.policy import HttpPolicy
from pushengine.web.request import limited_request_factory
from pushengine.web.routes import Route

log = Logger()

STORE_KINDS = ("memory", "http", "postgresql")      # the stores' ``kind``
TRANSPORTS = ("longpoll", "sse", "websocket")       # the deliveries' ``transport_name``


class EngineSite(Site):
    """A Site whose access log is optional: at thousands of polls a second a
    line per request costs more than the answer."""

    access_log = False

    def log(self, request: http.Request) -> None:
        if self.access_log:
            super().log(request)


def timer(interval: float, body: Callable[[], object], clock: IReactorTime) -> TimerService:
    """A TimerService whose body logs its errors instead of dying of them."""
    def safe() -> None:
        try:
            body()
        except Exception:
            log.failure("periodic task {name} failed", name=getattr(body, "__name__", body))
    t = TimerService(interval, safe)
    t.clock = clock
    return t


class TracerService(service.Service):
    """Sends the spans that wait and stops the exporter's thread when the
    node stops, in a thread of the reactor's pool (an export may take
    seconds: the reactor goes on meanwhile)."""

    def __init__(self, tracer: Any, reactor: Any) -> None:
        self.tracer = tracer
        self.reactor = reactor

    def stopService(self) -> Deferred[Any] | None:
        super().stopService()
        from twisted.internet.threads import deferToThreadPool
        d = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self.tracer.shutdown)
        return d.addErrback(lambda f: log.failure("stopping the traces' exporter failed", f))


class _ClientFigures:
    """The per-client limits' refusals, for /metrics."""

    counter_names = ("rate_limited", "session_cap_refused")

    def __init__(self, rate: CallRate, sessions: Any) -> None:
        self.rate = rate
        self.sessions = sessions

    def stats(self) -> dict[str, int]:
        return {"rate_limited": self.rate.refused, "session_cap_refused": self.sessions.refused,
                "tracked": len(self.rate.buckets)}


class _PingFigures:
    """The streams' heartbeats, for /metrics: the pings each has sent."""

    counter_names = ("sse", "ws")

    def __init__(self, sse: Heartbeat, ws: Heartbeat) -> None:
        self.sse = sse
        self.ws = ws

    def stats(self) -> dict[str, int]:
        return {"sse": self.sse.pings, "ws": self.ws.pings}


class Node:
    """Everything one engine node is made of, built from options."""

    def __init__(self, options: Any, reactor: Any) -> None:
        self.options = options
        self.reactor = reactor
        try:
            self.catalog = load_catalog(options["views"])
        except (ViewDefinitionError, OSError) as e:
            raise usage.UsageError(self._views_error(e)) from None
        self.services = NodeServices()
        self.sources: dict[str, Any] = {}
        self.cache = build_cache(reactor, options["memcache"])
        self.sources["memcache"] = self.cache
        self.store = self._store()
        self.interest: Interest = NO_INTEREST
        self.feed = self._feed()
        # every part that hears of sessions is added here once; the Api and
        # the session manager both tell this one list
        self.hooks = Hooks()
        self._bloom()
        # /metrics' histograms: a call's time per method, a subscription's
        # initial-state time per store, a change's time to each transport
        self.initial_timings = Timings("store", INITIAL_STATE_BUCKETS, STORE_KINDS)
        self.delivery_timings = Timings("transport", DELIVERY_BUCKETS, TRANSPORTS)
        # spans of calls, initial-state reads and changes (--otlp-endpoint)
        self.tracer = self._tracer()
        self.engine = build_engine(reactor, self.catalog, self.store, SessionSettings(
            session_timeout=options["session-timeout"], max_timeout=options["max-timeout"],
            max_sessions=options["max-sessions"], max_subscriptions=options["max-subscriptions"],
            max_queue=options["max-queue"],
            max_client_sessions=options["max-client-sessions"]), seen=self.seen, hooks=self.hooks,
            interest=self.interest, initial_timings=self.initial_timings,
            delivery_timings=self.delivery_timings, tracer=self.tracer)
        self.online = self._online()
        self.cluster = self._cluster()
        self.poller = LongPolling(self.engine.sessions, reactor)
        if self.cluster is not None:
            self.hooks.add(self.cluster.hooks)
        self._unique()
        self._segments()
        try:
            tokens = TokenVerifier.from_options(options["secret"], options["jwks"])
        except ValueError as e:
            raise usage.UsageError(f"--jwks: {e}") from None
        self.api = Api(self.engine, tokens, self.online,
                       resume=self.cluster.resume if self.cluster is not None else None,
                       hooks=self.hooks, unique=self.unique, segments=self.contacts,
                       poller=self.poller)
        if self.api.profiles is not None:
            self.sources["profiles"] = self.api.profiles
        self._webhooks()
        self._presence()
        self._admin()
        self.rpc_errors: dict[int, int] = {}
        self.call_rate = CallRate(reactor, options["client-rate"])
        from pushengine.admin import describe as admin_described
        from pushengine.api.openrpc import DESCRIPTIONS, Discovery
        from pushengine.bloom import describe as bloom_described
        self.discovery = Discovery(self.catalog, descriptions={
            **DESCRIPTIONS, **bloom_described.DESCRIPTIONS, **admin_described.DESCRIPTIONS})
        try:
            # a view alias that takes a built-in name, or one that --namespace
            # would give twice, is a usage error
            methods = method_table([self.api.methods(), self.bloom_methods.methods(),
                                    self.presence.methods(), self.admin_methods.methods(),
                                    self.discovery.methods()],
                                   self.catalog, options.get("namespace"))
        except ViewDefinitionError as e:
            raise usage.UsageError(self._views_error(e)) from None
        self.discovery.describe(methods)        # rpc.discover, GET /api/openrpc.json
        self.call_timings = Timings("method", CALL_BUCKETS, methods)
        self.dispatcher = Dispatcher(methods, max_batch=options["max-batch"],
                                     on_error=self._count_error, admit=self._admit,
                                     timings=self.call_timings, clock=reactor.seconds,
                                     tracer=self.tracer)
        self.sources["feed"] = self.feed
        self.sources["clients"] = _ClientFigures(self.call_rate, self.engine.sessions.per_client)
        self.collector = metrics.EngineCollector(
            self.engine, options["node-id"], reactor, self.sources, self.rpc_errors, [
                ("pushengine_rpc_call_seconds", "Seconds from a JSON-RPC call's dispatch to "
                 "its answer (a parked get_events: its wait included), by method",
                 self.call_timings),
                ("pushengine_initial_state_seconds", "Seconds from a subscription to its "
                 "view's initial state, by store", self.initial_timings),
                ("pushengine_delivery_seconds", "Seconds from changes handed to the engine "
                 "to their events handed to a session's transport, by transport",
                 self.delivery_timings)])
        self.policy = HttpPolicy(ApiKeys.from_options(options["api-key"], options["api-keys"]),
                                 options["cors-origin"],
                                 ClientAddresses(options["trusted-proxies"]),
                                 options["max-body"], options["max-segment-body"],
                                 options["body-timeout"], options["max-client-connections"],
                                 traces=self.tracer.enabled)
        self.publisher = Publisher(self.feed, self.catalog.id_fields, options["publish-key"],
                                   tracer=self.tracer)
        from pushengine.web.segments import SegmentsResource
        self.segment_uploads = SegmentsResource(self.segments, self.policy, self.publisher,
                                                reactor, options["segment-min"])
        registry = metrics.make_registry(self.collector, __version__, process=True)

        def render_metrics() -> tuple[bytes, bytes]:
            return metrics.CONTENT_TYPE.encode(), metrics.render(registry)
        # the fronts' connections, which the graceful shutdown closes
        self.connections = OpenConnections()
        # /health/ready; ``draining()`` when shutdown begins
        self.readiness = Readiness(reactor, lambda: bool(self.feed.health().get("up")),
                                   options["ready-grace"])
        self.web = WebApp(self.policy, self.dispatcher, self.publisher, self.health,
                          render_metrics, self._routes(), ready=self.readiness.state)

    def _routes(self) -> list[Route]:
        """The routes beside the node's own (``web.app``): the streaming
        transports (SSE, WebSocket), the segment uploads and, with
        ``--admin-key``, the admin page."""
        from pushengine.transports.sse import EventsResource
        from pushengine.transports.websocket import WebSocketResource
        from pushengine.web.openrpc import openrpc_route
        sse = self.sse = EventsResource(self.api, self.policy, self.reactor,
                                        ping_interval=self.options["sse-ping"])
        ws = self.ws = WebSocketResource(self.dispatcher, self.engine.sessions, self.policy,
                                         self.reactor, self.options["max-body"],
                                         self.options["idle-timeout"],
                                         ping_interval=self.options["ws-ping"])
        self.sources["pings"] = _PingFigures(sse.heartbeat, ws.heartbeat)
        # the fast front hands these streams' connections to their transport
        routes = [Route.resource("/api/events", sse, ("GET", "OPTIONS"), shape="stream",
                                 stream=sse.stream),
                  Route.resource("/api/ws", ws, ("GET",), shape="stream", stream=ws.stream,
                                 websocket=True),
                  Route.resource("/api/segments", self.segment_uploads, shape="stream"),
                  Route.resource("/api/segments/", self.segment_uploads, branch=True,
                                 shape="stream"),
                  openrpc_route(self.discovery, self.policy)]
        if self.admin_hub is not None:
            from pushengine.web.admin import AdminPage
            routes.append(Route.get("/admin/", AdminPage().serve, branch=True))
        return routes

    def _tracer(self) -> Tracer:
        """With ``--otlp-endpoint``: the OpenTelemetry tracer (``tracing/``,
        the ``otel`` extra), sampling ``--trace-sample`` of the traces that
        start here; without it a no-op, and OpenTelemetry is not imported."""
        endpoint = self.options.get("otlp-endpoint")
        if not endpoint:
            return NO_TRACER
        try:
            from pushengine.tracing.otel import build_tracer
        except ImportError as e:
            from pushengine.app.tap import missing_tracing
            raise usage.UsageError(missing_tracing(e.name)) from None
        return build_tracer(endpoint, self.options["trace-sample"], self.options["node-id"],
                            call_from_thread=getattr(self.reactor, "callFromThread", None))

    def _bloom(self) -> None:
        """Scalable Bloom filters (SPEC section 14), in Redis with --redis
        (every node shares them), in process otherwise; the bf.* methods and
        the seen filters of once_per_user views (the engine's) use them."""
        from pushengine.app.adapters import build_bloom
        from pushengine.bloom.methods import BloomMethods
        from pushengine.views.once import SeenFilter
        try:
            self.bloom = build_bloom(self.reactor, self.options["redis"],
                                     max_total=self.options["bloom-max-bytes"])
        except ValueError as e:
            raise usage.UsageError(f"--redis: {e}") from None
        self.seen = SeenFilter(self.bloom)
        self.bloom_methods = BloomMethods(self.bloom, self.options["publish-key"])
        self.sources.update(bloom=self.bloom, seen=self.seen)

    def _unique(self) -> None:
        """``stats.unique`` (SPEC section 14): distinct users per view key,
        counted in the Bloom filters as sessions subscribe and poll."""
        from pushengine.bloom.unique import UniqueHooks, UniqueUsers
        self.unique = UniqueUsers(self.bloom, self.reactor, self.options["online-period"])
        self.hooks.add(UniqueHooks(self.unique))
        self.sources["unique"] = self.unique

    def _presence(self) -> None:
        """Who is online in each view, shared through memcached or Redis (SPEC 16)."""
        from pushengine.api.presence import Presence
        from pushengine.app.adapters import build_presence_store
        try:
            store = build_presence_store(self.cache, self.options["node-id"], self.reactor,
                                         self.options["memcache"], self.options["redis"])
        except ValueError as e:
            raise usage.UsageError(f"--redis: {e}") from None
        self.presence = Presence(self.engine, store, self.reactor,
                                 with_session=self.api.with_session)
        self.hooks.add(self.presence)
        self.sources["presence"] = self.presence

    def _admin(self) -> None:
        """``/admin/`` and the admin.* methods (SPEC 16): with ``--admin-key``
        a hub of every node's statistics and this node's publisher of them;
        without it the methods answer "closed". The feed's sink keeps the
        statistics away from the engine either way."""
        from pushengine.admin.hub import AdminHub, AdminSink
        from pushengine.admin.methods import AdminKey, AdminMethods
        from pushengine.admin.stats import StatsPublisher
        key = self.options["admin-key"]
        self.admin_hub = self.stats_publisher = None
        if key:
            self.admin_hub = AdminHub(self.engine.sessions, self.reactor,
                                      key.encode("utf-8", "surrogateescape"))
            self.hooks.add(self.admin_hub)
            self.stats_publisher = StatsPublisher(self.options["node-id"], self.engine,
                                                  self.feed, self.admin_hub, self.reactor,
                                                  self.health)
        self.disconnector = None
        self.disconnects_seen = None
        if key:
            from pushengine.admin.disconnect import Disconnector
            from pushengine.app.adapters import build_seen_ids
            try:
                # the ids applied, kept across restarts (Redis)
                self.disconnects_seen = build_seen_ids(self.reactor, self.options["redis"],
                                                       self.options["node-id"])
            except ValueError as e:
                raise usage.UsageError(f"--redis: {e}") from None
            self.disconnector = Disconnector(
                self.engine.sessions, self.hooks, self.feed, self.reactor,
                key.encode("utf-8", "surrogateescape"), self.options["node-id"],
                seen=self.disconnects_seen)
        self.sink = AdminSink(self.engine, self.admin_hub, self.disconnector)
        self.admin_key = AdminKey(key, self.reactor)
        from pushengine.admin.stats import AdminFigures
        self.sources["admin"] = AdminFigures(self.sink, self.admin_hub, self.stats_publisher,
                                             self.admin_key, self.disconnector)
        self.admin_methods = AdminMethods(
            self.admin_key, self.admin_hub, self.api, self.feed, self.catalog.id_fields,
            self.options["node-id"], self.cluster.registry if self.cluster is not None else None,
            self.disconnector)

    def _webhooks(self) -> None:
        """With ``--webhook-url``: a signed POST per session event (SPEC 16)."""
        self.webhooks = None
        if not self.options["webhook-url"]:
            return
        from pushengine.webhooks.sender import WebhookHooks, WebhookSender
        self.webhooks = WebhookSender(
            self._webhook_client(), self.options["webhook-url"], self.options["webhook-secret"],
            self.options["node-id"], self.reactor, max_queue=self.options["webhook-queue"],
            client_of=lambda sid: getattr(self.engine.sessions.sessions.get(sid), "client", None))
        self.hooks.add(WebhookHooks(self.webhooks))
        self.sources["webhooks"] = self.webhooks

    def _webhook_client(self) -> Any:
        """The HTTP client of the webhooks (treq; tests pass another)."""
        import treq
        return treq

    def _segments(self) -> None:
        """Audience segments (SPEC section 15): in Redis with --redis, in
        process otherwise; the contacts of each authorized session, which
        its views bound to segments look up."""
        from pushengine.app.adapters import build_segments
        from pushengine.segments.contacts import SegmentMembership
        from pushengine.segments.reevaluate import Deauthorizations, Reevaluator
        try:
            self.segments = build_segments(self.reactor, self.options["redis"])
        except ValueError as e:
            raise usage.UsageError(f"--redis: {e}") from None
        self.sources["segments"] = self.segments
        self.contacts = SegmentMembership(self.segments)
        self.hooks.add(self.contacts)
        # an upload or delete (here, or on another node) moves subscribed sessions
        self.reevaluator = Reevaluator(self.engine.sessions, self.segments, self.contacts)
        # a session whose token expired moves to the views bound to no segment
        self.hooks.add(Deauthorizations(self.reevaluator))

    def _admit(self, caller: Any, calls: int) -> float:
        """The call rate per client address (0: go ahead, else seconds to wait)."""
        return self.call_rate.admit(getattr(caller, "address", caller), calls)

    def _views_error(self, error: Exception) -> str:
        """A bad views file (or a method name clash) as one line that names
        the file and, where it can, the view and what is wrong."""
        where = self.options["views"] or "the built-in views"
        return " ".join(f"--views {where}: {error}".split())

    def _count_error(self, code: int) -> None:
        self.rpc_errors[code] = self.rpc_errors.get(code, 0) + 1

    # -- adapter choices ----------------------------------------------------------
    def _store(self) -> Any:
        options = self.options
        if options["store-url"] and is_postgres(options["store-url"]):
            return self._postgres_store(options["store-url"])
        if not options["store-url"] and options["feed-url"]:
            # a node on its database: its views read the same database
            return self._postgres_store(options["feed-url"])
        if options["store-url"]:
            import treq

            from pushengine.stores.http import HttpStore
            # the backend answers views; the types with public profiles
            # (User) are kept here from the feed for user.public_profile
            return HttpStore(treq, options["store-url"], cache=self.cache, clock=self.reactor,
                             keep=set(self.catalog.public_fields))
        # initial states from indexes or in slices between reactor turns
        store = MemoryStore(self.catalog.id_fields, clock=self.reactor)
        store.index_views(self.catalog.views.values())
        if options["seed"]:
            count = store.seed(options["seed"])
            log.info("seeded the in-process store with {count} objects", count=count)
        return store

    def _postgres_store(self, url: str) -> Any:
        """The views' tables in PostgreSQL (SPEC 20): every type a view shows
        must be mapped to a table in the views file."""
        from pushengine.postgres.store import PostgresStore
        unmapped = sorted({spec.type for spec in self.catalog.views.values()}
                          - set(self.catalog.tables))
        if unmapped:
            where = self.options["views"] or "the built-in views"
            raise usage.UsageError(
                f"--store-url postgresql://: the views file ({where}) maps no table for type "
                f"{unmapped[0]}: add 'table: NAME' to types: {unmapped[0]} (docs/postgres.md)")
        store = PostgresStore(self.reactor, url, self.catalog, pool_size=self.options["pg-pool"],
                              statement_timeout=self.options["pg-timeout"],
                              keep=set(self.catalog.public_fields))
        self.sources["postgres"] = store
        return store

    def _feed(self) -> Any:
        options = self.options
        if options["feed-url"]:
            from pushengine.postgres.walfeed import WalFeed
            return WalFeed(self.reactor, options["feed-url"], self.catalog,
                           node_id=options["node-id"])
        if options["amqp"]:
            from pushengine.amqp import AmqpFeed
            bindings = None
            if options["amqp-routing"] == "interest":
                # the queue's bindings: the views' interest (SPEC 19)
                from pushengine.amqp.interest import Bindings
                bindings = Bindings(self.reactor)
                self.interest = bindings
                if not options["store-url"]:
                    log.warn("--amqp-routing interest with the in-process store: a node "
                             "keeps only the changes its views bound, so a new view's "
                             "initial state holds only what this node received; give "
                             "--store-url in production (docs/deploy.md)")
            try:
                return AmqpFeed(self.reactor, options["amqp"], exchange=options["amqp-exchange"],
                                node_id=options["node-id"], id_fields=self.catalog.id_fields,
                                routing=options["amqp-routing"], routes=self.catalog.routes,
                                bindings=bindings, prefetch=options["amqp-prefetch"],
                                **self._amqp_format())
            except ValueError as e:
                raise usage.UsageError(f"--amqp: {e}") from None
        return MemoryFeed()

    def _amqp_format(self) -> dict[str, Any]:
        """``--amqp-format debezium``: the feed reads Debezium's events."""
        if self.options["amqp-format"] == "json":
            return {}
        return {"format": "debezium", "tables": self.catalog.tables}

    def _online(self) -> Any:
        online = OnlineCounter(self.cache, self.reactor, period=self.options["online-period"])
        self.sources["online"] = online
        self.cluster_figures = metrics.Figures()
        self.sources["cluster"] = self.cluster_figures
        return online

    def _cluster(self) -> Any:
        """With ``--redis``: the session registry, its hooks and the resumer."""
        if not self.options["redis"]:
            return None
        from pushengine.app.adapters import build_redis_cluster
        try:
            cluster = build_redis_cluster(self.reactor, self.options["redis"],
                                          self.options["node-id"], self.engine, self.online)
        except ValueError as e:
            raise usage.UsageError(f"--redis: {e}") from None
        self.sources["redis"] = cluster.registry
        return cluster

    def refresh_cluster_figures(self) -> None:
        """Read the cluster-wide online figure for /metrics (it lives in memcached)."""
        def keep(count: int) -> None:
            self.cluster_figures.values["online_sessions"] = count
        self.online.count().addCallback(keep).addErrback(
            lambda f: log.failure("reading the online figure failed", f))

    # -- operations ---------------------------------------------------------------
    def _refuse(self, why: str) -> None:
        """A part found at start that it cannot work: say why, and stop."""
        log.critical("cannot start: {why}", why=why)
        self.reactor.stop()

    def draining(self) -> None:
        """Shutdown began: ``/health/ready`` answers 503 from now on (the
        graceful shutdown calls this first, then waits --drain-delay)."""
        self.readiness.draining()

    def health(self) -> dict[str, Any]:
        feed = self.feed.health()
        ready, why = self.readiness.state()
        report = {"status": "ok" if feed.get("up") else "unavailable",
                  "node": self.options["node-id"], "live": True, "ready": ready}
        if why is not None:
            report["ready_reason"] = why
        report.update(feed=feed, sessions=len(self.engine.sessions.sessions))
        report["memcache"] = self.cache.health()
        report["bloom"] = self.bloom.health()
        if self.webhooks is not None:
            report["webhooks"] = self.webhooks.health()
        for name, part in (("presence", self.presence.store), ("segments", self.segments)):
            health = getattr(part, "health", None)     # the backends that can tell
            if health is not None:
                report[name] = health()
        postgres = self.sources.get("postgres")
        if postgres is not None:
            report["postgres"] = postgres.health()
        redis = self.sources.get("redis")
        report["redis"] = redis.health() if redis is not None else {"up": False,
                                                                    "kind": "none"}
        return report

    def http_factory(self) -> Any:
        """What listens on ``--port``: the fast HTTP front with the site
        behind it, or the site alone (``--http twisted``)."""
        site = self.site()
        if self.options["http"] != "fast":
            return site
        from pushengine.web.fastpath import FastSite
        return FastSite(site, self.web.table, self.policy, self.reactor,
                        self.options["header-timeout"], self.options["idle-timeout"],
                        self.connections)

    def site(self) -> Site:
        """The HTTP site: header deadline, idle timeout between requests, body
        limit, JSON for malformed URLs and requests, no tracebacks."""
        from pushengine.web.channel import deadline_protocol, guard_urls
        # bodies are JSON: parsing them as form submissions would cost a
        # content-type parse through the email package on every POST
        site = EngineSite(guard_urls(self.web.resource()),
                          timeout=self.options["idle-timeout"],
                          reactor=self.reactor, parsePOSTFormSubmission=False)
        # twisted declares the factory's protocol as a function: set as an attribute
        cast(Any, site).protocol = deadline_protocol(self.options["header-timeout"], self.policy,
                                                     self.connections)
        site.access_log = bool(self.options["access-log"])
        site.requestFactory = limited_request_factory(self.policy)
        # a segment upload is judged before its body is spooled (SPEC 15)
        site.requestFactory = self.segment_uploads.request_factory(site.requestFactory)
        site.displayTracebacks = False
        site.noisy = False
        return site

    def build(self) -> service.MultiService:
        options, reactor = self.options, self.reactor
        if isinstance(self.cache, MemcacheClient):
            self.cache.setServiceParent(self.services)
        if self.cluster is not None:
            self.cluster.registry.setServiceParent(self.services)
        if isinstance(self.bloom, service.Service):
            self.bloom.setServiceParent(self.services)
        if isinstance(self.segments, service.Service):
            self.segments.setServiceParent(self.services)
        if "postgres" in self.sources:
            from pushengine.postgres.store import StoreService
            StoreService(self.sources["postgres"], self._refuse).setServiceParent(self.services)
        FeedService(self.feed, self.sink).setServiceParent(self.services)
        if self.tracer.enabled:
            TracerService(self.tracer, reactor).setServiceParent(self.services)
        self.listener = strports.service(options["port"], self.http_factory(), reactor=reactor)
        self.listener.setServiceParent(self.services)
        # SIGTERM, SIGINT: the node lets its clients go, then its services stop
        self.shutdown = Shutdown(reactor, options["drain-delay"], options["shutdown-timeout"],
                                 self.draining, self.listener.stopService,
                                 [self.connections, self.poller, self.sse, self.ws],
                                 on_start=second_signal(reactor))
        self.services.stop_through(self.shutdown.stop)
        timer(options["ping-interval"], self.engine.ping, reactor).setServiceParent(self.services)
        # streamed sessions do not poll: count them online, keep their registry entries
        timer(min(10.0, options["online-period"] / 2), self.api.touch_streams,
              reactor).setServiceParent(self.services)
        timer(min(10.0, options["online-period"]), self.refresh_cluster_figures,
              reactor).setServiceParent(self.services)
        timer(1.0, self.presence.tick, reactor).setServiceParent(self.services)
        # when the feed went down, for /health/ready's grace (within a second)
        timer(1.0, self.readiness.sample, reactor).setServiceParent(self.services)
        if isinstance(self.presence.store, service.Service):
            self.presence.store.setServiceParent(self.services)
        if isinstance(self.disconnects_seen, service.Service):
            self.disconnects_seen.setServiceParent(self.services)
        if self.stats_publisher is not None:
            timer(1.0, self.stats_publisher.tick, reactor).setServiceParent(self.services)
        if options["demo"]:
            from pushengine.tools.demo import DemoProducer
            producer = DemoProducer(reactor, self._demo_target())
            timer(1.0 / options["demo-rate"], producer.tick, reactor).setServiceParent(
                self.services)
        return self.services


    def _demo_target(self) -> Any:
        """Where --demo sends its changes: the feed, or on PostgreSQL the
        tables themselves (they come back through the WAL)."""
        url = self.options["feed-url"]
        if not url:
            return self.feed
        from pushengine.postgres.writer import TableWriter
        writer = TableWriter(self.reactor, url, self.catalog)
        try:
            # before the reactor runs: the WAL feed looks for these tables
            writer.ensure_schema_now()
        except Exception as e:
            raise usage.UsageError(f"--demo: cannot make the demo's tables in "
                                   f"--feed-url's database: {e}") from None
        return writer


def is_postgres(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0] in ("postgres", "postgresql")  # type: ignore[union-attr]


def build_service(options: Any, reactor: Any) -> service.MultiService:
    return Node(options, reactor).build()
