"""The API's OpenRPC description: ``rpc.discover`` and ``GET /api/openrpc.json``.

The document validates against the OpenRPC meta-schema as the npm package
``@open-rpc/meta-schema`` exports it (installed with npm into
tests/http/.cache/openrpc, beside ``@json-schema-tools/meta-schema``, the
JSON Schema meta-schema it refers to for every param's schema); without node
or npm those tests are skipped, and under CI=true they fail. Every method
the dispatcher answers is in the document, and nothing else; each is
described (a new method without a description fails here); both HTTP fronts
answer the same document through ``rpc.discover`` and the GET route.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from referencing import Registry
from referencing.jsonschema import DRAFT7

from pushengine.api.openrpc import OPENRPC, Discovery, openrpc_document, undescribed
from pushengine.api.rpc import Method
from tests.http.harness import ClockNode, Raw, Rpc, Http, http_request
from tests.services import require_program, unavailable

CACHE = Path(__file__).parent / ".cache" / "openrpc"
PACKAGES = {"@open-rpc/meta-schema": "1.14.9", "@json-schema-tools/meta-schema": "1.8.0"}
FRONTS = ["fast", "twisted"]

# an alias whose limit is not last (so it is required), one with a limit of
# its own, one with no limit at all, and no public User fields (no user.*)
VIEWS = """\
types:
  Stream: {id: id}
views:
  UserWordView:
    type: Stream
    method: clip.by_user_word
    params: [user_id, word, limit]
    where: {user_id: $user_id, title: {has_word: $word}}
    order: -created_at
    limit: {default: 7, max: 30}
  LimitFirstView:
    type: Stream
    method: clip.limit_first
    params: [limit, users]
    where: {user_id: {in: $users}}
    limit: {default: 5, max: 5}
  NoLimitView:
    type: Stream
    method: clip.near
    params: [lat, lon, km]
    where: {near: {lat: $lat, lon: $lon, km: $km}}
  NoAliasView:
    type: Stream
    params: [word]
    where: {title: {has_word: $word}}
