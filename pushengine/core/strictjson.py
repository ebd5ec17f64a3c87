"""Strict JSON: the one decoder of everything a client or a backend sends.

Python's ``json`` accepts text that no answer can carry on: lone surrogates
(``"\\ud800"``, which UTF-8 cannot encode), ``NaN`` and ``Infinity``,
``1e999`` (infinite as a float), integers of any length, and nesting as deep
as the C stack allows. A value holding any of them would be stored, then fail
every answer that carries it. ``loads`` refuses them at the door with a
message that says what and where; ``problem`` checks an already decoded value
(a JSON-RPC call, checked call by call so that one bad element of a batch
never fails the others).

Limits (SPEC section 12): nesting at most 64 levels, numbers finite as
floats, integer ids within ±2**53 (see ``safe_id``).
"""
from __future__ import annotations

import json
import json.scanner
import re
import sys
from typing import Any, Callable, Mapping, Sequence, TypeAlias, Union, cast

# A JSON value. Its arrays and objects are read-only (Sequence, Mapping) so
# that a list[dict[str, Any]] is one too. A value straight from a decoder,
# before ``problem`` has judged it, is ``object``: it may still hold what
# JSON cannot carry.
JsonValue: TypeAlias = Union[None, bool, int, float, str, Sequence["JsonValue"],
                             Mapping[str, "JsonValue"]]
# a decoded JSON object
JsonObject: TypeAlias = dict[str, JsonValue]

MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2 ** 53
_MAX_FLOAT = sys.float_info.max
# digits enough to leave the float range (309 and more), or an escape that
# may be a surrogate, or enough brackets to be deep: only then is a decoded
# value walked (the common small call costs three scans of its text)
_SUSPECT = re.compile(r"\\[uU]|\d{300}|[eE][+-]?\d{3}|NaN|Infinity")
# the same test in parts, cheapest first (one regex of five alternatives cost
# more than the JSON decoding of a small change): substrings, then the
# exponent, then a run of 300 digits only in a text that long
_EXPONENT = re.compile(r"[eE][+-]?\d{3}")
_LONG_DIGITS = re.compile(r"\d{300}")


def suspect_text(text: str) -> bool:
    """True when ``_SUSPECT`` finds something in ``text`` (same answer, faster)."""
    return ("\\u" in text or "\\U" in text or "NaN" in text or "Infinity" in text
            or _EXPONENT.search(text) is not None
            or (len(text) >= 300 and _LONG_DIGITS.search(text) is not None))


class UnsafeJSON(ValueError):
    """The text is not JSON that every answer can carry; the message says why."""


