"""``twistd pushengine``: the command-line options and the service they build.

Every option also reads the environment variable ``PUSHENGINE_<NAME>``
(upper case, dashes as underscores); the command line wins.
"""
from __future__ import annotations

import math
import os
import re
import socket
from typing import Any

from twisted.application.service import MultiService
from twisted.python import usage

from pushengine.app import gcfreeze, logs
from pushengine.web.clients import parse_networks

MIB = 1 << 20

# name, default, help, parser (None: a string)
PARAMETERS: list[tuple[str, Any, str, Any]] = [
    ("port", "tcp:8080", "Where HTTP listens (a strports description).", None),
    ("views", None, "Views file (YAML or JSON); the built-in Stream views by default.", None),
    ("seed", None, "JSON-lines file of objects or changes to load into the in-process store.",
     None),
    ("api-key", None, "An API key clients must present (?apikey= or X-Api-Key).", None),
    ("api-keys", None, "File of API keys, one per line.", None),
    ("publish-key", None, "Bearer key for POST /api/publish (else loopback only).", None),
    ("secret", None, "HS256 secret that signs session.authorize tokens (JWT).", None),
    ("jwks", None, "JSON Web Key Set file: its RSA (RS256) and P-256 (ES256) public keys "
     "verify tokens whose header names them by kid, besides --secret.", None),
    ("cors-origin", None, "Origin allowed to call the API from a browser.", None),
    ("session-timeout", 120.0, "Seconds without a poll before a session is destroyed.", float),
    ("max-timeout", 90.0, "Longest get_events wait in seconds.", float),
    ("header-timeout", 10.0, "Seconds a connection has to send a request's headers.", float),
    ("idle-timeout", None, "Seconds a connection may stay idle between requests "
                           "(default: --max-timeout + 30).", float),
    ("body-timeout", 30.0, "Seconds a request body has to arrive whole after its headers "
     "(plus one per 64 KiB past the first 64 KiB; then 408 and closed).", float),
    ("max-client-connections", 256, "Connections one client (address) may hold open at once "
     "(0: no limit).", int),
    ("max-sessions", 0, "Sessions one node holds at most (0: no limit).", int),
    ("max-subscriptions", 50, "Subscriptions per session.", int),
    ("max-queue", 1000, "Events queued per session before it gets a reset.", int),
    ("max-body", MIB, "Largest request body in bytes (HTTP 413 above).", int),
    ("max-batch", 100, "Calls in one JSON-RPC batch.", int),
    ("max-segment-body", 1 << 30, "Largest segment upload (POST /api/segments/NAME) in "
     "bytes.", int),
    ("bloom-max-bytes", 1 << 29, "Bytes all Bloom filters of this node may take together "
     "(in Redis: the filters this node created or added to).", int),
    ("segment-min", 100, "Valid unique entries a segment upload needs at least.", int),
    ("http", "fast", "The HTTP front: fast (a lean parser answers JSON-RPC and publish, "
     "twisted.web the rest) or twisted (twisted.web for everything).", None),
    ("max-client-sessions", 100, "Sessions one client (address) may hold (0: no limit).", int),
    ("client-rate", 200.0, "JSON-RPC calls per second one client may make, bursts of twice "
     "that (0: no limit).", float),
    ("trusted-proxies", None, "CIDRs of reverse proxies whose X-Forwarded-For names the "
     "client, e.g. 127.0.0.1/32,10.0.0.0/8.", None),
    ("ping-interval", 30.0, "Seconds between pings of a quiet view.", float),
    ("sse-ping", 15.0, "Seconds of silence after which an SSE stream gets a ': ping' comment "
     "(within a second more): keeps proxies from closing quiet streams.", float),
    ("ws-ping", 30.0, "Seconds of silence after which a WebSocket gets a ping frame (within a "
     "second more): keeps proxies from closing quiet sockets and finds dead peers.", float),
    ("stream-ping", None, "Sets --sse-ping and --ws-ping at once.", float),
    ("ready-grace", 30.0, "Seconds the change feed may be down before GET /health/ready "
     "answers 503: meanwhile clients are served from what the node holds (0: not ready as "
     "soon as the feed is down).", float),
    ("drain-delay", 0.0, "On SIGTERM or SIGINT, seconds the node goes on serving after "
     "GET /health/ready turned 503, so that a balancer takes it out before it stops taking "
     "connections (docs/deploy.md, \"Stopping a node\").", float),
    ("shutdown-timeout", 10.0, "Seconds from SIGTERM or SIGINT (the drain delay included) "
     "within which the node exits: its polls answered, its streams ended, its calls "
     "finished; what is still open then is cut.", float),
    ("online-period", 60.0, "Seconds a polling session counts as online.", float),
    ("amqp", None, "RabbitMQ URL, amqp://user:pass@host:5672/vhost.", None),
    ("amqp-exchange", None, "The exchange of changes (default pushengine.changes, a fanout "
     "exchange; with --amqp-routing interest pushengine.routed, a topic exchange).", None),
    ("amqp-routing", "fanout", "fanout: every node receives every change; interest: a node "
     "receives the changes its views can show (routing fields, docs/amqp.md).", None),
    ("amqp-prefetch", 2000, "AMQP messages in flight to this node (basic.qos): the messages "
     "of one read are applied and acked together.", int),
    ("gc-freeze", 50_000, "After start-up, freeze the objects that exist (gc.freeze) and "
     "collect the young generation every N allocations: fewer collector pauses with many "
     "connections held (0: CPython's defaults).", int),
    ("node-id", None, "This node's name (queue name, metrics); default host-port.", None),
    ("memcache", None, "memcached servers host:port[,host:port...].", None),
    ("redis", None, "Redis URL of the session registry, redis://host:6379/0.", None),
    ("store-url", None, "Where a view's initial state comes from: an http(s):// backend, or "
     "postgresql://user:pass@host/db to read the views' tables (docs/postgres.md).", None),
    ("feed-url", None, "postgresql://...: follow that database's WAL inside this node, no "
     "broker (one node on its database; docs/postgres.md).", None),
    ("amqp-format", "json", "What the exchange carries: json (the engine's change messages) "
     "or debezium (Debezium's change events; docs/amqp.md).", None),
    ("pg-pool", 4, "Connections (and threads) the PostgreSQL store reads with.", int),
    ("pg-timeout", 5.0, "Seconds one SQL statement of the PostgreSQL store may run "
     "(statement_timeout); a subscription waiting on it then answers error 1012.", float),
    ("demo-rate", 3.0, "Changes per second of --demo.", float),
    ("namespace", None, "Also answer every method as NAME.<method>, as the original "
     "engine's clients call it (e.g. qik: qik.session.create).", None),
    ("webhook-url", None, "POST every session event (created, authorized, destroyed, "
     "expired) to this http(s) URL.", None),
    ("webhook-secret", None, "Sign webhook bodies with HMAC-SHA256 under this secret "
     "(X-Pushengine-Signature).", None),
    ("webhook-queue", 10000, "Webhook events waiting at most; more are dropped and counted.",
     int),
    ("log-format", "text", "The log's lines: text (twistd's) or json (one JSON object per "
     "line: time, level, namespace, message and the event's fields), written where "
     "--logfile says.", None),
    ("otlp-endpoint", None, "Export spans (OpenTelemetry) of JSON-RPC calls, initial-state "
     "reads and change applications over OTLP/HTTP to this URL, e.g. "
     "http://collector:4318/v1/traces (needs the otel extra: pip install "
     "'pushengine[otel]'; docs/api.md, Traces).", None),
    ("trace-sample", 0.01, "With --otlp-endpoint: the share (0 to 1) of the traces that start "
     "on this node which are sampled; a request's traceparent decides for its own trace.",
     float),
    ("admin-key", None, "Open /admin/ and the admin.* methods to whoever gives this key "
     "(at least 16 characters; closed without it). Prefer PUSHENGINE_ADMIN_KEY: a command "
     "line is visible to every user of the machine.", None),
]
FLAGS = [
    ("demo", None, "Run a producer of fake streams and users inside the process."),
    ("access-log", None, "Log every HTTP request (off by default: every poll is one)."),
]


NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,49}(\.[A-Za-z_][A-Za-z0-9_]{0,49}){0,3}$")


def env_name(option: str) -> str:
    return "PUSHENGINE_" + option.upper().replace("-", "_")


class Options(usage.Options):
    optParameters = [[name, None, default, help_] for name, default, help_, _ in PARAMETERS]
    optFlags = [[name, short, help_] for name, short, help_ in FLAGS]

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        super().__init__()
        self.environ = os.environ if environ is None else environ
        for name, _, _, _ in PARAMETERS:
            value = self.environ.get(env_name(name))
            if value is not None and value != "":
                self[name] = value
        for name, _, _ in FLAGS:
            value = self.environ.get(env_name(name), "").lower()
            if value in ("1", "true", "yes", "on"):
                self[name] = 1

    def postOptions(self) -> None:
        for name, default, _, parse in PARAMETERS:
            value = self[name]
            if parse is not None and isinstance(value, str):
                try:
                    self[name] = parse(value)
                except ValueError:
                    raise usage.UsageError(f"--{name} must be a number, not {value!r}")
        if self["idle-timeout"] is None:
            self["idle-timeout"] = self["max-timeout"] + 30.0
        if self["stream-ping"] is not None:
            self["sse-ping"] = self["ws-ping"] = self["stream-ping"]
        for name in ("session-timeout", "max-timeout", "ping-interval", "sse-ping", "ws-ping",
                     "online-period",
                     "demo-rate", "header-timeout", "idle-timeout", "body-timeout"):
            if not self[name] > 0 or not math.isfinite(self[name]):
                raise usage.UsageError(f"--{name} must be a number greater than 0")
        for name in ("max-subscriptions", "max-queue", "max-body", "max-batch",
                     "max-segment-body", "bloom-max-bytes"):
            if self[name] < 1:
                raise usage.UsageError(f"--{name} must be at least 1")
        if self["segment-min"] < 1:
            raise usage.UsageError("--segment-min must be at least 1")
        if not (self["ready-grace"] >= 0 and math.isfinite(self["ready-grace"])):
            raise usage.UsageError("--ready-grace must be 0 or more seconds")
        if not (self["shutdown-timeout"] > 0 and math.isfinite(self["shutdown-timeout"])):
            raise usage.UsageError("--shutdown-timeout must be a number greater than 0")
        if not (0 <= self["drain-delay"] < self["shutdown-timeout"]):
            raise usage.UsageError("--drain-delay must be 0 or more seconds, and less than "
                                   "--shutdown-timeout (which counts from the signal)")
        if self["max-sessions"] < 0:
            raise usage.UsageError("--max-sessions must be 0 (no limit) or more")
        if self["log-format"] not in logs.FORMATS:
            raise usage.UsageError("--log-format must be text or json")
        if self["http"] not in ("fast", "twisted"):
            raise usage.UsageError("--http must be fast or twisted")
        if self["max-client-connections"] < 0:
            raise usage.UsageError("--max-client-connections must be 0 (no limit) or more")
        if self["max-client-sessions"] < 0:
            raise usage.UsageError("--max-client-sessions must be 0 (no limit) or more")
        if not (self["client-rate"] >= 0 and math.isfinite(self["client-rate"])):
            raise usage.UsageError("--client-rate must be 0 (no limit) or more")
        try:
            if not isinstance(self["trusted-proxies"], list):
                self["trusted-proxies"] = parse_networks(self["trusted-proxies"])
        except ValueError as e:
            raise usage.UsageError(f"--trusted-proxies: {e}") from None
        if self["gc-freeze"] < 0:
            raise usage.UsageError("--gc-freeze must be 0 (off) or more")
        if self["amqp"] and not re.match(r"^amqps?://", self["amqp"]):
            raise usage.UsageError("--amqp must be an amqp:// URL")
        if not 1 <= self["amqp-prefetch"] <= 65535:
            raise usage.UsageError("--amqp-prefetch must be 1 to 65535")
        if self["amqp-routing"] not in ("fanout", "interest"):
            raise usage.UsageError("--amqp-routing must be fanout or interest")
        if self["amqp-exchange"] is None:
            self["amqp-exchange"] = ("pushengine.routed" if self["amqp-routing"] == "interest"
                                     else "pushengine.changes")
        if self["redis"] and not re.match(r"^rediss?://", self["redis"]):
            raise usage.UsageError("--redis must be a redis:// URL")
        if self["store-url"] and not re.match(r"^(https?|postgres(ql)?)://", self["store-url"]):
            raise usage.UsageError("--store-url must be an http(s):// or postgresql:// URL")
        if self["feed-url"] and not re.match(r"^postgres(ql)?://", self["feed-url"]):
            raise usage.UsageError("--feed-url must be a postgresql:// URL")
        if self["feed-url"] and self["amqp"]:
            raise usage.UsageError("--feed-url and --amqp are two change feeds: give one "
                                   "(with a broker, run pushengine-cdc instead)")
        if self["amqp-format"] not in ("json", "debezium"):
            raise usage.UsageError("--amqp-format must be json or debezium")
        if self["pg-pool"] < 1 or self["pg-pool"] > 100:
            raise usage.UsageError("--pg-pool must be 1 to 100")
        if not self["pg-timeout"] > 0 or not math.isfinite(self["pg-timeout"]):
            raise usage.UsageError("--pg-timeout must be a number greater than 0")
        if self["webhook-url"] and not re.match(r"^https?://", self["webhook-url"]):
            raise usage.UsageError("--webhook-url must be an http(s):// URL")
        if self["webhook-secret"] and not self["webhook-url"]:
            raise usage.UsageError("--webhook-secret needs --webhook-url")
        if not (0.0 <= self["trace-sample"] <= 1.0):
            raise usage.UsageError("--trace-sample must be a number from 0 to 1")
        if self["otlp-endpoint"] is not None:
            if not re.match(r"^https?://[^/\s]+", self["otlp-endpoint"]):
                raise usage.UsageError("--otlp-endpoint must be an http(s):// URL, e.g. "
                                       "http://collector:4318/v1/traces")
            missing = tracing_missing()
            if missing is not None:
                raise usage.UsageError(missing_tracing(missing))
        if self["webhook-queue"] < 1:
            raise usage.UsageError("--webhook-queue must be at least 1")
        if self["admin-key"] is not None and (len(self["admin-key"]) < 16
                                              or self["admin-key"] != self["admin-key"].strip()):
            raise usage.UsageError("--admin-key must be at least 16 characters, without "
                                   "spaces around it")
        if self["memcache"]:
            for server in self["memcache"].split(","):
                if not re.match(r"^[^:,\s]+:\d{1,5}$", server.strip()):
                    raise usage.UsageError(f"--memcache: {server!r} is not host:port")
        for name in ("views", "seed", "api-keys"):
            if self[name] and not os.path.isfile(self[name]):
                raise usage.UsageError(f"--{name}: no such file {self[name]!r}")
        if not self["node-id"]:
            port = re.findall(r"\d+", self["port"])
            self["node-id"] = f"{socket.gethostname()}-{port[0] if port else '0'}"
        if not re.match(r"^[A-Za-z0-9_.:-]{1,100}$", self["node-id"]):
            raise usage.UsageError("--node-id may hold letters, digits and _ . : - only")
        if self["namespace"] is not None and not NAMESPACE.match(self["namespace"]):
            raise usage.UsageError("--namespace must be a name such as qik (letters, digits "
                                   "and _, not starting with a digit; dots between parts)")


