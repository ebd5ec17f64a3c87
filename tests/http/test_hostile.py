"""A hostile client against a node's real HTTP resources: one regression test
per finding of the hardening review (SPEC section 12)."""
from __future__ import annotations

import json

import pytest

from tests.http.harness import ClockNode, Http, Raw, Rpc, http_request


def strict(body: bytes):
    """What a strict client parser makes of an answer (NaN/Infinity refused)."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(body.decode("utf-8"), parse_constant=refuse)


def stream(id_, **fields):
    return {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-01-01T00:00:{id_ % 60:02d}Z", **fields}


def publish(http: Http, *objs, raw: bytes | None = None, headers=None):
    body = raw if raw is not None else json.dumps(
        [{"type": "Stream", "action": "upsert", "obj": o} for o in objs]).encode()
    return http.post("/api/publish", body, headers)


def rpc_raw(http: Http, body: bytes, headers=None):
    return http.post("/api/jsonrpc", body, headers)


# -- 1. lone surrogates --------------------------------------------------------

def test_a_lone_surrogate_is_refused_by_publish_and_nothing_is_stored(
        node: ClockNode, http: Http, rpc: Rpc, sid: str) -> None:
    key, state = rpc("stream.subscribe_public_live", sid, 10)
    reply = publish(http, raw=b'{"type":"Stream","action":"upsert","obj":'
                              b'{"id":1,"title":"x\\ud800y","live":true,"public":true}}')
    assert reply.code == 400 and "surrogate" in reply.json()["details"][0]
    assert node.store.get("Stream", 1) is None
    # every session still polls and subscribes as before
    assert rpc("session.get_events", sid, 0, 0) == []
    assert rpc("stream.subscribe_public_live", sid, 10)[1] == []


def test_a_surrogate_anywhere_in_a_batch_names_the_change(http: Http) -> None:
    body = (b'[{"type":"Stream","action":"upsert","obj":{"id":1,"public":true}},'
            b'{"type":"Stream","action":"upsert","obj":{"id":2,"tags":["ok","\\udfff"]}}]')
    reply = publish(http, raw=body)
    assert reply.code == 400
    assert reply.json()["details"] == ["change 1: obj.tags[1] holds a lone surrogate "
                                       "(not Unicode text)"]


def test_a_surrogate_in_call_params_is_a_bad_params_error(http: Http, sid: str) -> None:
    reply = rpc_raw(http, b'{"jsonrpc":"2.0","id":7,"method":"stats.online",'
                          b'"params":["\\udfff"]}')
    assert reply.code == 200
    answer = strict(reply.body)
    assert answer["id"] == 7 and answer["error"]["code"] == -32602


def test_a_surrogate_as_the_call_id_is_an_invalid_request(http: Http) -> None:
    reply = rpc_raw(http, b'{"jsonrpc":"2.0","id":"\\udfff","method":"session.create"}')
    assert reply.code == 200
    assert strict(reply.body) == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600,
        "message": "id must be a string, an integer within ±2**53, a finite number or null"}}


def test_valid_escapes_and_astral_characters_pass(node: ClockNode, http: Http, rpc: Rpc,
                                                  sid: str) -> None:
    title = "кот \U0001F431 \u00e9"
    assert publish(http, stream(1, title=title)).code == 200
    key, state = rpc("stream.subscribe_public_live", sid, 10)
    assert state[0]["title"] == title


# -- 2. numbers that are not JSON --------------------------------------------------

@pytest.mark.parametrize("value", [b"1e999", b"-1e999", b"NaN", b"Infinity", b"-Infinity",
                                   b"1" + b"0" * 400])
def test_non_finite_numbers_are_refused_by_publish(node: ClockNode, http: Http, value) -> None:
    body = b'{"type":"Stream","action":"upsert","obj":{"id":1,"public":true,"viewers":%s}}' % value
    reply = publish(http, raw=body)
    assert reply.code == 400 and "viewers" in reply.json()["details"][0]
    assert node.store.get("Stream", 1) is None


@pytest.mark.parametrize("id_", [b"9007199254740993", b"-9007199254740993", b"1" + b"0" * 400])
def test_ids_beyond_2_53_are_refused(node: ClockNode, http: Http, id_) -> None:
    reply = publish(http, raw=b'{"type":"Stream","action":"upsert","obj":{"id":%s}}' % id_)
    assert reply.code == 400 and "obj.id" in reply.json()["details"][0]
    assert len(node.store) == 0


# -- 4. bounded params ----------------------------------------------------------------

def test_strings_and_lists_in_params_are_bounded(rpc: Rpc, sid: str) -> None:
    assert rpc.error("stream.subscribe_user", sid, "x" * 1025).code == -32602
    assert rpc.error("session.subscribe", sid, "UserStreamView",
                     {"user_id": "y" * 2000}, 5).code == -32602
    assert rpc.error("stats.online", ["a"] * 101).code == -32602
    # at the bound it passes validation (and the method judges the value)
    assert rpc("stream.subscribe_user", sid, "x" * 1000)[1] == []


def test_per_client_session_cap_answers_429_while_others_are_served(node: ClockNode) -> None:
    node = ClockNode("--max-client-sessions", "3")
    site = node.site()
    hostile = Raw(site, host="203.0.113.7")
    body = b'{"jsonrpc":"2.0","id":1,"method":"session.create"}'
    for _ in range(4):
        hostile.send(http_request("POST", "/api/jsonrpc", body))
    raw = hostile.transport.value()
    assert raw.count(b"HTTP/1.1 200") == 3 and raw.count(b"HTTP/1.1 429") == 1
    assert b"Retry-After: 10" in raw or b"retry-after: 10" in raw.lower()
    refused = json.loads(raw.rsplit(b"\r\n\r\n", 1)[1])
    assert refused["error"]["code"] == 1007 and refused["id"] == 1
    other = Raw(site, host="198.51.100.2")
    other.send(http_request("POST", "/api/jsonrpc", body))
    assert other.response().code == 200
    # a destroyed session frees its place
    sid = json.loads(raw.split(b"\r\n\r\n")[1].split(b"HTTP/1.1")[0])["result"]
    again = Raw(site, host="203.0.113.7")
    again.send(http_request("POST", "/api/jsonrpc", json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "session.destroy", "params": [sid]}).encode()))
    again.send(http_request("POST", "/api/jsonrpc", body))
    assert again.transport.value().count(b"HTTP/1.1 200") == 2


def test_call_rate_answers_429_with_retry_after_then_recovers() -> None:
    node = ClockNode("--client-rate", "5")
    site = node.site()
    body = b'{"jsonrpc":"2.0","id":1,"method":"stats.online"}'
    hostile = Raw(site, host="203.0.113.8")
    for _ in range(12):
        hostile.send(http_request("POST", "/api/jsonrpc", body))
    raw = hostile.transport.value()
    assert raw.count(b"HTTP/1.1 200") == 10          # the burst: twice the rate
    assert raw.count(b"HTTP/1.1 429") == 2
    assert b"1007" in raw and b"rate limited" in raw
    other = Raw(site, host="198.51.100.3")
    other.send(http_request("POST", "/api/jsonrpc", body))
    assert other.response().code == 200
    node.clock.advance(1.0)                           # five tokens back
    later = Raw(site, host="203.0.113.8")
    later.send(http_request("POST", "/api/jsonrpc", body))
    assert later.response().code == 200


def test_a_batch_costs_one_token_per_call() -> None:
    node = ClockNode("--client-rate", "5")
    batch = json.dumps([{"jsonrpc": "2.0", "id": i, "method": "stats.online"}
                        for i in range(11)]).encode()
    raw = Raw(node.site(), host="203.0.113.9")
    raw.send(http_request("POST", "/api/jsonrpc", batch))
    reply = raw.response()
    assert reply.code == 429
    assert [a["error"]["code"] for a in reply.json()] == [1007] * 11
    assert [a["id"] for a in reply.json()] == list(range(11))


def test_clients_behind_a_trusted_proxy_are_told_apart() -> None:
    node = ClockNode("--max-client-sessions", "1", "--trusted-proxies", "127.0.0.1/32")
    site = node.site()
    body = b'{"jsonrpc":"2.0","id":1,"method":"session.create"}'
    for visitor in ("198.51.100.1", "198.51.100.2"):
        raw = Raw(site, host="127.0.0.1")
        raw.send(http_request("POST", "/api/jsonrpc", body,
                              {"X-Forwarded-For": f"10.9.9.9, {visitor}"}))
        assert raw.response().code == 200
    raw = Raw(site, host="127.0.0.1")
    raw.send(http_request("POST", "/api/jsonrpc", body, {"X-Forwarded-For": "198.51.100.1"}))
    assert raw.response().code == 429
    # an untrusted peer cannot choose its address with the header
    for _ in range(2):
        spoof = Raw(site, host="203.0.113.50")
        spoof.send(http_request("POST", "/api/jsonrpc", body,
                                {"X-Forwarded-For": "198.51.100.77"}))
    assert spoof.response().code == 429


# -- 5. ids and numbers in calls -----------------------------------------------------------

def test_a_batch_with_a_401_digit_id_answers_every_call(node: ClockNode, http: Http) -> None:
    body = ('[{"jsonrpc":"2.0","id":1,"method":"session.create"},'
            '{"jsonrpc":"2.0","id":1%s,"method":"session.create"}]' % ("0" * 400)).encode()
    reply = rpc_raw(http, body)
    assert reply.code == 200
    first, second = strict(reply.body)
    assert isinstance(first["result"], str) and first["id"] == 1
    assert second["error"]["code"] == -32600 and second["id"] is None


def test_huge_numbers_in_params_are_bad_params(http: Http, rpc: Rpc, sid: str) -> None:
    body = ('{"jsonrpc":"2.0","id":3,"method":"stream.subscribe_near",'
            '"params":["%s",1%s,37.6,10]}' % (sid, "0" * 400)).encode()
    answer = strict(rpc_raw(http, body).body)
    assert answer["id"] == 3 and answer["error"]["code"] == -32602
    body = ('{"jsonrpc":"2.0","id":4,"method":"stream.subscribe_near",'
            '"params":["%s",1e999,37.6,10]}' % sid).encode()
    answer = strict(rpc_raw(http, body).body)
    assert answer["id"] == 4 and answer["error"]["code"] == -32602
    assert "Traceback" not in json.dumps(answer)


# -- 6. nesting ---------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [65, 950, 100_000])
def test_deep_nesting_is_refused_by_publish(node: ClockNode, http: Http, depth) -> None:
    deep = b"[" * depth + b"]" * depth
    body = b'{"type":"Stream","action":"upsert","obj":{"id":1,"public":true,"v":%s}}' % deep
    reply = publish(http, raw=body)
    assert reply.code in (400, 413)
    assert node.store.get("Stream", 1) is None


def test_nesting_at_the_limit_is_accepted(node: ClockNode, http: Http) -> None:
    deep = b"[" * 60 + b"]" * 60      # the change and obj add two levels, the list one more
    body = b'{"type":"Stream","action":"upsert","obj":{"id":1,"public":true,"v":%s}}' % deep
    assert publish(http, raw=body).code == 200


def test_deep_nesting_in_a_call_is_bad_params(http: Http) -> None:
    body = b'{"jsonrpc":"2.0","id":5,"method":"stats.online","params":[%s]}' % (
        b"[" * 100 + b"]" * 100)
    answer = strict(rpc_raw(http, body).body)
    assert answer["error"]["code"] == -32602 and answer["id"] == 5


# -- 8. privacy fails closed ---------------------------------------------------------------

@pytest.mark.parametrize("public", [False, 0, "false", "true", 1, None, "missing"])
def test_only_public_true_is_public(http: Http, rpc: Rpc, sid: str, public) -> None:
    obj = stream(1)
    if public == "missing":
        del obj["public"]
    else:
        obj["public"] = public
    rpc("stream.subscribe_public_live", sid, 10)
    rpc("stream.subscribe_user", sid, 1, 10)
    assert publish(http, obj).code == 200
    assert rpc("session.get_events", sid, 0) == []
    assert rpc("stream.subscribe_public_live", sid, 5)[1] == []


# -- 9. publish from a web page, behind a proxy ---------------------------------------------

def test_publish_refuses_requests_with_an_origin(node: ClockNode, http: Http) -> None:
    reply = http.request("POST", "/api/publish", json.dumps(
        {"type": "Stream", "action": "upsert", "obj": stream(1)}),
        {"content-type": "text/plain", "origin": "https://evil.example"})
    assert reply.code == 403 and "web pages" in reply.json()["error"]
    assert node.store.get("Stream", 1) is None


def test_publish_through_an_untrusted_local_proxy_is_not_loopback(node: ClockNode) -> None:
    body = json.dumps({"type": "Stream", "action": "upsert", "obj": stream(1)}).encode()
    raw = Raw(node.site(), host="127.0.0.1")
    raw.send(http_request("POST", "/api/publish", body, {"X-Forwarded-For": "203.0.113.1"}))
    assert raw.response().code == 403
    trusted = ClockNode("--trusted-proxies", "127.0.0.1")
    raw = Raw(trusted.site(), host="127.0.0.1")
    raw.send(http_request("POST", "/api/publish", body, {"X-Forwarded-For": "203.0.113.1"}))
    assert raw.response().code == 403
    raw = Raw(trusted.site(), host="127.0.0.1")
    raw.send(http_request("POST", "/api/publish", body, {"X-Forwarded-For": "127.0.0.1"}))
    assert raw.response().code == 200


# -- 10. who is online in a personal view ----------------------------------------------------

def test_personal_view_figures_only_for_their_subscribers() -> None:
    node = ClockNode("--secret", "a-secret-of-at-least-32-bytes-long!!")
    rpc = Rpc(Http(node.web.resource()))
    import jwt
    token = jwt.encode({"sub": "100"}, "a-secret-of-at-least-32-bytes-long!!", algorithm="HS256")
    owner = rpc("session.create")
    rpc("session.authorize", owner, token)
    key, _ = rpc("stream.subscribe_home", owner, [100, 200], 10)
    assert rpc("stats.online", key, owner) == 1
    stranger = rpc("session.create")
    assert rpc.error("stats.online", key).code == 1005
    assert rpc.error("stats.online", key, stranger).code == 1005
    # public views stay open to all
    public_key, _ = rpc("stream.subscribe_public_live", stranger, 10)
    assert rpc("stats.online", public_key) == 1


# -- 11. unknown types, static paths ---------------------------------------------------------

def test_changes_of_a_type_no_view_uses_are_counted_and_dropped(node: ClockNode,
                                                                http: Http) -> None:
    body = json.dumps([{"type": "Junk", "action": "upsert", "obj": {"id": i}}
                       for i in range(500)]).encode()
    assert publish(http, raw=body).code == 200
    assert len(node.store) == 0
    assert node.engine.counters.changes_dropped == 500
    assert b"pushengine_changes_dropped_total" in http.get("/metrics").body


def test_publish_answers_are_strict_json(http: Http) -> None:
    for body in (b"\xff", b"{", b"[]", b'{"type":"Stream"}', b"NaN"):
        reply = publish(http, raw=body)
        assert reply.code == 400
        strict(reply.body)
