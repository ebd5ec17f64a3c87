"""Building the service: the one place where adapters are chosen.

The embedded default uses the in-process feed, store and online figures;
``--amqp``, ``--memcache``, ``--redis`` and ``--store-url`` swap in the real
ones. Everything else only sees the interfaces.
"""
from __future__ import annotations

from typing import Any

from twisted.application import service, strports
from twisted.application.internet import TimerService
from twisted.logger import Logger
from twisted.python import usage
from twisted.web.server import Site

from pushengine import metrics
from pushengine.api import Api
from pushengine.auth import ApiKeys, TokenVerifier
from pushengine.engine import Engine
from pushengine.feeds.memory import MemoryFeed
from pushengine.limits import CallRate
from pushengine.memcache import MemcacheClient, build_cache
from pushengine.online import OnlineCounter
from pushengine.rpc import Dispatcher
from pushengine.sessions import SessionSettings
from pushengine.stores.memory import MemoryStore
from pushengine.views.conditions import ViewDefinitionError
from pushengine.views.spec import load_catalog
from pushengine.web.app import WebApp
from pushengine.web.clients import ClientAddresses
from pushengine.web.request import limited_request_factory

log = Logger()


class EngineSite(Site):
    """A Site whose access log is optional: at thousands of polls a second a
    line per request costs more than the answer."""

    access_log = False

    def log(self, request) -> None:
        if self.access_log:
            super().log(request)


class FeedService(service.Service):
    """Starts the feed into the engine when the application starts."""

    def __init__(self, feed: Any, sink: Any) -> None:
        self.feed = feed
        self.sink = sink

    def startService(self) -> None:
        super().startService()
        self.feed.start(self.sink)

    def stopService(self):
        super().stopService()
        return self.feed.stop()


def timer(interval: float, body, clock) -> TimerService:
    """A TimerService whose body logs its errors instead of dying of them."""
    def safe() -> None:
        try:
            body()
        except Exception:
            log.failure("periodic task {name} failed", name=getattr(body, "__name__", body))
    t = TimerService(interval, safe)
    t.clock = clock
    return t


class _ClientFigures:
    """The per-client limits' refusals, for /metrics."""

    counter_names = ("rate_limited", "session_cap_refused")

    def __init__(self, rate: CallRate, sessions: Any) -> None:
        self.rate = rate
        self.sessions = sessions

    def stats(self) -> dict[str, int]:
        return {"rate_limited": self.rate.refused, "session_cap_refused": self.sessions.refused,
                "tracked": len(self.rate.buckets)}


