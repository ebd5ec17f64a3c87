"""``twistd pushengine``: its options (SPEC section 1) and the plugin itself."""
from __future__ import annotations

import re
import socket

import pytest
from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.python import usage

from pushengine.app.tap import PARAMETERS, Options, env_name

DEFAULTS = {
    "port": "tcp:8080",
    "views": None,
    "seed": None,
    "api-key": None,
    "api-keys": None,
    "publish-key": None,
    "secret": None,
    "jwks": None,
    "cors-origin": None,
    "session-timeout": 120.0,
    "max-timeout": 90.0,
    "header-timeout": 10.0,
    "idle-timeout": 120.0,
    "body-timeout": 30.0,
    "max-client-connections": 256,
    "max-sessions": 0,
    "max-subscriptions": 50,
    "max-queue": 1000,
    "max-body": 1048576,
    "max-batch": 100,
    "max-segment-body": 1 << 30,
    "segment-min": 100,
    "bloom-max-bytes": 1 << 29,
    "http": "fast",
    "max-client-sessions": 100,
    "client-rate": 200.0,
    "trusted-proxies": [],
    "ping-interval": 30.0,
    "sse-ping": 15.0,
    "ws-ping": 30.0,
    "stream-ping": None,
    "online-period": 60.0,
    "amqp": None,
    "amqp-exchange": "pushengine.changes",
    "amqp-routing": "fanout",
    "amqp-prefetch": 2000,
    "gc-freeze": 50_000,
    "memcache": None,
    "redis": None,
    "store-url": None,
    "feed-url": None,
    "amqp-format": "json",
    "pg-pool": 4,
    "pg-timeout": 5.0,
    "demo-rate": 3.0,
    "demo": 0,
    "namespace": None,
    "webhook-url": None,
    "webhook-secret": None,
    "webhook-queue": 10000,
    "admin-key": None,
    "ready-grace": 30.0,
    "drain-delay": 0.0,
    "shutdown-timeout": 10.0,
    "log-format": "text",
    "otlp-endpoint": None,
    "trace-sample": 0.01,
}


def parse(*argv: str, environ: dict[str, str] | None = None) -> Options:
    options = Options(environ=environ or {})
    options.parseOptions(list(argv))
    return options


@pytest.fixture
def files(tmp_path):
    views = tmp_path / "views.yaml"
    views.write_text("views:\n  V: {type: Stream}\n")
    seed = tmp_path / "seed.jsonl"
    seed.write_text('{"id": 1}\n')
    keys = tmp_path / "keys.txt"
    keys.write_text("k1\n")
    return {"views": str(views), "seed": str(seed), "api-keys": str(keys)}


def test_defaults() -> None:
    options = parse()
    for name, value in DEFAULTS.items():
        assert options[name] == value, name
        assert type(options[name]) is type(value), name
    assert options["node-id"] == f"{socket.gethostname()}-8080"


def test_every_parameter_has_a_default_here() -> None:
    assert {name for name, *_ in PARAMETERS} | {"demo"} == set(DEFAULTS) | {"node-id"}


def test_every_option_parsed_and_typed(files) -> None:
    options = parse(
        "--port", "tcp:9999:interface=127.0.0.1", "--views", files["views"],
        "--seed", files["seed"], "--api-key", "k0", "--api-keys", files["api-keys"],
        "--publish-key", "pk", "--secret", "jwt-secret", "--cors-origin", "https://a.example",
        "--session-timeout", "30", "--max-timeout", "12.5", "--max-sessions", "1000",
        "--max-subscriptions", "5", "--max-queue", "20", "--max-body", "4096",
        "--max-batch", "7", "--ping-interval", "2.5", "--online-period", "15",
        "--amqp", "amqp://u:p@rabbit:5672/%2f", "--amqp-exchange", "x.changes",
        "--node-id", "node-1", "--memcache", "mc1:11211, mc2:11212",
        "--redis", "redis://r:6379/2", "--store-url", "http://backend/state",
        "--demo", "--demo-rate", "10")
    expected = {
        "port": "tcp:9999:interface=127.0.0.1", "views": files["views"], "seed": files["seed"],
        "api-key": "k0", "api-keys": files["api-keys"], "publish-key": "pk",
        "secret": "jwt-secret", "cors-origin": "https://a.example",
        "session-timeout": 30.0, "max-timeout": 12.5, "max-sessions": 1000,
        "max-subscriptions": 5, "max-queue": 20, "max-body": 4096, "max-batch": 7,
        "ping-interval": 2.5, "online-period": 15.0, "amqp": "amqp://u:p@rabbit:5672/%2f",
        "amqp-exchange": "x.changes", "node-id": "node-1", "memcache": "mc1:11211, mc2:11212",
        "redis": "redis://r:6379/2", "store-url": "http://backend/state", "demo": 1,
        "demo-rate": 10.0,
    }
    for name, value in expected.items():
        assert options[name] == value, name
        assert type(options[name]) is type(value), name


