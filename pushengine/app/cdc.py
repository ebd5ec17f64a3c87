"""``pushengine-cdc``: the relay from PostgreSQL's WAL to the AMQP exchange
(SPEC 20, docs/postgres.md "The relay").

    pushengine-cdc postgresql://app@db/app --amqp amqp://guest:guest@mq:5672/ \\
        --views views.yaml [--amqp-routing interest] [--slot pushengine_cdc]
    twistd -n pushengine-cdc postgresql://... --amqp amqp://... --views views.yaml

This module builds it: the options (each also from the environment,
``PUSHENGINE_CDC_<NAME>``; the database URL from ``PUSHENGINE_CDC_DATABASE``),
the WAL reader, the relay's logic (``postgres/relay.py``), the broker
connection (``amqp/link.py``) and, with ``--port``, ``/health`` and
``/metrics``. ``makeService`` serves the twistd plugin, ``main`` the console
script. A mapped table the reader cannot follow stops the process with exit
status 1 and one line naming the table and the fix.
"""
from __future__ import annotations

import atexit
import getopt
import json
import os
import re
import sys
from typing import Any, Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from twisted.application import strports
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorCore
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
from twisted.python import usage
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from pushengine.amqp.feed import DEFAULT_EXCHANGE, DEFAULT_ROUTED_EXCHANGE
from pushengine.amqp.link import PublishLink
from pushengine.amqp.routing import BROADCAST, change_keys
from pushengine.core.changes import Change
from pushengine.postgres.relay import DEFAULT_MAX_CHANGES, Relay
from pushengine.postgres.wal import SLOT_NAME, MappingError, WalReader
from pushengine.views.operators.base import ViewDefinitionError
from pushengine.views.spec import Catalog, load_catalog

log = Logger()

ENV_PREFIX = "PUSHENGINE_CDC_"
DATABASE_ENV = ENV_PREFIX + "DATABASE"
EXIT_FAILED = 1
# the first wait before checking the database again when it cannot be reached
CHECK_RETRY = 2.0
CHECK_RETRY_MAX = 30.0

# name, default, help, parser (None: a string)
PARAMETERS: list[tuple[str, Any, str, Any]] = [
    ("amqp", None, "RabbitMQ URL, amqp://user:pass@host:5672/vhost (required).", None),
    ("amqp-exchange", None, f"The exchange of changes (default {DEFAULT_EXCHANGE}, a fanout "
     f"exchange; with --amqp-routing interest {DEFAULT_ROUTED_EXCHANGE}, a topic exchange): "
     f"the nodes' --amqp-exchange.", None),
    ("amqp-routing", "fanout", "fanout, or interest: routing keys from the routing fields of "
     "--views (the nodes' --amqp-routing).", None),
    ("views", None, "The nodes' views file: which table is which type, and the routing "
     "fields (default: the built-in one).", None),
    ("slot", "pushengine_cdc", "The replication slot (created when missing; a-z, 0-9, _). "
     "A second relay on the same slot waits and takes over when the first one stops.", None),
    ("publication", "pushengine", "The publication of the mapped tables (created when "
     "missing).", None),
    ("port", None, "Serve /health and /metrics here (a strports description such as "
     "tcp:8090:interface=127.0.0.1); off by default.", None),
    ("max-message-changes", DEFAULT_MAX_CHANGES, "Changes per message at most: a larger "
     "transaction is published as several parts.", int),
]


def env_name(option: str) -> str:
    return ENV_PREFIX + option.upper().replace("-", "_")


def one_line(text: str) -> str:
    return " ".join(text.split())


