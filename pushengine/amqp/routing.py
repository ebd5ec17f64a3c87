"""Routing keys of the ``interest`` mode (docs/amqp.md, "Interest-based routing").

A change of a type with routing fields (``types: {Stream: {route: [user_id]}}``)
is published to the topic exchange with the key

    <type>.<value of field 1>[.<value of field 2>...]

one word per routing field, in declared order: ``Stream.n340699`` for a
Stream of user 340699. A node binds ``Stream.n340699`` for a view pinned to
that user, ``Stream.#`` for a view that pins no routing field, and
``Stream.*.s42`` for a view that pins only the second of two fields.

Words (``value_word``) are tagged by JSON kind so that ``1`` and ``"1"`` and
``true`` differ: ``z`` null (and a missing field), ``t``/``f`` booleans,
``n<number>`` (1 and 1.0 alike), ``s<text>``, ``x<JSON>`` for a list or an
object. Text is percent-escaped byte by byte except ``A-Z a-z 0-9 _ -``, so
a word never holds ``.`` and is never ``*`` or ``#``: a value cannot split a
key or widen a binding, and distinct values give distinct words. A word
longer than ``MAX_WORD`` is replaced by ``%h`` and the SHA-1 of the word (a
routing key holds at most 255 bytes); two values could then share a word,
which only brings a node a change its views drop.

Changes that cannot be routed go to ``BROADCAST``, which every node binds:
the changes of a type without routing fields (as in fanout mode), and a
delete whose object lacks a routing field (its nodes cannot be known).
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping, Sequence

from pushengine.core.changes import DELETE, Change
from pushengine.core.topics import ANY, BOOL, NULL, NUMBER, OTHER, STRING, Pin, Topic, pin

BROADCAST = "%all"
MAX_WORD = 48
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = "0123456789ABCDEF"


def escape(text: str) -> str:
    """``text`` with every byte of its UTF-8 outside ``A-Za-z0-9_-`` as ``%XX``."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        if byte in _SAFE:
            out.append(chr(byte))
        else:
            out.append("%" + _HEX[byte >> 4] + _HEX[byte & 15])
    return "".join(out)


def _short(word: str) -> str:
    if len(word) <= MAX_WORD:
        return word
    return "%h" + hashlib.sha1(word.encode("ascii")).hexdigest()


def _number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(value)


def value_word(p: Pin) -> str:
    """The word of one routing value (a ``core.topics`` pin)."""
    kind, value = p
    if kind == NULL:
        return "z"
    if kind == BOOL:
        return "t" if value else "f"
    if kind == NUMBER:
        return _short("n" + escape(_number(value)))
    if kind == STRING:
        return _short("s" + escape(value))
    assert kind == OTHER
    return _short("x" + escape(value))


def type_word(type_: str) -> str:
    return _short(escape(type_))


def routing_key(type_: str, pins: Sequence[Pin]) -> str:
    """The key a change of ``type_`` whose routing fields hold ``pins`` is
    published with."""
    return ".".join([type_word(type_)] + [value_word(p) for p in pins])


def binding_key(topic: Topic) -> str:
    """The key a node binds for ``topic``: ``<type>.#`` when it pins no
    field, else a word per field with ``*`` for each unpinned one."""
    head = type_word(topic.type)
    if topic.catch_all:
        return head + ".#"
    return ".".join([head] + ["*" if v is ANY else value_word(v) for v in topic.values])


def change_keys(change: Change, routes: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The keys ``change`` is published with: one, or two for an object that
    moves from one routing value to another and whose change says the old
    values (``was``); ``(BROADCAST,)`` when it cannot be routed."""
    fields = routes.get(change.type)
    if not fields:
        return (BROADCAST,)
    obj = change.obj
    if change.action == DELETE and any(f not in obj for f in fields):
        return (BROADCAST,)
    pins = tuple(pin(obj.get(f)) for f in fields)
    key = routing_key(change.type, pins)
    was = change.was
    if not was:
        return (key,)
    old = tuple(pin(was[f]) if f in was else p for f, p in zip(fields, pins))
    old_key = routing_key(change.type, old)
    return (key,) if old_key == key else (key, old_key)


def plan(changes: Iterable[Change],
         routes: Mapping[str, Sequence[str]]) -> list[tuple[list[Change], tuple[str, ...]]]:
    """A batch as messages: consecutive changes with the same keys go
    together, in order; each message goes to every one of its keys."""
    out: list[tuple[list[Change], tuple[str, ...]]] = []
    for change in changes:
        keys = change_keys(change, routes)
        if out and out[-1][1] == keys:
            out[-1][0].append(change)
        else:
            out.append(([change], keys))
    return out


def routes_of(types: object) -> dict[str, list[str]]:
    """The routing fields of the ``types`` mapping of a views file (for
    publishers that read the views file themselves: ``pushengine-publish``);
    the engine reads and checks them in ``views.spec``."""
    routes: dict[str, list[str]] = {}
    if not isinstance(types, dict):
        return routes
    for name, t in types.items():
        if isinstance(name, str) and isinstance(t, dict) and "route" in t:
            fields: Any = t["route"]
            if isinstance(fields, str):
                fields = [fields]
            if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
                raise ValueError(f"types: {name}: 'route' must be a list of field names")
            routes[name] = list(fields)
    return routes
