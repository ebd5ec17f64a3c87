"""The API's description as an OpenRPC 1.3 document (SPEC section 17, "Description").

``openrpc_document(table, catalog)`` describes every method of a node's
final method table (``api.methods.method_table``): one OpenRPC method per
name the dispatcher answers, the ``--namespace`` names included, each with
its params in the order the dispatcher matches them (``Method.names``), a
JSON Schema for each, its result and the application errors it may answer.

The engine's own methods are described by ``DESCRIPTIONS`` below, keyed by
method name, the feature packages' by theirs (``bloom.describe``,
``admin.describe``: the node merges them); a view alias is described from the views file (``sid``, then
the view's declared params with the schema of the role each plays, the
``limit`` with the view's default and maximum); a namespaced name is
described as the method it repeats. A method that has no description gets
the permissive schema ``{}`` for its params and result, and
``undescribed(table, catalog)`` names it: a test fails on any, so that a new
method is described when it is added.

``Discovery`` serves the document: ``rpc.discover`` (its ``methods()`` table,
merged with the others by ``method_table``), and the encoded bytes
``GET /api/openrpc.json`` answers (``pushengine.web.openrpc``). The table
does not change while a node runs, so the document is built once, when the
node is (``describe``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Iterable, Mapping

from pushengine.api.rpc import MAX_ITEMS, MAX_STRING, Method
from pushengine.core.events import RawJSON
from pushengine.views.operators.eq import MAX_STRING as MAX_SCALAR_STRING
from pushengine.views.operators.has_word import MAX_WORD
from pushengine.views.operators.in_ import MAX_IN_VALUES
from pushengine.views.operators.near import LIMITS
from pushengine.views.operators.similar import MAX_TEXT

OPENRPC = "1.3.2"
DISCOVER = "rpc.discover"
TITLE = "pushengine"
Schema = dict[str, Any]

# -- errors ----------------------------------------------------------------------------
ERRORS: dict[int, str] = {
    -32601: "method not found (here: not answered on this transport)",
    -32602: "invalid params: count, names, types or ranges",
    -32603: "internal error",
    1001: "unknown session; create a new one",
    1002: "unknown view",
    1003: "not authorized",
    1004: "limit reached",
    1005: "unknown subscription key",
    1007: "rate limited; retry after the seconds of Retry-After",
    1010: "the Bloom filter refuses the command",
    1011: "the Bloom filters' store is unavailable",
    1012: "the store of initial states is unavailable (its database is down, slow or busy); "
          "nothing was subscribed, retry later",
    1013: "the subscription's view does not declare presence: true",
}


def package_version() -> str:
    try:
        return metadata.version("pushengine")
    except metadata.PackageNotFoundError:
        return "0"


# -- schemas -------------------------------------------------------------------------------
def _string(description: str, max_length: int = MAX_STRING, min_length: int = 0) -> Schema:
    schema: Schema = {"type": "string", "maxLength": max_length, "description": description}
    if min_length:
        schema["minLength"] = min_length
    return schema


def _nullable(schema: Schema) -> Schema:
    return {"oneOf": [schema, {"type": "null"}]}


SID = _string("a session id, as session.create answers it", min_length=1)
KEY = _string("a subscription key, as session.subscribe answers it (e.g. "
              "UserStreamView(user_id=340699;limit=10))")
SCALAR: Schema = {"type": ["string", "number", "boolean", "null"],
                  "maxLength": MAX_SCALAR_STRING}
USER_ID: Schema = {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 256},
                             {"type": "integer", "minimum": -(2 ** 53), "maximum": 2 ** 53}],
                   "description": "a user id: a string of 1 to 256 characters or an integer"}
SEQ: Schema = {"type": "integer", "minimum": 0}
COUNT: Schema = {"type": "integer", "minimum": 0}
TRUE: Schema = {"type": "boolean", "const": True}
OBJECT: Schema = {"type": "object"}
EVENT: Schema = {
    "type": "object", "required": ["seq", "key", "action"],
    "properties": {
        "seq": {"type": "integer", "minimum": 1},
        "key": {"type": "string"},
        "action": {"type": "string",
                   "enum": ["insert", "update", "delete", "reset", "join", "leave"]},
        "obj": OBJECT, "old": OBJECT}}
SUBSCRIBED: Schema = {
    "type": "array", "minItems": 2, "maxItems": 2,
    "items": [{"type": "string", "description": "the subscription key"},
              {"type": "array", "items": OBJECT,
               "description": "the view's current objects, in view order"}],
    "description": "[key, state]"}


@dataclass(frozen=True)
class Description:
    """What the engine says of one of its methods: ``params`` by name (the
    dispatcher's order comes from the method itself), ``errors`` by code."""

    summary: str
    params: Mapping[str, Schema]
    result: Schema
    errors: tuple[int, ...] = ()
    description: str = ""
    result_name: str = "result"
    extra: Mapping[str, Any] = field(default_factory=dict)


SUBSCRIBE_ERRORS = (1001, 1002, 1003, 1004, 1012, -32602)

DESCRIPTIONS: dict[str, Description] = {
    "session.create": Description(
        "Create a session on this node; its id.", {},
        _string("the new session's id (22 URL-safe base64 characters)", min_length=1),
        (1004, 1007), result_name="sid"),
    "session.destroy": Description(
        "Destroy a session and its subscriptions.", {"sid": SID}, TRUE, (1001, -32602)),
    "session.authorize": Description(
        "Authorize a session as the user a token (an HS256 JWT) names.",
        {"sid": SID, "token": _string("a JWT signed with the node's --secret",
                                      max_length=8192, min_length=1)},
        {"type": ["string", "integer"], "description": "the user id"},
        (1001, 1003, -32602), result_name="user"),
    "session.refresh": Description(
        "Extend a session's authorization with a new token for the same user: "
        "it ends at the new token's exp (never without one).",
        {"sid": SID, "token": _string("a JWT of the session's user, signed as "
                                      "session.authorize's", max_length=8192, min_length=1)},
        {"type": ["string", "integer"], "description": "the user id"},
        (1001, 1003, -32602), result_name="user"),
    "session.subscribe": Description(
        "Subscribe a session to a view with parameters; its key and state.",
        {"sid": SID, "view": {"type": "string"},      # the views' names: see _subscribe
         "params": _nullable({"type": "object",
                              "description": "the view's parameters, all of them"}),
         "limit": _nullable({"type": "integer", "minimum": 1,
                             "description": "at most the view's maximum; null: its default"})},
        SUBSCRIBED, SUBSCRIBE_ERRORS, result_name="subscribed"),
    "session.unsubscribe": Description(
        "End one subscription of a session.", {"sid": SID, "key": KEY}, TRUE,
        (1001, 1005, -32602)),
    "session.get_events": Description(
        "Long-poll a session's events after the last one acknowledged.",
        {"sid": SID,
         "timeout": {"type": "number", "minimum": 0, "default": 30,
                     "description": "seconds to wait for an event (capped by --max-timeout)"},
         "ack": _nullable({**SEQ, "description": "the last seq received"})},
        {"type": "array", "items": EVENT}, (1001, -32602), result_name="events"),
    "session.attach": Description(
        "On a WebSocket only: push a session's events to this socket.",
        {"sid": SID, "last_seq": {**SEQ, "default": 0,
                                  "description": "the last seq received (0: none)"}},
        TRUE, (-32601, 1001, -32602), result_name="attached"),
    "stats.online": Description(
        "Sessions online in the service, or in the view of a key.",
        {"key": _nullable(KEY),
         "sid": _nullable({**SID, "description": "a session subscribed to the key "
                                                 "(for a personal view's figure)"})},
        COUNT, (1001, 1005, -32602), result_name="online"),
    "stats.unique": Description(
        "Distinct authorized users of a view's key in the current online period.",
        {"key": KEY, "sid": _nullable({**SID, "description": "a session subscribed to "
                                                             "the key (personal views)"})},
        COUNT, (1001, 1005, -32602), result_name="users"),
    "user.public_profile": Description(
        "The public fields of a User.", {"user_id": USER_ID}, _nullable(OBJECT), (-32602,),
        result_name="profile"),
    "user.public_profiles": Description(
        "The public fields of Users, in the order of the ids.",
        {"user_ids": {"type": "array", "items": USER_ID, "maxItems": 100}},
        {"type": "array", "items": _nullable(OBJECT)}, (-32602,), result_name="profiles"),
    "presence.list": Description(
        "The authorized users present in the view of a session's subscription; only "
        "views declared with presence: true answer.",
        {"sid": SID, "key": KEY}, {"type": "array", "items": USER_ID},
        (1001, 1003, 1005, 1013, -32602), result_name="users"),
    DISCOVER: Description(
        "This document: the OpenRPC description of the methods this node answers.", {},
        {"type": "object", "required": ["openrpc", "info", "methods"]},
        result_name="OpenRPC Schema"),
}

# a view parameter's schema by the role it plays in the view's conditions
ROLE_SCHEMAS: dict[str, Schema] = {
    "eq": SCALAR, "ne": SCALAR,
    "in": {"type": "array", "items": SCALAR, "maxItems": MAX_IN_VALUES},
    "has_word": {"type": "string", "minLength": 1, "maxLength": MAX_WORD,
                 "description": "a single word"},
    "similar.text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT,
                     "description": "a text with at least one word"},
    "gt": {"type": ["number", "string"]}, "gte": {"type": ["number", "string"]},
    "lt": {"type": ["number", "string"]}, "lte": {"type": ["number", "string"]},
    **{role: {"type": "number", "minimum": low, "maximum": high}
       for role, (low, high) in LIMITS.items()},
}
# km 0 is no distance: refused
ROLE_SCHEMAS["km"] = {"type": "number", "exclusiveMinimum": LIMITS["km"][0],
                      "maximum": LIMITS["km"][1]}