def test_equals_form_and_float_for_int_free_options() -> None:
    options = parse("--max-timeout=5", "--session-timeout=1e3")
    assert options["max-timeout"] == 5.0 and options["session-timeout"] == 1000.0


def test_environment_fallbacks(files) -> None:
    environ = {
        "PUSHENGINE_PORT": "tcp:7000", "PUSHENGINE_MAX_TIMEOUT": "45",
        "PUSHENGINE_MAX_SESSIONS": "3", "PUSHENGINE_SECRET": "env-secret",
        "PUSHENGINE_JWKS": "/etc/keys.json",
        "PUSHENGINE_VIEWS": files["views"], "PUSHENGINE_AMQP": "amqp://guest:guest@h/",
        "PUSHENGINE_AMQP_EXCHANGE": "env.x", "PUSHENGINE_DEMO": "true",
        "PUSHENGINE_CORS_ORIGIN": "*", "PUSHENGINE_MAX_BODY": "2048",
        "PUSHENGINE_UNRELATED": "x",
    }
    options = parse(environ=environ)
    assert options["port"] == "tcp:7000"
    assert options["max-timeout"] == 45.0
    assert options["max-sessions"] == 3 and type(options["max-sessions"]) is int
    assert options["secret"] == "env-secret"
    assert options["jwks"] == "/etc/keys.json"
    assert options["views"] == files["views"]
    assert options["amqp"] == "amqp://guest:guest@h/"
    assert options["amqp-exchange"] == "env.x"
    assert options["demo"] == 1
    assert options["cors-origin"] == "*"
    assert options["max-body"] == 2048
    assert options["node-id"].endswith("-7000")


def test_command_line_wins_over_the_environment() -> None:
    environ = {"PUSHENGINE_PORT": "tcp:7000", "PUSHENGINE_MAX_TIMEOUT": "45",
               "PUSHENGINE_SECRET": "env"}
    options = parse("--port", "tcp:7001", "--max-timeout", "5", "--secret", "cli",
                    environ=environ)
    assert (options["port"], options["max-timeout"], options["secret"]) == ("tcp:7001", 5.0,
                                                                         "cli")


def test_amqp_prefetch() -> None:
    assert parse("--amqp-prefetch", "50")["amqp-prefetch"] == 50
    assert parse(environ={"PUSHENGINE_AMQP_PREFETCH": "300"})["amqp-prefetch"] == 300
    for bad in ("0", "65536"):
        with pytest.raises(usage.UsageError, match="--amqp-prefetch must be 1 to 65535"):
            parse("--amqp-prefetch", bad)


def test_amqp_routing_and_its_exchange() -> None:
    assert parse("--amqp-routing", "interest")["amqp-exchange"] == "pushengine.routed"
    assert parse("--amqp-routing", "fanout")["amqp-exchange"] == "pushengine.changes"
    options = parse("--amqp-routing", "interest", "--amqp-exchange", "x.routed")
    assert (options["amqp-routing"], options["amqp-exchange"]) == ("interest", "x.routed")
    assert parse(environ={"PUSHENGINE_AMQP_ROUTING": "interest"})["amqp-routing"] == "interest"
    with pytest.raises(usage.UsageError, match="--amqp-routing must be fanout or interest"):
        parse("--amqp-routing", "topic")


