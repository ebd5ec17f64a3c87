"""The original engine's API sent verbatim (``--namespace``), and the public
user profiles (SPEC section 11)."""
from __future__ import annotations

import json

import pytest
from twisted.python import usage

from pushengine.core.changes import Change
from pushengine.stores.http import HttpStore
from tests.http.harness import ClockNode, Http, Rpc

PATH = "/api/jsonrpc"
ANNA = {"id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x", "email": "anna@example.com",
        "phone": "79995551111", "password_hash": "x", "public": True}


def legacy(http: Http, method: str, *params) -> object:
    """A call as the original engine's client sends it: no jsonrpc, no id."""
    reply = http.post(PATH, {"method": method, "params": list(params)})
    assert reply.code == 200 and reply.content_type.startswith("application/json"), reply
    return reply.json()


def publish(node: ClockNode, *objs: dict, type_: str = "User", action: str = "upsert") -> None:
    node.engine.apply_changes([Change(type_, action, o["id"], o) for o in objs])


# -- --namespace ---------------------------------------------------------------------

@pytest.fixture
def qik() -> ClockNode:
    return ClockNode("--namespace", "qik")


def test_the_original_calls_verbatim(qik: ClockNode) -> None:
    http = Http(qik.web.resource())
    publish(qik, ANNA)
    publish(qik, {"id": 1, "title": "cats", "user_id": 340699, "live": True, "public": True,
                  "created_at": "2026-11-30T03:00:00Z"}, type_="Stream")
    answer = legacy(http, "qik.session.create")
    assert isinstance(answer, list) and len(answer) == 1 and isinstance(answer[0], str)
    sid = answer[0]
    assert sid in qik.engine.sessions.sessions
    key, state = legacy(http, "qik.stream.subscribe_public_live", sid, 5)[0]
    assert key == "PublicLiveStreamView(limit=5)" and [o["id"] for o in state] == [1]
    assert legacy(http, "qik.session.get_events", sid, 0) == [[]]
    assert legacy(http, "qik.user.public_profile", 340699) == [
        {"id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x"}]
    assert legacy(http, "qik.user.public_profiles", [340699, 5]) == [
        [{"id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x"}, None]]
    assert legacy(http, "qik.stats.online") == [1]
    assert legacy(http, "qik.session.destroy", sid) == [True]
    assert legacy(http, "qik.session.get_events", sid, 0)["faultCode"] == 1001


def test_every_method_has_its_namespaced_twin(qik: ClockNode) -> None:
    methods = qik.dispatcher.methods
    plain = [name for name in methods if not name.startswith("qik.")]
    assert {"session.create", "session.get_events", "user.public_profile",
            "stream.subscribe_public_live"} <= set(plain)
    for name in plain:
        assert methods[f"qik.{name}"] is methods[name], name


def test_both_names_work_in_2_0_and_in_one_batch(qik: ClockNode) -> None:
    http = Http(qik.web.resource())
    answers = http.post(PATH, [
        {"jsonrpc": "2.0", "method": "session.create", "id": 1},
        {"jsonrpc": "2.0", "method": "qik.session.create", "id": 2},
        {"method": "qik.session.create", "params": [], "id": 3},
        {"jsonrpc": "2.0", "method": "qik.no.such", "id": 4},
        {"jsonrpc": "2.0", "method": "other.session.create", "id": 5},
    ]).json()
    assert [a.get("id") for a in answers[:2]] == [1, 2]
    assert all(isinstance(a["result"], str) for a in answers[:2])
    assert isinstance(answers[2], list) and isinstance(answers[2][0], str)
    assert answers[3]["error"]["code"] == -32601 and answers[4]["error"]["code"] == -32601
    assert len(qik.engine.sessions.sessions) == 3


def test_without_a_namespace_the_prefixed_names_are_unknown(http: Http) -> None:
    assert legacy(http, "qik.session.create")["faultCode"] == -32601


def test_the_namespace_from_the_environment() -> None:
    from pushengine.app.tap import Options
    options = Options(environ={"PUSHENGINE_NAMESPACE": "qik"})
    options.parseOptions([])
    assert options["namespace"] == "qik"


@pytest.mark.parametrize("name", ["", "q k", "1qik", "qik.", ".qik", "qik..x", "q-k", "x" * 51,
                                  "a.b.c.d.e"])
def test_bad_namespaces_are_usage_errors(name: str) -> None:
    from pushengine.app.tap import Options
    with pytest.raises(usage.UsageError, match="--namespace"):
        Options(environ={}).parseOptions(["--namespace", name])


@pytest.mark.parametrize("name", ["qik", "Qik_2", "_q", "qik.v1"])
def test_good_namespaces(name: str) -> None:
    node = ClockNode("--namespace", name)
    assert f"{name}.session.create" in node.dispatcher.methods


# -- user.public_profile(s) ------------------------------------------------------------

def test_a_profile_is_the_public_fields_only(node: ClockNode, rpc: Rpc) -> None:
    publish(node, ANNA)
    assert rpc("user.public_profile", 340699) == {
        "id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x"}


def test_no_session_is_needed_and_none_is_created(node: ClockNode, rpc: Rpc) -> None:
    publish(node, ANNA)
    rpc("user.public_profile", 340699)
    rpc("user.public_profiles", [340699])
    assert node.engine.sessions.sessions == {}


def test_an_unknown_user_is_null(node: ClockNode, rpc: Rpc) -> None:
    assert rpc("user.public_profile", 1) is None
    assert rpc("user.public_profile", "nobody") is None