class Options(usage.Options):
    """The relay's command line: ``[options] POSTGRESQL_URL``."""

    synopsis = "[options] postgresql://user:pass@host:5432/db"
    longdesc = ("Publish each committed row change of the tables the views file maps, in "
                "commit order, to the AMQP exchange; confirm each position to PostgreSQL "
                "once the broker has it (docs/postgres.md).")
    optParameters = [[name, None, default, help_] for name, default, help_, _ in PARAMETERS]

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        super().__init__()
        self.environ = dict(os.environ) if environ is None else environ
        self["database"] = self.environ.get(DATABASE_ENV) or None
        for name, _, _, _ in PARAMETERS:
            value = self.environ.get(env_name(name))
            if value:
                self[name] = value
        self.catalog: Catalog | None = None

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        """As usage.Options, but options may follow the URL
        (``pushengine-cdc postgresql://... --amqp amqp://...``)."""
        given = list(sys.argv[1:] if options is None else options)
        try:
            pairs, args = getopt.gnu_getopt(given, self.shortOpt, self.longOpt)
        except getopt.error as e:
            raise usage.UsageError(str(e)) from None
        takes_value = {"--" + name[:-1] for name in self.longOpt if name.endswith("=")}
        flat = [f"{opt}={value}" if opt in takes_value else opt for opt, value in pairs]
        super().parseOptions(flat + ["--"] + args)

    def parseArgs(self, *args: str) -> None:
        if len(args) > 1:
            raise usage.UsageError("give one database URL")
        if args:
            self["database"] = args[0]

    def postOptions(self) -> None:
        for name, _, _, parse in PARAMETERS:
            value = self[name]
            if parse is not None and isinstance(value, str):
                try:
                    self[name] = parse(value)
                except ValueError:
                    raise usage.UsageError(f"--{name} must be a number, not {value!r}") from None
        database = self["database"]
        if not database:
            raise usage.UsageError(f"give the database URL, postgresql://... (or set "
                                   f"{DATABASE_ENV})")
        if not re.match(r"^postgres(ql)?://", database):
            raise usage.UsageError("the database URL must be a postgresql:// URL")
        if not self["amqp"]:
            raise usage.UsageError(f"--amqp URL is required (or set {env_name('amqp')})")
        if not re.match(r"^amqps?://", self["amqp"]):
            raise usage.UsageError("--amqp must be an amqp:// URL")
        if self["amqp-routing"] not in ("fanout", "interest"):
            raise usage.UsageError("--amqp-routing must be fanout or interest")
        if self["amqp-exchange"] is None:
            self["amqp-exchange"] = (DEFAULT_ROUTED_EXCHANGE if self["amqp-routing"] == "interest"
                                     else DEFAULT_EXCHANGE)
        if not SLOT_NAME.match(self["slot"]):
            raise usage.UsageError("--slot is 1 to 63 of a-z, 0-9 and _")
        publication = self["publication"]
        if not publication or len(publication) > 63 or "\0" in publication:
            raise usage.UsageError("--publication is 1 to 63 characters")
        if self["max-message-changes"] < 1:
            raise usage.UsageError("--max-message-changes must be at least 1")
        views = self["views"]
        if views is not None and not os.path.isfile(views):
            raise usage.UsageError(f"--views: no such file {views!r}")
        try:
            catalog = load_catalog(views)
        except ViewDefinitionError as e:
            raise usage.UsageError(f"--views: {one_line(str(e))}") from None
        if not catalog.tables:
            raise usage.UsageError(
                f"the views file {views or '(built-in)'} maps no type to a table: the relay "
                f"publishes the changes of the tables the views file names, e.g. "
                f"types: {{Stream: {{id: id, table: streams}}}}")
        self.catalog = catalog