def test_environment_names() -> None:
    assert env_name("max-timeout") == "PUSHENGINE_MAX_TIMEOUT"
    assert env_name("api-keys") == "PUSHENGINE_API_KEYS"
    assert env_name("node-id") == "PUSHENGINE_NODE_ID"


@pytest.mark.parametrize("name", [n for n, _, _, parse in PARAMETERS if parse is None
                                  and n not in ("views", "seed", "api-keys", "amqp", "redis",
                                                "store-url", "memcache", "trusted-proxies",
                                                "namespace", "http", "webhook-url",
                                                "webhook-secret", "admin-key",
                                                "amqp-routing", "feed-url", "amqp-format",
                                                "log-format", "otlp-endpoint")])
def test_every_string_option_reads_its_variable(name: str) -> None:
    value = "tcp:1234" if name == "port" else "value-1"
    assert parse(environ={env_name(name): value})[name] == value


@pytest.mark.parametrize("name", [n for n, _, _, parse in PARAMETERS
                                  if parse is not None and n != "trace-sample"])
def test_every_number_option_reads_its_variable(name: str) -> None:
    options = parse(environ={env_name(name): "7"})
    kind = float if DEFAULTS[name] is None else type(DEFAULTS[name])   # none unless given
    assert options[name] == 7 and type(options[name]) is kind


def test_the_tracing_options_read_their_variables() -> None:
    options = parse(environ={"PUSHENGINE_OTLP_ENDPOINT": "https://collector:4318/v1/traces",
                             "PUSHENGINE_TRACE_SAMPLE": "0.5"})
    assert options["otlp-endpoint"] == "https://collector:4318/v1/traces"
    assert options["trace-sample"] == 0.5
    with pytest.raises(usage.UsageError, match="--trace-sample must be a number from 0 to 1"):
        parse(environ={"PUSHENGINE_TRACE_SAMPLE": "7"})


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
def test_demo_flag_from_the_environment_off(value: str) -> None:
    assert parse(environ={"PUSHENGINE_DEMO": value})["demo"] == 0


def test_empty_environment_value_means_the_default() -> None:
    assert parse(environ={"PUSHENGINE_MAX_TIMEOUT": "", "PUSHENGINE_PORT": ""})["port"] == \
        "tcp:8080"


def test_reads_os_environ_by_default(monkeypatch) -> None:
    monkeypatch.setenv("PUSHENGINE_MAX_QUEUE", "77")
    options = Options()
    options.parseOptions([])
    assert options["max-queue"] == 77


@pytest.mark.parametrize("argv", [
    ["--max-timeout", "abc"], ["--max-timeout", "0"], ["--max-timeout", "-1"],
    ["--max-timeout", "nan"], ["--max-timeout", "inf"], ["--session-timeout", "-5"],
    ["--ping-interval", "0"], ["--online-period", "-1"], ["--demo-rate", "0"],
    ["--max-sessions", "-1"], ["--max-sessions", "1.5"], ["--max-sessions", "ten"],
    ["--max-subscriptions", "0"], ["--max-queue", "0"], ["--max-body", "0"],
    ["--max-body", "1MiB"], ["--max-body", "1e6"], ["--max-batch", "-3"],
    ["--amqp", "http://rabbit/"], ["--amqp", "rabbit:5672"],
    ["--redis", "http://r:6379"], ["--redis", "localhost:6379"],
    ["--store-url", "ftp://backend/"], ["--store-url", "backend/state"],
    ["--memcache", "mc1"], ["--memcache", "mc1:port"], ["--memcache", "mc1:11211,"],
    ["--memcache", "a:1:2"],
    ["--views", "/nonexistent/views.yaml"], ["--seed", "/nonexistent/seed.jsonl"],
    ["--api-keys", "/nonexistent/keys"],
    ["--node-id", "has space"], ["--node-id", "x" * 101], ["--node-id", "slash/y"],
    ["--no-such-option"], ["extra-argument"],
])
def test_usage_errors(argv: list[str]) -> None:
    with pytest.raises(usage.UsageError):
        parse(*argv)