# -- the document ----------------------------------------------------------------------------
def _errors(codes: Iterable[int]) -> list[dict[str, Any]]:
    return [{"code": code, "message": ERRORS[code]} for code in codes]


def _param(name: str, schema: Schema, required: bool) -> dict[str, Any]:
    return {"name": name, "schema": schema, "required": required}


def _alias(name: str, method: Method, spec: Any) -> dict[str, Any]:
    """A view alias, from its view: ``sid``, then the declared params."""
    params = []
    for i, param in enumerate(method.names):
        if i == 0:
            schema: Schema = SID
        elif param == "limit":
            schema = {"type": "integer", "minimum": 1, "maximum": spec.limit_max,
                      "default": spec.limit_default}
        else:
            schema = ROLE_SCHEMAS.get(spec.roles.get(param, ""), {})
        params.append(_param(param, schema, i < method.required))
    summary = f"Subscribe a session to {spec.name} (session.subscribe with its parameters)."
    # its view exists (no 1002); 1003 only where the view needs the session's user
    codes = [1001, 1004, -32602]
    if spec.needs_user:
        summary += " Needs an authorized session."
        codes.insert(1, 1003)
    return {"name": name, "summary": summary, "params": params,
            "result": {"name": "subscribed", "schema": SUBSCRIBED},
            "errors": _errors(codes)}