class Node:
    """Everything one engine node is made of, built from options."""

    def __init__(self, options: Any, reactor: Any) -> None:
        self.options = options
        self.reactor = reactor
        try:
            self.catalog = load_catalog(options["views"])
        except (ViewDefinitionError, OSError) as e:
            raise usage.UsageError(f"--views: {e}") from None
        self.services = service.MultiService()
        self.sources: dict[str, Any] = {}
        self.cache = build_cache(reactor, options["memcache"])
        self.sources["memcache"] = self.cache
        self.store = self._store()
        self.feed = self._feed()
        self.engine = Engine(reactor, self.catalog, self.store, SessionSettings(
            session_timeout=options["session-timeout"], max_timeout=options["max-timeout"],
            max_sessions=options["max-sessions"], max_subscriptions=options["max-subscriptions"],
            max_queue=options["max-queue"],
            max_client_sessions=options["max-client-sessions"]))
        self.online = self._online()
        self.cluster = self._cluster()
        self.api = Api(self.engine, TokenVerifier(options["secret"]), self.online,
                       resume=self.cluster.resume if self.cluster is not None else None)
        if self.cluster is not None:
            self.api.hooks.append(self.cluster.hooks)
        self.rpc_errors: dict[int, int] = {}
        self.call_rate = CallRate(reactor, options["client-rate"])
        self.dispatcher = Dispatcher(self.api.methods(), max_batch=options["max-batch"],
                                     on_error=self._count_error, admit=self._admit)
        self.sources["feed"] = self.feed
        self.sources["clients"] = _ClientFigures(self.call_rate, self.engine.sessions.per_client)
        self.collector = metrics.EngineCollector(self.engine, options["node-id"], reactor,
                                                 self.sources, self.rpc_errors)
        self.web = WebApp(self.dispatcher, self.feed, self.engine,
                          metrics.make_registry(self.collector), self.health,
                          ApiKeys.from_options(options["api-key"], options["api-keys"]),
                          options["publish-key"], options["cors-origin"],
                          self.catalog.id_fields,
                          ClientAddresses(options["trusted-proxies"]))

    def _admit(self, caller: Any, calls: int) -> float:
        """The call rate per client address (0: go ahead, else seconds to wait)."""
        return self.call_rate.admit(getattr(caller, "address", caller), calls)

    def _count_error(self, code: int) -> None:
        self.rpc_errors[code] = self.rpc_errors.get(code, 0) + 1

    # -- adapter choices ----------------------------------------------------------
    def _store(self) -> Any:
        options = self.options
        if options["store-url"]:
            import treq

            from pushengine.stores.http import HttpStore
            return HttpStore(treq, options["store-url"], cache=self.cache, clock=self.reactor)
        # initial states from indexes or in slices between reactor turns
        store = MemoryStore(self.catalog.id_fields, clock=self.reactor)
        store.index_views(self.catalog.views.values())
        if options["seed"]:
            count = store.seed(options["seed"])
            log.info("seeded the in-process store with {count} objects", count=count)
        return store

    def _feed(self) -> Any:
        options = self.options
        if options["amqp"]:
            from pushengine.amqp import AmqpFeed
            try:
                return AmqpFeed(self.reactor, options["amqp"], exchange=options["amqp-exchange"],
                                node_id=options["node-id"], id_fields=self.catalog.id_fields)
            except ValueError as e:
                raise usage.UsageError(f"--amqp: {e}") from None
        return MemoryFeed()

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
        from pushengine.cluster import build_redis_cluster
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
    def health(self) -> dict[str, Any]:
        feed = self.feed.health()
        report = {"status": "ok" if feed.get("up") else "unavailable",
                  "node": self.options["node-id"], "feed": feed,
                  "sessions": len(self.engine.sessions.sessions)}
        report["memcache"] = self.cache.health()
        redis = self.sources.get("redis")
        report["redis"] = redis.health() if redis is not None else {"up": False,
                                                                    "kind": "none"}
        return report

    def site(self) -> Site:
        """The HTTP site: header deadline, idle timeout between requests, body
        limit, JSON for malformed URLs and requests, no tracebacks."""
        from pushengine.web.channel import deadline_protocol, guard_urls
        # bodies are JSON: parsing them as form submissions would cost a
        # content-type parse through the email package on every POST
        site = EngineSite(guard_urls(self.web.resource()),
                          timeout=self.options["idle-timeout"],
                          reactor=self.reactor, parsePOSTFormSubmission=False)
        site.protocol = deadline_protocol(self.options["header-timeout"])
        site.access_log = bool(self.options["access-log"])
        site.requestFactory = limited_request_factory(self.options["max-body"])
        site.displayTracebacks = False
        site.noisy = False
        return site

    def build(self) -> service.MultiService:
        options, reactor = self.options, self.reactor
        if isinstance(self.cache, MemcacheClient):
            self.cache.setServiceParent(self.services)
        if self.cluster is not None:
            self.cluster.registry.setServiceParent(self.services)
        FeedService(self.feed, self.engine).setServiceParent(self.services)
        strports.service(options["port"], self.site(), reactor=reactor).setServiceParent(
            self.services)
        timer(options["ping-interval"], self.engine.ping, reactor).setServiceParent(self.services)
        timer(min(10.0, options["online-period"]), self.refresh_cluster_figures,
              reactor).setServiceParent(self.services)
        if options["demo"]:
            from pushengine.demo import DemoProducer
            producer = DemoProducer(reactor, self.feed)
            timer(1.0 / options["demo-rate"], producer.tick, reactor).setServiceParent(
                self.services)
        return self.services


def build_service(options: Any, reactor: Any) -> service.MultiService:
    return Node(options, reactor).build()