@pytest.mark.parametrize("name, value", [
    ("PUSHENGINE_MAX_TIMEOUT", "soon"), ("PUSHENGINE_MAX_QUEUE", "-1"),
    ("PUSHENGINE_REDIS", "nope"), ("PUSHENGINE_VIEWS", "/nonexistent.yaml"),
])
def test_usage_errors_from_the_environment(name: str, value: str) -> None:
    with pytest.raises(usage.UsageError):
        parse(environ={name: value})


def test_views_directory_is_not_a_file(tmp_path) -> None:
    with pytest.raises(usage.UsageError):
        parse("--views", str(tmp_path))


def test_invalid_views_file_is_a_usage_error(tmp_path) -> None:
    from twisted.internet.task import Clock

    from pushengine.app.service import Node
    bad = tmp_path / "views.yaml"
    bad.write_text("views: [1, 2]\n")
    options = parse("--views", str(bad))
    with pytest.raises(usage.UsageError):
        Node(options, Clock())


def test_the_plugin_is_discoverable() -> None:
    makers = [p for p in getPlugins(IServiceMaker) if p.tapname == "pushengine"]
    assert len(makers) == 1
    maker = makers[0]
    assert maker.description
    assert isinstance(maker.options(), Options)
    assert callable(maker.makeService)


# -- connection deadlines (SPEC section 12) ---------------------------------------------

def test_connection_deadlines_default() -> None:
    options = parse()
    assert options["header-timeout"] == 10.0 and options["idle-timeout"] == 120.0
    assert type(options["header-timeout"]) is float and type(options["idle-timeout"]) is float


def test_idle_timeout_follows_max_timeout_unless_given() -> None:
    assert parse("--max-timeout", "5")["idle-timeout"] == 35.0
    assert parse(environ={"PUSHENGINE_MAX_TIMEOUT": "60"})["idle-timeout"] == 90.0
    assert parse("--max-timeout", "5", "--idle-timeout", "2")["idle-timeout"] == 2.0


def test_connection_deadlines_from_the_command_line_and_the_environment() -> None:
    options = parse("--header-timeout", "2.5", "--idle-timeout=40")
    assert (options["header-timeout"], options["idle-timeout"]) == (2.5, 40.0)
    options = parse(environ={"PUSHENGINE_HEADER_TIMEOUT": "3",
                             "PUSHENGINE_IDLE_TIMEOUT": "0.5"})
    assert (options["header-timeout"], options["idle-timeout"]) == (3.0, 0.5)
    options = parse("--header-timeout", "4", environ={"PUSHENGINE_HEADER_TIMEOUT": "3"})
    assert options["header-timeout"] == 4.0


@pytest.mark.parametrize("argv", [
    ["--header-timeout", "0"], ["--header-timeout", "-1"], ["--header-timeout", "nan"],
    ["--header-timeout", "inf"], ["--header-timeout", "soon"],
    ["--idle-timeout", "0"], ["--idle-timeout", "-30"], ["--idle-timeout", "inf"],
    ["--idle-timeout", "later"],
    ["--body-timeout", "0"], ["--body-timeout", "-1"], ["--body-timeout", "inf"],
    ["--body-timeout", "slow"], ["--max-client-connections", "-1"],
    ["--max-client-connections", "many"],
])
def test_connection_deadline_usage_errors(argv: list[str]) -> None:
    with pytest.raises(usage.UsageError, match=argv[0]):
        parse(*argv)


@pytest.mark.parametrize("name", ["PUSHENGINE_HEADER_TIMEOUT", "PUSHENGINE_IDLE_TIMEOUT"])
def test_connection_deadline_usage_errors_from_the_environment(name: str) -> None:
    with pytest.raises(usage.UsageError):
        parse(environ={name: "0"})