def _described(name: str, method: Method, about: Description,
               catalog: Any) -> dict[str, Any]:
    params = []
    for i, param in enumerate(method.names):
        schema = about.params.get(param, {})
        if about is DESCRIPTIONS.get("session.subscribe") and param == "view":
            schema = {"type": "string", "enum": sorted(getattr(catalog, "views", {}))}
        params.append(_param(param, schema, i < method.required))
    out: dict[str, Any] = {"name": name, "summary": about.summary, "params": params,
                           "result": {"name": about.result_name, "schema": about.result}}
    if about.description:
        out["description"] = about.description
    if about.errors:
        out["errors"] = _errors(about.errors)
    return out


def _origin(name: str, table: Mapping[str, Method]) -> str:
    """The name a namespaced name repeats (``qik.session.create`` →
    ``session.create``: the same Method), or the name itself."""
    method = table[name]
    head, _, rest = name.partition(".")
    while rest:
        if table.get(rest) is method:
            return rest
        head, _, rest = rest.partition(".")
    return name


def _describe(name: str, table: Mapping[str, Method], catalog: Any,
              descriptions: Mapping[str, Description]) -> dict[str, Any] | None:
    method = table[name]
    views = getattr(catalog, "methods", {})
    for candidate in (name, _origin(name, table)):
        if candidate in views:
            return _alias(name, method, views[candidate])
        if candidate in descriptions:
            return _described(name, method, descriptions[candidate], catalog)
    return None