def test_a_missing_public_field_is_left_out(node: ClockNode, rpc: Rpc) -> None:
    publish(node, {"id": 7, "name": "Gleb", "secret": 1})
    assert rpc("user.public_profile", 7) == {"id": 7, "name": "Gleb"}


def test_profiles_keep_the_order_and_nulls(node: ClockNode, rpc: Rpc) -> None:
    publish(node, ANNA, {"id": 2, "name": "Boris"}, {"id": "u-3", "name": "Vera"})
    assert rpc("user.public_profiles", [2, 999, "u-3", 340699, 2]) == [
        {"id": 2, "name": "Boris"}, None, {"id": "u-3", "name": "Vera"},
        {"id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x"}, {"id": 2, "name": "Boris"}]
    assert rpc("user.public_profiles", []) == []


def test_a_rename_and_a_delete_are_seen_at_once(node: ClockNode, rpc: Rpc) -> None:
    publish(node, ANNA)
    publish(node, {**ANNA, "name": "Anna Smirnova"})
    assert rpc("user.public_profile", 340699)["name"] == "Anna Smirnova"
    publish(node, {"id": 340699}, action="delete")
    assert rpc("user.public_profile", 340699) is None


def test_an_id_from_a_url_finds_a_numeric_id_and_back(node: ClockNode, rpc: Rpc) -> None:
    publish(node, ANNA, {"id": "42", "name": "String id"})
    assert rpc("user.public_profile", "340699")["id"] == 340699
    assert rpc("user.public_profile", 42)["name"] == "String id"
    assert rpc("user.public_profile", "0340699") is None


def test_named_params(node: ClockNode, http: Http) -> None:
    publish(node, ANNA)
    answer = http.post(PATH, {"jsonrpc": "2.0", "method": "user.public_profiles",
                              "params": {"user_ids": [340699]}, "id": 1}).json()
    assert answer["result"][0]["name"] == "Anna"
    answer = http.post(PATH, {"jsonrpc": "2.0", "method": "user.public_profile",
                              "params": {"user_id": 340699}, "id": 2}).json()
    assert answer["result"]["name"] == "Anna"


@pytest.mark.parametrize("method, params", [
    ("user.public_profile", []), ("user.public_profile", [None]), ("user.public_profile", [True]),
    ("user.public_profile", [1.5]), ("user.public_profile", [""]), ("user.public_profile", ["x" * 257]),
    ("user.public_profile", [2 ** 60]), ("user.public_profile", [[1]]), ("user.public_profile", [{}]),
    ("user.public_profile", [1, 2]), ("user.public_profiles", [1]), ("user.public_profiles", ["1"]),
    ("user.public_profiles", [[1, None]]), ("user.public_profiles", [[[1]]]),
    ("user.public_profiles", [list(range(101))]), ("user.public_profiles", []),
])
def test_bad_params(rpc: Rpc, method: str, params: list) -> None:
    assert rpc.error(method, *params).code == -32602


def test_at_most_100_ids(node: ClockNode, rpc: Rpc) -> None:
    publish(node, *({"id": i, "name": f"user {i}"} for i in range(150)))
    answer = rpc("user.public_profiles", list(range(100)))
    assert [p["id"] for p in answer] == list(range(100))


def test_the_fields_come_from_the_views_file(tmp_path) -> None:
    views = tmp_path / "views.yaml"
    views.write_text("types:\n  User: {id: uid, public: [uid, nick]}\n"
                     "views:\n  V: {type: Stream, order: id}\n")
    node = ClockNode("--views", str(views))
    node.engine.apply_changes([Change("User", "upsert", 5, {"uid": 5, "nick": "x",
                                                             "name": "hidden"})])
    rpc = Rpc(Http(node.web.resource()))
    assert rpc("user.public_profile", 5) == {"uid": 5, "nick": "x"}


def test_without_public_fields_there_are_no_profile_methods(tmp_path) -> None:
    views = tmp_path / "views.yaml"
    views.write_text("types:\n  User: {id: id}\nviews:\n  V: {type: Stream, order: id}\n")
    node = ClockNode("--views", str(views))
    publish(node, ANNA)
    rpc = Rpc(Http(node.web.resource()))
    assert rpc.error("user.public_profile", 340699).code == -32601


def test_users_are_kept_with_an_http_store() -> None:
    """With --store-url views come from the backend; the users the feed
    brings are kept by the store for the profile methods."""
    store = HttpStore(treq_client=None, url="http://backend/state", keep={"User"})
    node = ClockNode("--store-url", "http://backend/state", store=store)
    publish(node, ANNA, {"id": 2, "name": "Boris"})
    publish(node, {"id": 2}, action="delete")
    rpc = Rpc(Http(node.web.resource()))
    assert rpc("user.public_profiles", [340699, 2]) == [
        {"id": 340699, "name": "Anna", "avatar": "data:image/svg+xml,x"}, None]
    assert store.objects["User"].keys() == {340699}
    assert "Stream" not in store.objects


def test_the_node_builds_its_http_store_keeping_users() -> None:
    from twisted.internet.task import Clock

    from pushengine.app.service import Node
    from tests.http.harness import options
    node = Node(options("--store-url", "http://backend/state"), Clock())
    assert node.store.keep == {"User"}
    assert json.dumps(sorted(node.catalog.public_fields["User"])) == '["avatar", "id", "name"]'