def test_trusted_proxies_are_networks() -> None:
    import ipaddress
    options = parse("--trusted-proxies", "127.0.0.1, 10.0.0.0/8,::1")
    assert options["trusted-proxies"] == [ipaddress.ip_network("127.0.0.1/32"),
                                          ipaddress.ip_network("10.0.0.0/8"),
                                          ipaddress.ip_network("::1/128")]
    env = parse(environ={"PUSHENGINE_TRUSTED_PROXIES": "192.168.0.0/16"})
    assert env["trusted-proxies"] == [ipaddress.ip_network("192.168.0.0/16")]


@pytest.mark.parametrize("argv, error", [
    (["--trusted-proxies", "10.0.0.0/33"], "--trusted-proxies"),
    (["--trusted-proxies", "proxy.local"], "--trusted-proxies"),
    (["--max-client-sessions", "-1"], "--max-client-sessions"),
    (["--client-rate", "-5"], "--client-rate"),
    (["--client-rate", "nan"], "--client-rate"),
])
def test_bad_client_limits_are_usage_errors(argv, error) -> None:
    with pytest.raises(usage.UsageError, match=error):
        parse(*argv)


def test_http_front_choice() -> None:
    assert parse("--http", "twisted")["http"] == "twisted"
    assert parse(environ={"PUSHENGINE_HTTP": "twisted"})["http"] == "twisted"
    with pytest.raises(usage.UsageError, match="--http"):
        parse("--http", "nginx")


def test_webhook_options() -> None:
    options = parse("--webhook-url", "https://backend.example/hooks", "--webhook-secret", "s",
                    "--webhook-queue", "50")
    assert (options["webhook-url"], options["webhook-secret"], options["webhook-queue"]) == \
        ("https://backend.example/hooks", "s", 50)
    for argv, message in [(("--webhook-url", "ftp://x/"), "http"),
                          (("--webhook-secret", "s"), "needs --webhook-url"),
                          (("--webhook-url", "http://x/", "--webhook-queue", "0"), "at least 1")]:
        with pytest.raises(usage.UsageError, match=re.escape(message)):
            parse(*argv)


def test_webhook_options_read_their_variables() -> None:
    options = parse(environ={"PUSHENGINE_WEBHOOK_URL": "http://b/h",
                             "PUSHENGINE_WEBHOOK_SECRET": "value-1"})
    assert (options["webhook-url"], options["webhook-secret"]) == ("http://b/h", "value-1")


def test_admin_key_option() -> None:
    key = "k" * 16
    assert parse("--admin-key", key)["admin-key"] == key
    assert parse(environ={"PUSHENGINE_ADMIN_KEY": key})["admin-key"] == key
    assert parse()["admin-key"] is None
    for bad in ("k" * 15, " " + key, key + "\n"):
        with pytest.raises(usage.UsageError, match="--admin-key"):
            parse("--admin-key", bad)


def test_the_node_gives_its_prefetch_to_the_amqp_feed() -> None:
    from twisted.internet.testing import MemoryReactorClock

    from pushengine.app.service import Node

    options = parse("--amqp", "amqp://guest:guest@127.0.0.1:1/", "--amqp-prefetch", "123",
                    "--node-id", "n")
    node = Node(options, MemoryReactorClock())
    assert node.feed.prefetch == 123


def test_gc_freeze_option() -> None:
    assert parse()["gc-freeze"] == 50_000
    assert parse("--gc-freeze", "0")["gc-freeze"] == 0
    assert parse("--gc-freeze", "200000")["gc-freeze"] == 200_000
    assert parse(environ={"PUSHENGINE_GC_FREEZE": "9000"})["gc-freeze"] == 9000
    for bad in ("-1", "many", "1.5"):
        with pytest.raises(usage.UsageError):
            parse("--gc-freeze", bad)


def test_make_service_freezes_after_start_up_with_the_option(monkeypatch) -> None:
    from twisted.internet import reactor

    from pushengine.app import gcfreeze, service, tap
    made = object()
    asked: list = []
    monkeypatch.setattr(service, "build_service", lambda options, r: made)
    monkeypatch.setattr(gcfreeze, "after_start", lambda r, n: asked.append((r, n)))
    assert tap.makeService(parse("--gc-freeze", "30000")) is made
    assert asked == [(reactor, 30000)]