class _Invalid:
    """Stands for NaN, Infinity or an infinite float while a call is decoded."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _invalid_constant(text: str) -> _Invalid:
    return _Invalid(text)


def _float_or_invalid(text: str) -> float | _Invalid:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _Invalid(text[:30])
    return value


_lenient = json.JSONDecoder(parse_constant=_invalid_constant, parse_float=_float_or_invalid)
# the C scanner of that decoder, called directly (``decode``'s shortcut)
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    cast(Any, _lenient))
_NONE = object()                # no value read (yet)


def _text(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnsafeJSON(f"the body is not UTF-8 (byte {e.start})") from None


def decode(data: bytes | str, judge: bool = True) -> tuple[Any, bool]:
    """Decode without judging the values: ``(value, suspect)``. ``suspect`` is
    False when the text cannot hold anything ``problem`` refuses, so callers
    may skip the walk (always True with ``judge=False``: the caller walks
    anyway). Raises UnsafeJSON for text that is not JSON at all."""
    if type(data) is bytes:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = _text(data)          # raises, saying where
    else:
        text = _text(data)
    # the shortcut for the common body, one object and nothing around it
    # (every call, every poll): the C scanner alone, without
    # ``JSONDecoder.decode``'s whitespace matches and Python frames; the
    # same value as ``_generic`` gives. Any other text, and any error, is
    # read again by ``_generic``, which says why: errors keep one source.
    value: Any = _NONE
    if text[:1] == "{" and text[-1:] == "}":
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            value = _NONE
        else:
            if end != len(text):
                value = _NONE
    if value is _NONE:
        value = _generic(text)
    if not judge:
        return value, True
    suspect = (text.count("[") + text.count("{") > MAX_DEPTH
               or suspect_text(text))
    return value, suspect


def _generic(text: str) -> Any:
    """``text`` decoded by the whole decoder; UnsafeJSON saying why not."""
    try:
        return _lenient.decode(text)
    except RecursionError:
        raise UnsafeJSON(f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise UnsafeJSON(f"not JSON: {e}") from None


def loads(data: bytes | str) -> Any:
    """Decode UTF-8 JSON text strictly; raise UnsafeJSON saying why not."""
    value, suspect = decode(data)
    if suspect:
        why = problem(value)
        if why is not None:
            raise UnsafeJSON(why)
    return value


def problem(value: object, max_depth: int = MAX_DEPTH, max_string: int | None = None,
            max_items: int | None = None) -> str | None:
    """What makes a decoded value unfit to store or send, or None.

    ``max_string`` bounds every string (and key) in characters, ``max_items``
    every list and object; both unbounded when None.
    """
    return _walk(value, 1, max_depth, max_string, max_items, "")


def _string_problem(s: str, max_string: int | None, where: str) -> str | None:
    if max_string is not None and len(s) > max_string:
        return f"{where or 'a string'} is longer than {max_string} characters"
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where or 'a string'} holds a lone surrogate (not Unicode text)"
    return None


def _walk(value: object, depth: int, max_depth: int, max_string: int | None,
          max_items: int | None, where: str) -> str | None:
    if isinstance(value, str):
        return _string_problem(value, max_string, where)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if -_MAX_FLOAT <= value <= _MAX_FLOAT:
            return None
        return f"{where or 'a number'} is outside the range of a finite number"
    if isinstance(value, float):
        return None  # the decoder turned infinite ones into _Invalid
    if isinstance(value, _Invalid):
        return f"{where or 'a value'} is {value.text}, which is not a JSON number"
    if depth > max_depth:
        return f"{where or 'the value'} is nested deeper than {max_depth} levels"
    if isinstance(value, list):
        if max_items is not None and len(value) > max_items:
            return f"{where or 'a list'} has more than {max_items} elements"
        for i, item in enumerate(value):
            name = f"{where}[{i}]" if len(where) < 60 else where
            why = _walk(item, depth + 1, max_depth, max_string, max_items, name)
            if why is not None:
                return why
        return None
    if isinstance(value, dict):
        if max_items is not None and len(value) > max_items:
            return f"{where or 'an object'} has more than {max_items} members"
        for key, item in value.items():
            why = _string_problem(key, max_string, f"a key of {where or 'an object'}")
            if why is not None:
                return why
            label = key if key.isidentifier() and len(key) < 40 else "[…]"
            name = f"{where}.{label}" if where and label != "[…]" else f"{where}{label}"
            if len(where) >= 60:
                name = where
            why = _walk(item, depth + 1, max_depth, max_string, max_items, name)
            if why is not None:
                return why
        return None
    return f"{where or 'a value'} is not a JSON value"


def safe_id(value: object) -> bool:
    """An id every JSON client reads exactly: a string, or an integer within
    ±2**53 (a JavaScript number holds no more)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return isinstance(value, str)


def identical(a: object, b: object) -> bool:
    """``a == b`` as JSON values. Python's ``==`` holds ``True == 1 == 1.0``,
    which JSON, a client and a view's conditions tell apart (``public: 1`` is
    not ``public: true``): the types must match at every level too."""
    if type(a) is not type(b):
        return False
    # b is of a's type: the isinstance tests below only tell mypy so
    if type(a) is dict and isinstance(b, dict):
        return a.keys() == b.keys() and all(identical(v, b[k]) for k, v in a.items())
    if type(a) is list and isinstance(b, list):
        return len(a) == len(b) and all(map(identical, a, b))
    if type(a) is float:
        return repr(a) == repr(b)       # 0.0 and -0.0 are written apart
    return a == b
