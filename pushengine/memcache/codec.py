"""Helpers to keep ints and JSON in a cache whose values are bytes."""
from __future__ import annotations

import json
from typing import Any


def encode_int(value: int) -> bytes:
    """An int as memcached's incr/decr expect it: ASCII decimal."""
    if value < 0:
        raise ValueError("memcached counters are unsigned")
    return b"%d" % value


def decode_int(value: bytes | None, default: int = 0) -> int:
    """The int in ``value``; ``default`` when missing or not a number."""
    if value is None:
        return default
    try:
        return int(value.strip())
    except ValueError:
        return default


def encode_json(value: object) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(value: bytes | None, default: object = None) -> Any:
    """The JSON in ``value``; ``default`` when missing."""
    if value is None:
        return default
    return json.loads(value.decode("utf-8"))