@pytest.mark.parametrize("argv, sse, ws", [
    ((), 15.0, 30.0),                   # the defaults: SSE's from SPEC section 10
    (("--sse-ping", "20"), 20.0, 30.0),
    (("--ws-ping", "45"), 15.0, 45.0),
    (("--stream-ping", "50"), 50.0, 50.0),
    # a WebSocket with no session must be pinged twice within the idle timeout
    (("--stream-ping", "50", "--idle-timeout", "60"), 50.0, 30.0),
])
def test_the_streams_are_pinged_after_stream_ping_seconds(argv, sse, ws) -> None:
    from twisted.internet.testing import MemoryReactorClock

    from pushengine.app.service import Node
    from pushengine.transports.sse import EventsResource
    from pushengine.transports.websocket import WebSocketResource

    node = Node(parse(*argv), MemoryReactorClock())
    # a stream route's handler is its resource's bound ``stream``
    resources = [getattr(route.stream, "__self__", None) for route in node.web.table.routes]
    found = {type(r): r.heartbeat.interval for r in resources
             if isinstance(r, (EventsResource, WebSocketResource))}
    assert found == {EventsResource: sse, WebSocketResource: ws}


@pytest.mark.parametrize("option", ["--stream-ping", "--sse-ping", "--ws-ping"])
@pytest.mark.parametrize("bad", ["0", "-1", "nan", "soon"])
def test_stream_ping_must_be_a_positive_number(option, bad) -> None:
    with pytest.raises(usage.UsageError):
        parse(option, bad)


def test_postgres_options(files) -> None:
    options = parse("--store-url", "postgresql://u:p@db:5432/app", "--pg-pool", "8",
                    "--pg-timeout", "2.5")
    assert (options["store-url"], options["pg-pool"], options["pg-timeout"]) == (
        "postgresql://u:p@db:5432/app", 8, 2.5)
    assert parse("--feed-url", "postgres://db/app")["feed-url"] == "postgres://db/app"
    assert parse("--amqp-format", "debezium")["amqp-format"] == "debezium"


@pytest.mark.parametrize("argv, message", [
    (["--store-url", "mysql://db/app"], "--store-url must be an http(s):// or postgresql://"),
    (["--feed-url", "http://db/app"], "--feed-url must be a postgresql:// URL"),
    (["--feed-url", "postgresql://db/app", "--amqp", "amqp://h/"], "two change feeds"),
    (["--amqp-format", "avro"], "--amqp-format must be json or debezium"),
    (["--pg-pool", "0"], "--pg-pool must be 1 to 100"),
    (["--pg-timeout", "0"], "--pg-timeout must be a number greater than 0"),
])
def test_postgres_options_refused(argv, message) -> None:
    with pytest.raises(usage.UsageError, match=re.escape(message)):
        parse(*argv)


def test_shutdown_options_parse_and_read_the_environment() -> None:
    options = parse("--drain-delay", "5", "--shutdown-timeout", "25")
    assert (options["drain-delay"], options["shutdown-timeout"]) == (5.0, 25.0)
    options = parse(environ={"PUSHENGINE_DRAIN_DELAY": "2.5",
                             "PUSHENGINE_SHUTDOWN_TIMEOUT": "8"})
    assert (options["drain-delay"], options["shutdown-timeout"]) == (2.5, 8.0)


@pytest.mark.parametrize("argv, message", [
    (["--shutdown-timeout", "0"], "--shutdown-timeout must be a number greater than 0"),
    (["--shutdown-timeout", "inf"], "--shutdown-timeout must be a number greater than 0"),
    (["--shutdown-timeout", "soon"], "--shutdown-timeout must be a number"),
    (["--drain-delay", "-1"], "--drain-delay must be 0 or more seconds"),
    (["--drain-delay", "nan"], "--drain-delay must be 0 or more seconds"),
    # the timeout counts from the signal: the delay must leave time to close
    (["--drain-delay", "10"], "less than --shutdown-timeout"),
    (["--drain-delay", "15", "--shutdown-timeout", "12"], "less than --shutdown-timeout"),
])
def test_shutdown_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(usage.UsageError, match=re.escape(message)):
        parse(*argv)
