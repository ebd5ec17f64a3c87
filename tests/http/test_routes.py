"""The HTTP routes around JSON-RPC: API keys, publish, health, metrics, static
files, wrong methods and paths, CORS and the body limit (SPEC sections 2, 3, 9)."""
from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families

from pushengine.web.static import StaticFiles, static_root
from tests.http.harness import ClockNode, Http, Raw, Rpc, http_request

CREATE = {"jsonrpc": "2.0", "method": "session.create", "id": 1}


def change(id_: int, **fields: Any) -> dict:
    obj = {"id": id_, "live": True, "public": True, "created_at": id_, **fields}
    return {"type": "Stream", "action": "upsert", "obj": obj}


def node_http(*argv: str, **kw: Any) -> tuple[ClockNode, Http]:
    node = ClockNode(*argv, **kw)
    return node, Http(node.web.resource())


# -- API keys ----------------------------------------------------------------------

@pytest.fixture
def keyed(tmp_path) -> tuple[ClockNode, Http]:
    keys = tmp_path / "keys.txt"
    keys.write_text("# the keys of the site\nkey-from-file  \n\nsecond-key # a comment\n")
    return node_http("--api-key", "key-one", "--api-keys", str(keys))


@pytest.mark.parametrize("path, headers", [
    ("/api/jsonrpc", {}),
    ("/api/jsonrpc?apikey=wrong", {}),
    ("/api/jsonrpc?apikey=", {}),
    ("/api/jsonrpc", {"x-api-key": "wrong"}),
    ("/api/jsonrpc", {"x-api-key": "key-one-and-more"}),
    ("/api/jsonrpc?apikey=key-on", {}),
    ("/api/jsonrpc?apikey=%D0%BA%D0%BB%D1%8E%D1%87", {}),      # non-ASCII
    ("/api/jsonrpc?apikey=%FF", {}),                          # not UTF-8
    ("/api/jsonrpc", {"x-api-key": "ключ".encode()}),
])
def test_missing_or_wrong_api_key(keyed, path: str, headers: dict) -> None:
    node, http = keyed
    reply = http.post(path, CREATE, headers)
    assert reply.code == 403
    assert reply.content_type.startswith("application/json")
    answer = reply.json()
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == 1003
    assert node.engine.sessions.sessions == {}


@pytest.mark.parametrize("path, headers", [
    ("/api/jsonrpc?apikey=key-one", {}),
    ("/api/jsonrpc?apikey=key-from-file", {}),
    ("/api/jsonrpc?session=abc&apikey=second-key", {}),
    ("/api/jsonrpc", {"x-api-key": "key-one"}),
    ("/api/jsonrpc", {"X-Api-Key": "second-key"}),
])
def test_api_key_accepted(keyed, path: str, headers: dict) -> None:
    node, http = keyed
    reply = http.post(path, CREATE, headers)
    assert reply.code == 200
    assert reply.json()["result"] in node.engine.sessions.sessions


def test_no_api_key_configured_lets_everybody_in(http: Http) -> None:
    assert http.post("/api/jsonrpc?apikey=anything", CREATE).code == 200
    assert http.post("/api/jsonrpc", CREATE).code == 200


def test_session_in_the_url_is_harmless(http: Http, rpc: Rpc) -> None:
    sid = rpc("session.create")
    reply = http.post(f"/api/jsonrpc?session={sid}", rpc.body("session.get_events", [sid, 0]))
    assert reply.json()["result"] == []


# -- POST /api/publish ---------------------------------------------------------------

def test_publish_from_loopback_without_a_key(node: ClockNode, http: Http) -> None:
    reply = http.post("/api/publish", change(1))
    assert reply.code == 200 and reply.json() == {"accepted": 1}
    assert node.store.get("Stream", 1)["live"] is True


def test_publish_a_batch_with_every_action(node: ClockNode, http: Http) -> None:
    batch = [change(1), change(2), {**change(3), "action": "insert"},
             {**change(1, title="t"), "action": "update"},
             {"type": "Stream", "action": "delete", "obj": {"id": 2}}]
    reply = http.post("/api/publish", batch)
    assert reply.json() == {"accepted": 5}
    assert node.store.get("Stream", 1)["title"] == "t"
    assert node.store.get("Stream", 2) is None
    assert node.engine.counters.changes_in == 5


def test_publish_from_elsewhere_without_a_publish_key_is_forbidden(node: ClockNode) -> None:
    raw = Raw(node.site(), host="203.0.113.9")
    raw.send(http_request("POST", "/api/publish", json.dumps(change(1)).encode(),
                          {"Content-Type": "application/json"}))
    reply = raw.response()
    assert reply.code == 403 and "error" in reply.json()
    assert node.store.get("Stream", 1) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "203.0.113.9"])