"""


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("views") / "views.yaml"
    path.write_text(VIEWS)
    return str(path)


def _installed() -> bool:
    for name, version in PACKAGES.items():
        manifest = CACHE / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text())["version"] != version:
            return False
    return True


@pytest.fixture(scope="module")
def validator() -> Draft7Validator:
    """The OpenRPC meta-schema, its ``$schema`` dropped, with the JSON Schema
    meta-schema it refers to registered under its address."""
    node, npm = require_program("node"), require_program("npm")
    if not _installed():
        CACHE.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund",
                   "--no-save", "--loglevel=error",
                   *(f"{name}@{version}" for name, version in PACKAGES.items())]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            unavailable("npm install of the OpenRPC meta-schema took over 300 s (no registry?)")
        if done.returncode != 0:
            unavailable("npm install of the OpenRPC meta-schema failed (is the npm registry "
                        f"reachable?): {done.stderr.strip()[-500:]}")
    modules = CACHE / "node_modules"
    script = ("const [a, b] = process.argv.slice(1).map(require);"
              "console.log(JSON.stringify([a.openrpcDocument, b.default || b.jsonSchema]))")
    done = subprocess.run([node, "-e", script, str(modules / "@open-rpc" / "meta-schema"),
                           str(modules / "@json-schema-tools" / "meta-schema")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NODE_NO_WARNINGS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    meta, json_schema = json.loads(done.stdout)
    meta.pop("$schema")
    json_schema.pop("$schema")
    resource = DRAFT7.create_resource(json_schema)
    registry = Registry().with_resources(
        [(uri, resource) for uri in ("https://meta.json-schema.tools",
                                     "https://meta.json-schema.tools/")])
    return Draft7Validator(meta, registry=registry)


def problems(validator: Draft7Validator, document: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300]
            for e in validator.iter_errors(document)]


def by_name(document: dict) -> dict[str, dict]:
    return {m["name"]: m for m in document["methods"]}


# -- (a) the meta-schema -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [(), ("--namespace", "qik", "--admin-key", "k" * 32)])
def test_the_document_validates_against_the_openrpc_meta_schema(
        validator: Draft7Validator, argv: tuple[str, ...]) -> None:
    document = ClockNode(*argv).discovery.document
    assert document["openrpc"] == OPENRPC
    assert problems(validator, document) == []


def test_the_document_of_a_views_file_validates(validator: Draft7Validator, views: str) -> None:
    document = ClockNode("--views", views, "--namespace", "qik").discovery.document
    assert problems(validator, document) == []


def test_the_validator_finds_what_is_wrong(validator: Draft7Validator) -> None:
    """The meta-schema is applied, the params' JSON Schemas included (their
    meta-schema is resolved, not taken as anything goes)."""
    document = ClockNode().discovery.document
    assert problems(validator, {**document, "openrpc": "9.9"})
    assert problems(validator, {k: v for k, v in document.items() if k != "info"})
    broken = json.loads(json.dumps(document))
    broken["methods"][0]["params"] = [{"name": "x", "schema": {"type": "no such type"}}]
    assert problems(validator, broken)


# -- (b) every method the dispatcher answers, and nothing else ---------------------------

@pytest.mark.parametrize("argv", [(), ("--namespace", "qik"), ("--views", None),
                                  ("--views", None, "--namespace", "qik")])
def test_every_method_of_the_dispatcher_and_nothing_else(argv: tuple, views: str) -> None:
    node = ClockNode(*(views if a is None else a for a in argv))
    table = node.dispatcher.methods
    document = node.discovery.document
    names = [m["name"] for m in document["methods"]]
    assert len(names) == len(set(names))
    assert set(names) == set(table)
    assert "rpc.discover" in names
    for method in document["methods"]:
        assert [p["name"] for p in method["params"]] == table[method["name"]].names
        required = [p["required"] for p in method["params"]]
        assert required == [i < table[method["name"]].required for i in range(len(required))]
    if "--namespace" in argv:
        assert {f"qik.{n}" for n in names if not n.startswith("qik.")} <= set(names)
        assert by_name(document)["qik.session.create"]["params"] == \
            by_name(document)["session.create"]["params"]
    if "--views" in argv:
        assert "clip.by_user_word" in names and "user.public_profile" not in names
        assert by_name(document)["session.subscribe"]["params"][1]["schema"]["enum"] == \
            ["LimitFirstView", "NoAliasView", "NoLimitView", "UserWordView"]


@pytest.mark.parametrize("argv", [(), ("--views", None, "--namespace", "qik")])
def test_every_method_is_described(argv: tuple, views: str) -> None:
    """A method added to the node without a description (and its params)
    in pushengine/api/openrpc.py fails here."""
    node = ClockNode(*(views if a is None else a for a in argv))
    assert undescribed(node.dispatcher.methods, node.catalog, node.discovery.descriptions) == []
    for method in node.discovery.document["methods"]:
        assert method.get("summary") and method["result"]["schema"], method["name"]
        assert all(p["schema"] for p in method["params"]), method["name"]


def test_a_method_without_a_description_is_named_and_left_permissive() -> None:
    node = ClockNode()
    table = {**node.dispatcher.methods, "extra.thing": Method(lambda a, b=1: a, ["a", "b"], 1),
             "stats.online": Method(lambda key=None, sid=None, more=None: 0)}
    assert undescribed(table, node.catalog, node.discovery.descriptions) == ["stats.online(more)", "extra.thing"]
    extra = by_name(openrpc_document(table, node.catalog, descriptions=node.discovery.descriptions))["extra.thing"]
    assert extra["params"] == [{"name": "a", "schema": {}, "required": True},
                               {"name": "b", "schema": {}, "required": False}]
    assert extra["result"]["schema"] == {}


def test_the_version_is_the_package_s() -> None:
    from importlib import metadata
    document = ClockNode().discovery.document
    assert document["info"]["title"] == "pushengine"
    try:
        assert document["info"]["version"] == metadata.version("pushengine")
    except metadata.PackageNotFoundError:
        assert document["info"]["version"] == "0"


# -- (d) a view alias: params in declared order, the limit's bounds -------------------------

def test_an_alias_has_its_view_s_params_in_order_with_the_limit_s_bounds(views: str) -> None:
    methods = by_name(ClockNode("--views", views).discovery.document)
    alias = methods["clip.by_user_word"]
    assert [p["name"] for p in alias["params"]] == ["sid", "user_id", "word", "limit"]
    assert [p["required"] for p in alias["params"]] == [True, True, True, False]
    limit = alias["params"][3]["schema"]
    assert (limit["type"], limit["minimum"], limit["maximum"], limit["default"]) == \
        ("integer", 1, 30, 7)
    assert alias["params"][2]["schema"]["maxLength"] == 100            # a single word
    assert {e["code"] for e in alias["errors"]} == {1001, 1004, -32602}
    first = methods["clip.limit_first"]
    assert [(p["name"], p["required"]) for p in first["params"]] == \
        [("sid", True), ("limit", True), ("users", True)]
    assert (first["params"][1]["schema"]["maximum"], first["params"][1]["schema"]["default"]) \
        == (5, 5)
    assert first["params"][2]["schema"]["type"] == "array"
    near = methods["clip.near"]
    assert [p["name"] for p in near["params"]] == ["sid", "lat", "lon", "km"]
    assert near["params"][1]["schema"]["minimum"] == -90
    assert "clip.near" in methods and "NoAliasView" not in json.dumps(
        [m["name"] for m in methods.values()])


def test_the_default_views_aliases() -> None:
    methods = by_name(ClockNode().discovery.document)
    home = methods["stream.subscribe_home"]
    assert [p["name"] for p in home["params"]] == ["sid", "users", "limit"]
    assert home["params"][2]["schema"]["default"] == 20
    assert 1003 in {e["code"] for e in home["errors"]}
    codes = {e["code"] for e in methods["session.subscribe"]["errors"]}
    assert codes == {1001, 1002, 1003, 1004, 1012, -32602}


# -- what a node answers matches what the document says ----------------------------------

def test_answers_fit_their_result_schemas() -> None:
    node = ClockNode()
    rpc = Rpc(Http(node.web.resource()))
    methods = by_name(node.discovery.document)

    def fits(name: str, value: Any) -> Any:
        errors = list(Draft7Validator(methods[name]["result"]["schema"]).iter_errors(value))
        assert not errors, (name, value, errors)
        return value
    sid = fits("session.create", rpc("session.create"))
    fits("stream.subscribe_user", rpc("stream.subscribe_user", sid, 340699, 5))
    fits("session.subscribe", rpc("session.subscribe", sid, "WordStreamView", {"word": "cat"}))
    fits("session.get_events", rpc("session.get_events", sid, 0))
    fits("stats.online", rpc("stats.online"))
    fits("user.public_profile", rpc("user.public_profile", 1))
    fits("rpc.discover", rpc("rpc.discover"))
    fits("session.destroy", rpc("session.destroy", sid))


# -- (c) over HTTP, on both fronts -----------------------------------------------------------

def exchange(front: str, data: bytes, *argv: str) -> list:
    node = ClockNode("--http", front, *argv)
    raw = Raw(node.http_factory())
    raw.send(data)
    node.clock.advance(0)
    return raw.responses()


DISCOVER = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "rpc.discover"}).encode()


@pytest.mark.parametrize("front", FRONTS)
def test_rpc_discover_and_the_get_route_answer_the_same_document(front: str) -> None:
    data = http_request("POST", "/api/jsonrpc", DISCOVER,
                        {"Content-Type": "application/json"}) + \
        http_request("GET", "/api/openrpc.json") + \
        http_request("POST", "/api/jsonrpc", json.dumps(
            {"jsonrpc": "2.0", "id": 2, "method": "qik.rpc.discover", "params": []}).encode())
    called, got, namespaced = exchange(front, data, "--namespace", "qik")
    assert called.code == got.code == namespaced.code == 200
    assert got.content_type == "application/json"
    document = got.json()
    assert called.json()["result"] == namespaced.json()["result"] == document
    assert document == ClockNode("--namespace", "qik").discovery.document
    assert "qik.rpc.discover" in {m["name"] for m in document["methods"]}


def test_both_fronts_answer_the_same_bytes() -> None:
    data = http_request("GET", "/api/openrpc.json")
    bodies = {front: exchange(front, data)[0].body for front in FRONTS}
    assert bodies["fast"] == bodies["twisted"]
    assert json.loads(bodies["fast"])["openrpc"] == OPENRPC


@pytest.mark.parametrize("front", FRONTS)
def test_the_get_route_asks_for_the_api_key_as_the_api_does(front: str) -> None:
    argv = ("--api-key", "k1", "--cors-origin", "https://www.example.com")
    data = http_request("GET", "/api/openrpc.json") + \
        http_request("GET", "/api/openrpc.json?apikey=k1") + \
        http_request("GET", "/api/openrpc.json", b"", {"X-Api-Key": "k1"}) + \
        http_request("OPTIONS", "/api/openrpc.json", b"",
                     {"Origin": "https://www.example.com",
                      "Access-Control-Request-Headers": "x-api-key"}) + \
        http_request("POST", "/api/jsonrpc", DISCOVER)
    refused, by_query, by_header, preflight, rpc_refused = exchange(front, data, *argv)
    assert refused.code == 403 and "API key" in refused.json()["error"]
    assert by_query.code == by_header.code == 200
    assert by_query.json() == by_header.json()
    assert preflight.code == 204
    for reply in (refused, by_query, preflight):
        assert reply.header("access-control-allow-origin") == "https://www.example.com"
    assert rpc_refused.code == 403           # rpc.discover: the same rule


@pytest.mark.parametrize("front", FRONTS)
def test_head_and_other_methods(front: str) -> None:
    data = http_request("HEAD", "/api/openrpc.json") + \
        http_request("POST", "/api/openrpc.json", b"{}")
    head, post = exchange(front, data)
    assert head.code == 200 and head.body == b""
    assert post.code == 405 and "OPTIONS" in (post.header("allow") or "")


def test_the_discovery_serves_what_it_described() -> None:
    node = ClockNode()
    discovery = Discovery(node.catalog, version="1.2.3")
    table = {**node.dispatcher.methods, **discovery.methods()}
    document = discovery.describe(table)
    assert document["info"]["version"] == "1.2.3"
    assert json.loads(discovery.body) == document == json.loads(discovery.discover())
