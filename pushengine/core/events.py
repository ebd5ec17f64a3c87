"""Events as sessions queue them: encoded once per view, numbered per session.

An event is encoded to JSON once, without its ``seq``; each session that
receives it prefixes its own sequence number when it answers a poll, so
fan-out to many sessions costs no re-encoding.
"""
from __future__ import annotations

import json
from typing import Iterable

from pushengine.core.strictjson import JsonValue

INSERT, UPDATE, DELETE, PING, RESET = "insert", "update", "delete", "ping", "reset"

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class Fragment(str):
    """One event's JSON without its opening brace and ``seq``, with its UTF-8
    bytes made once (``utf8``) and the subscription key it belongs to
    (``key``). One Fragment object is shared by every session that receives
    the event: sessions queue the object itself (no per-session copy), and
    streams write the same bytes."""

    utf8: bytes
    key: str | None
    # compressed once for every WebSocket with permessage-deflate, per window
    # size (made the first time one writes it: transports/deflate.py)
    deflated: dict[int, bytes] | None = None

    def __new__(cls, text: str, key: str | None = None) -> "Fragment":
        self = super().__new__(cls, text)
        self.utf8 = text.encode("utf-8")
        self.key = key
        return self


# A queued event taken back (its subscription ended or was made again before
# it was sent): skipped when answering, so that later events keep their seq.
DROPPED = Fragment("")


def encode_event(key: str, action: str, obj: JsonValue = None,
                 old: JsonValue = None) -> Fragment:
    """The event's JSON without the opening brace and without ``seq``."""
    event: dict[str, JsonValue] = {"key": key, "action": action}
    if obj is not None:
        event["obj"] = obj
    if old is not None:
        event["old"] = old
    return Fragment(_encoder.encode(event)[1:], key)


def utf8(fragment: str) -> bytes:
    """A fragment's UTF-8 bytes (made once for a Fragment)."""
    return getattr(fragment, "utf8", None) or fragment.encode("utf-8")


def with_seq(seq: int, fragment: str) -> str:
    """The full JSON text of one queued event."""
    return '{"seq":%d,%s' % (seq, fragment)


class RawJSON(str):
    """Already-encoded JSON that the RPC layer splices into its answer."""

    __slots__ = ()


class RawUTF8(bytes):
    """Already-encoded JSON as UTF-8 bytes, spliced into an answer as it is.
    A poll's events are built from the fragments' bytes (``Fragment.utf8``):
    formatting and encoding the same events as text cost twice as much."""

    __slots__ = ()


def events_json(first: int, fragments: Iterable[Fragment]) -> RawUTF8:
    """Queued fragments, numbered from ``first``, as a JSON list (UTF-8)."""
    return RawUTF8(b"[" + b",".join([b'{"seq":%d,%b' % (seq, f.utf8)
                                     for seq, f in enumerate(fragments, first)
                                     if f is not DROPPED]) + b"]")