def test_publish_key_needs_a_bearer_header(host: str) -> None:
    node = ClockNode("--publish-key", "s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                    {"Authorization": "Basic s3cret"}, {"Authorization": "Bearer s3cret2"},
                    {"Authorization": "Bearer"}):
        raw = Raw(node.site(), host=host)
        raw.send(http_request("POST", "/api/publish", json.dumps(change(1)).encode(), headers))
        reply = raw.response()
        assert reply.code == 401, headers
        assert reply.header("www-authenticate") == "Bearer"
        assert "error" in reply.json()
    assert node.store.get("Stream", 1) is None
    for auth in ("Bearer s3cret", "bearer s3cret"):
        raw = Raw(node.site(), host=host)
        raw.send(http_request("POST", "/api/publish", json.dumps(change(1)).encode(),
                              {"Authorization": auth}))
        assert raw.response().json() == {"accepted": 1}


@pytest.mark.parametrize("body, words", [
    (b"{", "JSON"),
    (b"\xff\xfe", "UTF-8"),
    (b'{"type":"Stream","action":"upsert","obj":{"id":1,"x":NaN}}', "NaN"),
    (b'{"type":"Stream","action":"upsert","obj":{"id":1,"x":1e999}}', "1e999"),
    (b"[]", "no changes"),
    (b"5", "object"),
    (json.dumps({"action": "upsert", "obj": {"id": 1}}).encode(), "type"),
    (json.dumps({"type": "Stream", "action": "replace", "obj": {"id": 1}}).encode(), "action"),
    (json.dumps({"type": "Stream", "action": "upsert", "obj": {"title": "x"}}).encode(), "id"),
    (json.dumps({"type": "Stream", "action": "upsert", "obj": {"id": True}}).encode(), "id"),
    (json.dumps({"type": "Stream", "action": "upsert", "obj": [1]}).encode(), "obj"),
])
def test_malformed_publish_is_refused(node: ClockNode, http: Http, body: bytes,
                                      words: str) -> None:
    reply = http.post("/api/publish", body)
    assert reply.code == 400
    assert words.lower() in json.dumps(reply.json()).lower()
    assert len(node.store) == 0 and node.engine.counters.changes_in == 0


def test_a_batch_with_one_bad_change_applies_nothing(node: ClockNode, http: Http) -> None:
    batch = [change(1), {"type": "Stream", "action": "upsert", "obj": {"title": "no id"}},
             change(3), "nonsense"]
    reply = http.post("/api/publish", batch)
    assert reply.code == 400
    details = reply.json()["details"]
    assert [d.split(":")[0] for d in details] == ["change 1", "change 3"]
    assert len(node.store) == 0 and node.engine.counters.changes_in == 0


class DownFeed:
    """A feed that is not connected: health says so and publishing fails."""

    def start(self, sink) -> None:
        self.sink = sink

    def stop(self) -> None:
        pass

    def publish(self, changes):
        raise ConnectionError("no broker")

    def health(self) -> dict:
        return {"up": False, "kind": "fake", "error": "not connected"}

    def stats(self) -> dict:
        return {"connected": 0}


def test_publish_with_the_feed_down_is_503() -> None:
    node, http = node_http(feed=DownFeed())
    reply = http.post("/api/publish", change(1))
    assert reply.code == 503 and "error" in reply.json()
    assert b"no broker" not in reply.body


# -- operations --------------------------------------------------------------------

def test_health(node: ClockNode, http: Http, rpc: Rpc) -> None:
    rpc("session.create")
    reply = http.get("/health")
    assert reply.code == 200 and reply.content_type.startswith("application/json")
    report = reply.json()
    assert report["status"] == "ok" and report["node"] == "test-node"
    assert report["feed"]["up"] is True
    assert report["sessions"] == 1
    assert {"memcache", "redis"} <= set(report)
    assert http.request("HEAD", "/health").code == 200


def test_health_is_503_when_the_feed_is_down() -> None:
    node, http = node_http(feed=DownFeed())
    reply = http.get("/health")
    assert reply.code == 503
    report = reply.json()
    assert report["status"] != "ok" and report["feed"]["up"] is False