def undescribed(table: Mapping[str, Method], catalog: Any,
                descriptions: Mapping[str, Description] = DESCRIPTIONS) -> list[str]:
    """The methods of ``table`` the document cannot describe, and the
    params (``method(param)``) a description leaves out or names wrongly."""
    missing = []
    for name, method in table.items():
        views = getattr(catalog, "methods", {})
        origin = _origin(name, table)
        if name in views or origin in views:
            continue
        about = descriptions.get(name) or descriptions.get(origin)
        if about is None:
            missing.append(name)
            continue
        if set(about.params) != set(method.names):
            missing.append(f"{name}({', '.join(sorted(set(about.params) ^ set(method.names)))})")
    return missing


def openrpc_document(table: Mapping[str, Method], catalog: Any,
                     version: str | None = None,
                     descriptions: Mapping[str, Description] = DESCRIPTIONS) -> dict[str, Any]:
    """The OpenRPC document of every method in ``table`` (name → Method,
    the dispatcher's), in the table's order."""
    methods = []
    for name, method in table.items():
        described = _describe(name, table, catalog, descriptions)
        if described is None:
            described = {"name": name, "params": [
                _param(p, {}, i < method.required) for i, p in enumerate(method.names)],
                "result": {"name": "result", "schema": {}}}
        methods.append(described)
    return {
        "openrpc": OPENRPC,
        "info": {
            "title": TITLE, "version": version or package_version(),
            "description": (
                "The JSON-RPC 2.0 methods of a pushengine node (POST /api/jsonrpc, or a "
                "WebSocket at /api/ws): sessions, subscriptions to live views, long-polled "
                "events, figures, Bloom filters, presence and the admin methods. Params "
                "are positional or named; a named call may leave out trailing optional "
                "params only. Any call may be refused with 1007 when its client passes "
                "--client-rate, and with 1003 (HTTP 403) without a valid API key where "
                "the node has API keys.")},
        "methods": methods,
    }


class Discovery:
    """``rpc.discover`` and the bytes of ``GET /api/openrpc.json``."""

    def __init__(self, catalog: Any, version: str | None = None,
                 descriptions: Mapping[str, Description] | None = None) -> None:
        """``descriptions``: the engine's own (``DESCRIPTIONS``) and those the
        feature packages give for their methods (``bloom.describe``,
        ``admin.describe``), merged by the node."""
        self.catalog = catalog
        self.version = version
        self.descriptions = DESCRIPTIONS if descriptions is None else descriptions
        self.document: dict[str, Any] | None = None
        self.body = b""
        self._text = RawJSON("null")

    def methods(self) -> dict[str, Method]:
        return {DISCOVER: Method(self.discover, [], 0)}

    def describe(self, table: Mapping[str, Method]) -> dict[str, Any]:
        """Build the document of the node's final table (once: it does not
        change while the node runs)."""
        self.document = openrpc_document(table, self.catalog, self.version, self.descriptions)
        text = json.dumps(self.document, ensure_ascii=False, separators=(",", ":"))
        self._text = RawJSON(text)
        self.body = text.encode("utf-8")
        return self.document

    def discover(self) -> RawJSON:
        return self._text
