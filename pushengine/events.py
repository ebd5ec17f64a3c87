"""Events as sessions queue them: encoded once per view, numbered per session.

An event is encoded to JSON once, without its ``seq``; each session that
receives it prefixes its own sequence number when it answers a poll, so
fan-out to many sessions costs no re-encoding.
"""
from __future__ import annotations

import json
from typing import Any

INSERT, UPDATE, DELETE, PING, RESET = "insert", "update", "delete", "ping", "reset"

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class Fragment(str):
    """One event's JSON without its opening brace and ``seq``, with its UTF-8
    bytes made once (``utf8``): streams write bytes, and the same bytes go to
    every stream that carries the event."""

    def __new__(cls, text: str) -> "Fragment":
        self = super().__new__(cls, text)
        self.utf8 = text.encode("utf-8")
        return self


def encode_event(key: str, action: str, obj: Any = None, old: Any = None) -> Fragment:
    """The event's JSON without the opening brace and without ``seq``."""
    event: dict[str, Any] = {"key": key, "action": action}
    if obj is not None:
        event["obj"] = obj
    if old is not None:
        event["old"] = old
    return Fragment(_encoder.encode(event)[1:])


def utf8(fragment: str) -> bytes:
    """A fragment's UTF-8 bytes (made once for a Fragment)."""
    return getattr(fragment, "utf8", None) or fragment.encode("utf-8")


def with_seq(seq: int, fragment: str) -> str:
    """The full JSON text of one queued event."""
    return '{"seq":%d,%s' % (seq, fragment)


class RawJSON(str):
    """Already-encoded JSON that the RPC layer splices into its answer."""

    __slots__ = ()


def events_json(events) -> RawJSON:
    """Encode queued ``(seq, key, fragment)`` events as a JSON list."""
    return RawJSON("[" + ",".join(['{"seq":%d,%s' % (e[0], e[2]) for e in events]) + "]")