def test_metrics_are_valid_prometheus_text(node: ClockNode, http: Http, rpc: Rpc) -> None:
    node.clock.advance(100)
    sid = rpc("session.create")
    key, _ = rpc("stream.subscribe_public_live", sid)
    rpc.send("session.get_events", sid, 30)          # parked
    http.post("/api/publish", [change(1), change(2)])
    rpc.error("no.such")
    node.clock.advance(3)
    reply = http.get("/metrics")
    assert reply.code == 200 and reply.content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(reply.body.decode())}

    def value(name: str, **labels: str) -> float:
        for sample in families[name].samples:
            if sample.name in (name, name + "_total") and all(
                    sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
        raise AssertionError(f"no sample {name} {labels}")

    for name in ("pushengine_sessions", "pushengine_subscriptions", "pushengine_views",
                 "pushengine_queries", "pushengine_polls_waiting", "pushengine_changes",
                 "pushengine_change_errors", "pushengine_feed_gaps", "pushengine_events_out",
                 "pushengine_queue_overflows", "pushengine_sessions_expired",
                 "pushengine_rpc_errors", "pushengine_last_change_age_seconds",
                 "pushengine_feed_messages", "pushengine_feed_connected"):
        assert name in families, name
    assert families["pushengine_changes"].type == "counter"
    assert families["pushengine_sessions"].type == "gauge"
    assert value("pushengine_sessions", node="test-node") == 1
    assert value("pushengine_subscriptions") == 1
    assert value("pushengine_views") == 1
    assert value("pushengine_changes") == 2
    assert value("pushengine_events_out") == 2
    assert value("pushengine_polls_waiting") == 0
    assert value("pushengine_rpc_errors", code="-32601") == 1
    assert value("pushengine_last_change_age_seconds") == 3
    assert value("pushengine_feed_messages") == 2
    rpc.send("session.get_events", sid, 30)
    assert value_of(http, "pushengine_polls_waiting") == 1


def value_of(http: Http, name: str) -> float:
    for family in text_string_to_metric_families(http.get("/metrics").body.decode()):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(name)


# -- static files ------------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_static_js_is_served(http: Http) -> None:
    reply = await http.send("GET", "/static/js/api.js").settle()
    assert reply.code == 200
    assert reply.content_type.startswith("text/javascript")
    assert reply.body == (static_root() / "js" / "api.js").read_bytes()
    assert http.request("HEAD", "/static/js/api.js").code == 200


@pytest.mark.parametrize("path", ["/static/js/missing.js", "/static/js/",
                                  "/static/js/api.js/more", "/static/js/%2e%2e/%2e%2e/setup.cfg",
                                  "/static/js/..%2f..%2fsetup.cfg", "/examples/nope.html",
                                  "/static/js/.hidden", "/static/js/%00"])
def test_missing_static_file_is_a_json_404(http: Http, path: str) -> None:
    reply = http.get(path)
    assert reply.code == 404, reply
    assert reply.content_type.startswith("application/json")
    assert reply.json()


@pytest_twisted.ensureDeferred
async def test_static_directory_without_slash_redirects_without_html(node: ClockNode,
                                                                     http: Http,
                                                                     tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.js").write_text("export const a = 1;\n")
    node.web.js = StaticFiles(str(tmp_path))
    reply = http.get("/static/js/sub?v=1")
    assert reply.code in (301, 302) and reply.header("location").endswith("/static/js/sub/?v=1")
    assert reply.body == b""
    reply = await http.send("GET", "/static/js/sub/a.js").settle()
    assert reply.body == b"export const a = 1;\n"
    assert http.get("/static/js/sub/").code == 404


def test_root_and_missing_slash_redirect(http: Http) -> None:
    reply = http.get("/")
    assert reply.code == 302 and reply.header("location") == "/examples/"
    reply = http.get("/static/js")
    assert reply.code in (301, 302, 308) and reply.header("location").endswith("/static/js/")


def test_static_files_refuse_other_methods(http: Http) -> None:
    reply = http.request("POST", "/static/js/api.js", b"x")
    assert reply.code == 405 and reply.json()


# -- wrong methods and paths ---------------------------------------------------------

@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_other_methods_than_post_get_405(http: Http, method: str) -> None:
    reply = http.request(method, "/api/jsonrpc", json.dumps(CREATE),
                         {"content-type": "application/json"})
    assert reply.code == 405
    assert "POST" in reply.header("allow")
    assert reply.json()["error"]["code"] == -32600


def test_get_publish_and_post_health_are_405(http: Http) -> None:
    assert http.get("/api/publish").code == 405
    assert http.request("POST", "/health", b"{}").code == 405
    assert http.request("POST", "/metrics", b"{}").code == 405


@pytest.mark.parametrize("path", ["/nope", "/api", "/api/jsonrpc/extra", "/api/jsonrpc2",
                                  "/index.html", "/static", "/" + "a" * 5000])
def test_unknown_paths_are_json_404(http: Http, path: str) -> None:
    for method in ("GET", "POST"):
        reply = http.request(method, path, b"{}" if method == "POST" else None)
        assert reply.code in (404, 405) or (reply.code in (301, 302, 308)
                                            and reply.body == b""), reply
        if reply.body:
            assert reply.content_type.startswith("application/json"), reply
            assert reply.json()


def test_bad_url_encoding_is_not_html(node: ClockNode) -> None:
    for path in ("/api/jsonrpc/%ff", "/static/js/%ff", "/%C0%AF"):
        raw = Raw(node.site())
        raw.send(http_request("GET", path))
        reply = raw.response()
        assert 400 <= reply.code < 500


def test_favicon_is_empty(http: Http) -> None:
    assert http.get("/favicon.ico").code == 204


# -- CORS -------------------------------------------------------------------------

def test_cors_headers() -> None:
    node, http = node_http("--cors-origin", "https://app.example")
    reply = http.post("/api/jsonrpc", CREATE, {"origin": "https://app.example"})
    assert reply.header("access-control-allow-origin") == "https://app.example"
    reply = http.request("OPTIONS", "/api/jsonrpc", None,
                         {"origin": "https://app.example",
                          "access-control-request-method": "POST",
                          "access-control-request-headers": "content-type, x-api-key"})
    assert reply.code == 204
    assert reply.header("access-control-allow-origin") == "https://app.example"
    assert "POST" in reply.header("access-control-allow-methods")
    allowed = reply.header("access-control-allow-headers").lower()
    assert "content-type" in allowed and "x-api-key" in allowed
    reply = http.request("OPTIONS", "/api/publish", None)
    assert reply.header("access-control-allow-origin") == "https://app.example"


def test_no_cors_headers_by_default(http: Http) -> None:
    reply = http.post("/api/jsonrpc", CREATE)
    assert reply.header("access-control-allow-origin") is None


def test_cors_headers_on_refusals() -> None:
    node = ClockNode("--cors-origin", "https://app.example", "--api-key", "k")
    http = Http(node.web.resource())
    reply = http.post("/api/jsonrpc", CREATE)
    assert reply.code == 403
    assert reply.header("access-control-allow-origin") == "https://app.example"


# -- the body limit, through the node's own Site -------------------------------------

def test_body_above_the_limit_is_refused_from_its_length() -> None:
    node = ClockNode("--max-body", "1000")
    raw = Raw(node.site())
    raw.send(http_request("POST", "/api/jsonrpc", b"[" + b" " * 200,
                          {"Content-Type": "application/json"}, length=5000))
    reply = raw.response()                   # answered before the body arrived
    assert reply.code == 413
    assert reply.json()["error"]["code"] == -32600
    raw.send(b" " * 4000)                   # the rest is read and dropped ...
    assert not raw.closing
    raw.send(b" " * (5000 - 201 - 4000 - 1) + b"]")
    assert raw.closing                      # ... and the connection closes
    assert node.engine.sessions.sessions == {}


def test_body_above_the_limit_sent_whole() -> None:
    node = ClockNode("--max-body", "1000")
    raw = Raw(node.site())
    batch = json.dumps([CREATE] * 30).encode()
    assert len(batch) > 1000
    raw.send(http_request("POST", "/api/jsonrpc", batch))
    assert raw.response().code == 413
    assert raw.closing
    assert raw.transport.value().count(b"HTTP/1.1") == 1
    assert node.engine.sessions.sessions == {}
    raw = Raw(node.site())
    raw.send(http_request("POST", "/api/publish", json.dumps([change(1)] * 30).encode()))
    reply = raw.response()
    assert reply.code == 413 and "error" in reply.json()
    assert len(node.store) == 0


def test_chunked_body_above_the_limit() -> None:
    node = ClockNode("--max-body", "1000")
    raw = Raw(node.site())
    raw.send(b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    raw.send(b"400\r\n" + b" " * 0x400 + b"\r\n")
    assert raw.response().code == 413
    raw.send(b"0\r\n\r\n")
    assert raw.closing


def test_expect_continue_above_the_limit_gets_no_100() -> None:
    node = ClockNode("--max-body", "1000")
    raw = Raw(node.site())
    raw.send(http_request("POST", "/api/jsonrpc", b"", {"Expect": "100-continue"},
                          length=5000))
    assert raw.transport.value().startswith(b"HTTP/1.1 413")
    assert b"100 Continue" not in raw.transport.value()


def test_body_at_the_limit_is_served() -> None:
    node = ClockNode("--max-body", "1000")
    body = json.dumps(CREATE).encode()
    body += b" " * (1000 - len(body))
    raw = Raw(node.site())
    raw.send(http_request("POST", "/api/jsonrpc", body))
    reply = raw.response()
    assert reply.code == 200 and reply.json()["result"] in node.engine.sessions.sessions
