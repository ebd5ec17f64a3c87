"""Small helpers for core tests: an engine on a Clock, a recording client."""
from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pushengine.core.changes import Change
from pushengine.app.engine import build_engine
from pushengine.core.engine import Engine
from pushengine.core.events import RawUTF8
from pushengine.core.sessions import Session, SessionManager, SessionSettings
from pushengine.transports.longpoll import LongPolling
from pushengine.stores.memory import MemoryStore
from pushengine.views.spec import parse_catalog


def make_engine(views: dict, types: dict | None = None, seen: Any = None,
                hooks: Any = None, **settings: Any) -> tuple[Engine, Clock]:
    clock = Clock()
    catalog = parse_catalog({"types": types or {}, "views": views})
    engine = build_engine(clock, catalog, MemoryStore(catalog.id_fields), SessionSettings(**settings),
                          seen=seen, hooks=hooks)
    return engine, clock


def upsert(obj: dict, type_: str = "Stream") -> Change:
    return Change(type_, "upsert", obj["id"], obj)


def delete(id_: Any, type_: str = "Stream") -> Change:
    return Change(type_, "delete", id_, {"id": id_})


def decode(raw: str) -> list[dict]:
    return json.loads(raw)


class Replica:
    """A client's copy of one view, built only from the state and events."""

    def __init__(self, state: list[dict], order: str, limit: int) -> None:
        self.items = {o["id"]: o for o in state}
        self.field = order.lstrip("-")
        self.desc = order.startswith("-")
        self.limit = limit

    def apply(self, event: dict) -> None:
        action, obj = event["action"], event.get("obj")
        if action == "insert":
            assert obj["id"] not in self.items, f"insert of a present object {obj['id']}"
            self.items[obj["id"]] = obj
        elif action == "update":
            assert obj["id"] in self.items, f"update of an absent object {obj['id']}"
            assert event["old"] == self.items[obj["id"]], "old is not the previous state"
            self.items[obj["id"]] = obj
        elif action == "delete":
            assert obj["id"] in self.items, f"delete of an absent object {obj['id']}"
            del self.items[obj["id"]]
        elif action == "reset":
            self.items = {o["id"]: o for o in obj}
        assert len(self.items) <= self.limit, "the view holds more than its limit"

    def ordered(self) -> list[dict]:
        return sorted(self.items.values(), key=lambda o: truth_key(o, self.field),
                      reverse=self.desc)


def truth_key(obj: dict, field: str) -> tuple:
    v = obj.get(field)
    return ((0, 0) if v is None else (2, v)), obj["id"]


def get_events(sessions: SessionManager, session: Session, timeout: float = 0,
               ack: int | None = None) -> Deferred[RawUTF8] | RawUTF8:
    """``session.get_events`` as the API answers it (long-polling on the
    sessions' clock)."""
    return LongPolling(sessions, sessions.clock).get_events(session, timeout, ack)