class CdcService(MultiService):
    """The relay as a service: the broker link, the WAL reader and the relay.

    On start it connects to the broker and checks the database (the mapped
    tables, the publication, the slot); a ``MappingError`` calls
    ``on_fatal(text)``, a database it cannot reach is checked again with a
    growing wait; then the reader streams. On stop the relay drains what is
    in flight, then the reader and the link close.
    """

    def __init__(self, reactor: Any, options: Options, catalog: Catalog,
                 on_fatal: Callable[[str], None] | None = None, *,
                 reader_options: dict[str, Any] | None = None,
                 link_options: dict[str, Any] | None = None,
                 drain_timeout: float = 10.0) -> None:
        """``reader_options``, ``link_options``: more keyword arguments of
        the ``WalReader`` and the ``PublishLink`` (tests: shorter waits);
        ``drain_timeout``: how long a stop waits for the broker's confirms."""
        super().__init__()
        self.reactor = reactor
        self.options = options
        self.on_fatal = on_fatal
        self.drain_timeout = drain_timeout
        self.exit_status = 0
        self.gaps = 0
        self._check_delay = CHECK_RETRY
        self._check_timer: IDelayedCall | None = None
        self._said: str | None = None
        interest = options["amqp-routing"] == "interest"
        route: Callable[[Change], Sequence[str]] | None = None
        if interest:
            routes = catalog.routes

            def route(change: Change) -> Sequence[str]:
                return change_keys(change, routes)

        self.link = PublishLink(reactor, options["amqp"], options["amqp-exchange"],
                                exchange_type="topic" if interest else "fanout",
                                name=f"pushengine-cdc {options['slot']}",
                                **(link_options or {}))
        self.relay = Relay(self.link.publish, route, clock=reactor,
                           max_changes=options["max-message-changes"],
                           gap_keys=(BROADCAST,) if interest else ("",))
        self.link.on_ready = self.relay.broker_ready
        self.link.on_lost = self.relay.broker_lost
        self.reader = WalReader(reactor, options["database"], catalog, slot=options["slot"],
                                publication=options["publication"],
                                deliver=self.relay.deliver, on_gap=self._gap,
                                **(reader_options or {}))
        self.relay.attach(self.reader)
        if options["port"]:
            site = Site(_Status(self))
            site.noisy = False
            strports.service(options["port"], site).setServiceParent(self)

    def startService(self) -> None:
        super().startService()
        log.info("pushengine-cdc: slot {slot}, publication {publication}, exchange {exchange} "
                 "({routing})", slot=self.options["slot"],
                 publication=self.options["publication"],
                 exchange=self.options["amqp-exchange"], routing=self.options["amqp-routing"])
        self.link.start()
        self._check()

    def _check(self) -> None:
        self._check_timer = None
        checked = self.reader.check()
        checked.addCallbacks(self._checked, self._check_failed)
        checked.addErrback(lambda f: log.failure("pushengine-cdc: starting failed", f))

    def _checked(self, _: object) -> None:
        if self.running:
            self.reader.start()

    def _check_failed(self, failure: Failure) -> None:
        if not self.running:
            return
        if failure.check(MappingError):
            self.fatal(one_line(str(failure.value)))
            return
        text = one_line(str(failure.value)) or type(failure.value).__name__
        if text != self._said:
            self._said = text
            log.warn("pushengine-cdc: cannot check the database: {why}; trying again",
                     why=text)
        self._check_timer = self.reactor.callLater(self._check_delay, self._check)
        self._check_delay = min(self._check_delay * 1.5, CHECK_RETRY_MAX)

    def fatal(self, text: str) -> None:
        """Stop the process with exit status 1, saying ``text``."""
        self.exit_status = EXIT_FAILED
        log.critical("pushengine-cdc: {text}", text=text)
        if self.on_fatal is not None:
            self.on_fatal(text)

    def _gap(self) -> None:
        # a TRUNCATE of a mapped table, a row not read whole, or a slot made
        # afresh: changes the nodes should have seen are not in the stream
        self.gaps += 1
        log.warn("pushengine-cdc: the WAL stream has a gap (a TRUNCATE of a mapped table, a "
                 "row that could not be read whole, or a slot created afresh): the nodes are "
                 "told to read their views again")
        self.relay.gap()

    def stopService(self) -> Deferred[None]:
        if self._check_timer is not None and self._check_timer.active():
            self._check_timer.cancel()
        self._check_timer = None
        stopping: Deferred[Any] = Deferred.fromCoroutine(self._stop())
        stopping.addErrback(lambda f: log.failure("pushengine-cdc: stopping failed", f))
        return stopping

    async def _stop(self) -> None:
        await self.relay.stop(self.drain_timeout)
        await self.link.stop()
        await MultiService.stopService(self)
        s = self.relay.stats()
        log.info("pushengine-cdc: stopped; {transactions} transaction(s), {messages} "
                 "message(s), {changes} change(s) published, confirmed up to {lsn}",
                 transactions=s["transactions"], messages=s["messages"],
                 changes=s["changes"], lsn=self.relay.health()["confirmed_lsn"])

    def health(self) -> dict[str, Any]:
        reader = self.reader.health()
        broker = self.link.health()
        return {"up": bool(reader["up"]) and bool(broker["up"]), "relay": self.relay.health(),
                "reader": reader, "broker": broker}

    def figures(self) -> dict[str, dict[str, float]]:
        relay = dict(self.relay.stats())
        relay["gaps"] = self.gaps
        return {"relay": relay, "reader": self.reader.stats(), "broker": self.link.stats()}


# /metrics: (source, figure) -> (kind, help); what only grows is a counter
COUNTER, GAUGE = "counter", "gauge"
FIGURES: dict[tuple[str, str], tuple[str, str]] = {
    ("relay", "transactions"): (COUNTER, "Transactions whose every message the broker "
                                         "confirmed"),
    ("relay", "messages"): (COUNTER, "Messages the broker confirmed"),
    ("relay", "changes"): (COUNTER, "Row changes in messages the broker confirmed"),
    ("relay", "confirmed_lsn"): (GAUGE, "The last position confirmed to PostgreSQL (an LSN "
                                        "as a number)"),
    ("relay", "unconfirmed_transactions"): (GAUGE, "Transactions taken from the WAL and not "
                                                   "yet confirmed by the broker"),
    ("relay", "unconfirmed_messages"): (GAUGE, "Messages not yet confirmed by the broker "
                                               "(sent or held)"),
    ("relay", "unconfirmed_changes"): (GAUGE, "Row changes not yet confirmed by the broker"),
    ("relay", "failures"): (COUNTER, "Times a message was not confirmed and the relay held "
                                     "and sent again"),
    ("relay", "resends"): (COUNTER, "Times the unconfirmed transactions were sent again"),
    ("relay", "skipped_transactions"): (COUNTER, "Transactions the reader delivered again "
                                                 "after a reconnection, skipped"),
    ("relay", "pauses"): (COUNTER, "Times the reader was paused for unconfirmed messages"),
    ("relay", "paused"): (GAUGE, "1 while the reader is paused"),
    ("relay", "gaps"): (COUNTER, "Gaps in the WAL stream (a TRUNCATE, a row not read whole, "
                                 "a slot created afresh)"),
    ("reader", "transactions"): (COUNTER, "Transactions read from the WAL"),
    ("reader", "changes"): (COUNTER, "Row changes read from the WAL"),
    ("reader", "skipped_rows"): (COUNTER, "Rows skipped (an id the engine cannot carry)"),
    ("reader", "gaps"): (COUNTER, "Gaps the reader reported"),
    ("reader", "reconnects"): (COUNTER, "Connections to PostgreSQL tried again"),
    ("reader", "up"): (GAUGE, "1 while the reader streams"),
    ("reader", "waiting"): (GAUGE, "1 while another process holds the slot"),
    ("reader", "unconfirmed_bytes"): (GAUGE, "WAL bytes received and not yet confirmed"),
    ("reader", "status_messages"): (COUNTER, "Status messages sent to PostgreSQL"),
    ("broker", "connected"): (GAUGE, "1 while connected to RabbitMQ"),
    ("broker", "reconnects"): (COUNTER, "Connections to RabbitMQ made again"),
    ("broker", "connect_failures"): (COUNTER, "Attempts to connect to RabbitMQ that failed"),
    ("broker", "messages_published"): (COUNTER, "Messages published (sent again included)"),
    ("broker", "unconfirmed"): (GAUGE, "Publishes waiting for the broker's confirm"),
}