def tracing_missing() -> str | None:
    """The module of the ``otel`` extra that is not installed, or None."""
    from importlib.util import find_spec
    for module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http"):
        try:
            if find_spec(module) is None:
                return module
        except ImportError:
            return module
    return None


def missing_tracing(module: str | None) -> str:
    """The usage error of ``--otlp-endpoint`` on an install without the
    ``otel`` extra."""
    return (f"--otlp-endpoint needs OpenTelemetry, which is not installed "
            f"({module or 'opentelemetry'} is missing): install the otel extra, "
            f"pip install 'pushengine[otel]'")


def tune_gc() -> None:
    """The collector's settings of a node with the default ``--gc-freeze``
    (for benchmarks that build a node without ``makeService``)."""
    gcfreeze.freeze(gcfreeze.DEFAULT)


def makeService(options: Options) -> MultiService:
    from twisted.internet import reactor

    from pushengine.app.service import build_service
    try:
        service = build_service(options, reactor)
    except usage.UsageError as e:
        # found while building (a bad views file, a name clash): one line on
        # stderr and exit status 1, as twistd's own usage errors, not a traceback
        raise SystemExit(f"twistd pushengine: {one_line(str(e))}") from None
    gcfreeze.after_start(reactor, options["gc-freeze"])
    _choose_log(options, service)
    return service


def _choose_log(options: Options, service: MultiService) -> None:
    """``--log-format json``: the log observer twistd takes from the
    application (``logs.NodeServices``), writing where twistd would."""
    server = getattr(options, "parent", None)      # twistd's own options
    if options["log-format"] != "json" or server is None:
        return
    if server.get("syslog"):
        raise SystemExit("twistd pushengine: --log-format json writes to --logfile or "
                         "standard output, not to syslog")
    if server.get("logger"):
        return                                      # twistd's --logger wins
    if isinstance(service, logs.NodeServices):
        service.log_observer = logs.json_observer(logs.twistd_log_file(server))


def one_line(text: str) -> str:
    """A message on one line, whatever it quotes."""
    return " ".join(text.split())
