"""/metrics under ``promtool check metrics``, and docs/api.md matching what
/metrics and /health say (SPEC sections 9 and 11)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.task import Clock

from pushengine.metrics import prometheus as metrics
from pushengine.core.changes import Change
from pushengine.app.service import Node
from tests.http.harness import ClockNode, Http, Rpc, options
from tests.services import require_program

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"


def every_source_node() -> Node:
    """A node with every source of figures: the AMQP feed (routing by
    interest, which adds the bindings' figures), memcached servers,
    the Redis registry and Bloom filters, online counters, clients, profiles
    and the admin hub (built, not started: nothing connects)."""
    node = Node(options("--amqp", "amqp://guest:guest@127.0.0.1:5672/",
                        "--amqp-routing", "interest",
                        "--memcache", "127.0.0.1:11211,127.0.0.1:11212",
                        "--redis", "redis://127.0.0.1:6379/0",
                        "--webhook-url", "http://127.0.0.1:9/hook",
                        "--admin-key", "an-admin-key-of-some-length"), Clock())
    assert {"feed", "memcache", "redis", "online", "clients", "cluster", "profiles",
            "admin"} <= set(node.sources)
    node.engine.apply_changes([Change("User", "upsert", 1, {"id": 1, "name": "a"})])
    node.feed.feed_lag = 0.25
    node.cluster_figures.values["online_sessions"] = 3  # read from memcached every 10 s
    node.rpc_errors[-32601] = 2
    return node


def scrape(node: Node) -> str:
    """What the node's /metrics answers (the process's series and the build
    info included)."""
    return node.web.render_metrics()[1].decode("utf-8")


def default_node() -> ClockNode:
    """The built-in node after a call, a subscription and a poll woken by a
    change: every histogram has a series."""
    node = ClockNode()
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 5)
    rpc.send("session.get_events", sid, 30, 0)
    node.engine.apply_changes([Change("User", "upsert", 1, {"id": 1, "name": "a"}),
                               Change("Stream", "upsert", 1, {
                                   "id": 1, "title": "t", "user_id": 1, "live": True,
                                   "public": True, "created_at": "2026-01-01T00:00:00Z"})])
    return node


def series(text: str) -> dict[str, str]:
    """Every series name in a scrape, with its family's type; a histogram
    by its family's name (its samples are ``_bucket``, ``_count``, ``_sum``)."""
    found = {}
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            found[family.name] = family.type
            continue
        for sample in family.samples:
            found[sample.name] = family.type
    return found


@pytest.mark.parametrize("make", [every_source_node, default_node], ids=["every-source", "default"])
def test_promtool_accepts_the_metrics(make) -> None:
    promtool = require_program("promtool")
    text = scrape(make())
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


@pytest.mark.parametrize("make", [every_source_node, default_node], ids=["every-source", "default"])
def test_counters_end_in_total_and_gauges_do_not(make) -> None:
    for name, kind in series(scrape(make())).items():
        assert kind in ("counter", "gauge", "histogram"), name
        assert name.endswith("_total") == (kind == "counter"), (name, kind)


@pytest.mark.parametrize("make", [every_source_node, default_node], ids=["every-source", "default"])
def test_every_help_text_is_written_by_hand(make) -> None:
    text = scrape(make())
    helps = re.findall(r"^# HELP (\S+) (.*)$", text, re.M)
    assert len(helps) == len(set(n for n, _ in helps)), "a family twice"
    for name, doc in helps:
        assert "not described" not in doc, name
        # not generated from the name ("memcache ops")
        assert doc.lower() != name.removeprefix("pushengine_").replace("_", " "), name
        assert len(doc) >= 12, (name, doc)


def test_the_once_misnamed_series() -> None:
    found = series(scrape(every_source_node()))
    assert found["pushengine_memcache_servers"] == "gauge"
    assert "pushengine_memcache_servers_total" not in found
    for name in ("pushengine_memcache_ops_total", "pushengine_memcache_hits_total",
                 "pushengine_memcache_misses_total", "pushengine_memcache_errors_total",
                 "pushengine_memcache_timeouts_total", "pushengine_online_errors_total",
                 "pushengine_feed_messages_received_total", "pushengine_redis_writes_total"):
        assert found[name] == "counter", name
    assert series(scrape(default_node()))["pushengine_feed_messages_total"] == "counter"
    assert series(scrape(default_node()))["pushengine_memcache_evictions_total"] == "counter"


def test_an_undescribed_figure_is_still_valid() -> None:
    """A source's new figure that metrics.FIGURES does not know yet: exported
    by its kind, never a gauge named like a counter."""
    assert metrics.describe("x", "things", ("things",))[:2] == ("counter", "pushengine_x_things")
    assert metrics.describe("x", "servers_total")[:2] == ("gauge", "pushengine_x_servers")


# -- docs/api.md -------------------------------------------------------------------------

def docs_section(title: str) -> str:
    text = API_MD.read_text("utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_metrics_table_lists_every_series() -> None:
    table = set(re.findall(r"^\| `((?:pushengine|process)_[a-z_]+)` \|",
                           docs_section("GET /metrics"), re.M))
    emitted = set(series(scrape(every_source_node()))) | set(series(scrape(default_node())))
    assert emitted - table == set(), "series missing from docs/api.md"
    assert table - emitted == set(), "docs/api.md lists series no node emits"


def test_the_metrics_table_gives_each_series_its_type() -> None:
    rows = re.findall(r"^\| `((?:pushengine|process)_[a-z_]+)` \| (counter|gauge|histogram)",
                      docs_section("GET /metrics"), re.M)
    emitted = series(scrape(every_source_node())) | series(scrape(default_node()))
    for name, kind in rows:
        assert emitted[name] == kind, name


def shape(value):
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def test_the_health_example_is_what_health_answers() -> None:
    section = docs_section("GET /health")
    example = re.search(r"\$ curl -s http://localhost:8080/health\n(\{.*\})\n", section)
    assert example, "no /health example"
    documented = json.loads(example.group(1))
    reply = Http(ClockNode().web.resource()).get("/health")
    assert reply.code == 200
    actual = reply.json()
    assert list(documented) == list(actual)
    assert shape(documented) == shape(actual)
    assert {k: v for k, v in documented.items() if k not in ("node", "sessions")} == \
        {k: v for k, v in actual.items() if k not in ("node", "sessions")}