class _Collector:
    """The relay's figures for prometheus_client, read at scrape time."""

    def __init__(self, service: CdcService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        for source, values in self.service.figures().items():
            for figure, value in values.items():
                kind, help_ = FIGURES.get((source, figure), (GAUGE, figure))
                name = f"pushengine_cdc_{source}_{figure}"
                if kind == COUNTER:
                    counter = CounterMetricFamily(name, help_)
                    counter.add_metric([], value)
                    yield counter
                else:
                    gauge = GaugeMetricFamily(name, help_)
                    gauge.add_metric([], value)
                    yield gauge


class _Status(Resource):
    """``/health`` (200 while the reader streams and the broker is connected,
    else 503; JSON) and ``/metrics`` (Prometheus text format)."""

    isLeaf = True

    def __init__(self, service: CdcService) -> None:
        super().__init__()
        self.service = service
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(service))

    def render_GET(self, request: Request) -> bytes:
        if request.path == b"/health":
            health = self.service.health()
            request.setResponseCode(200 if health["up"] else 503)
            request.setHeader(b"content-type", b"application/json")
            return json.dumps(health).encode("utf-8")
        if request.path == b"/metrics":
            request.setHeader(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
            return generate_latest(self.registry)
        request.setResponseCode(404)
        return b"not found\n"


def build(options: Options, reactor: Any,
          on_fatal: Callable[[str], None] | None = None) -> CdcService:
    assert options.catalog is not None, "parse the options first"
    return CdcService(reactor, options, options.catalog, on_fatal)


def makeService(options: Options) -> CdcService:
    """The twistd plugin's service. A mapped table that cannot be followed
    stops twistd with exit status 1 (twistd itself always exits 0)."""
    from twisted.internet import reactor

    def fatal(text: str) -> None:
        # twistd sends sys.stderr to its log (which has the line already):
        # the process's own stderr, for whoever started it
        stderr = sys.__stderr__ or sys.stderr
        stderr.write(f"pushengine-cdc: {text}\n")
        stderr.flush()
        atexit.register(_exit_with, EXIT_FAILED)
        reactor.stop()

    return build(options, reactor, fatal)


def _exit_with(status: int) -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: runs the relay until SIGTERM or SIGINT, logging
    to stderr; exit status 1 with one line on bad options or a table that
    cannot be followed."""
    options = Options()
    options.synopsis = "Usage: pushengine-cdc " + Options.synopsis
    try:
        options.parseOptions(list(sys.argv[1:] if argv is None else argv))
    except usage.UsageError as e:
        sys.stderr.write(f"pushengine-cdc: {one_line(str(e))} (see pushengine-cdc --help)\n")
        sys.exit(EXIT_FAILED)
    from twisted.internet import reactor

    core: IReactorCore = reactor
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)],
                                      redirectStandardIO=False)
    failure: list[str] = []

    def fatal(text: str) -> None:
        failure.append(text)
        core.stop()

    service = build(options, reactor, fatal)
    core.callWhenRunning(service.startService)
    core.addSystemEventTrigger("before", "shutdown", service.stopService)
    core.run()
    if failure:
        sys.stderr.write(f"pushengine-cdc: {failure[0]}\n")
    sys.exit(service.exit_status)


__all__ = ["CdcService", "Options", "main", "makeService"]

if __name__ == "__main__":
    main()
