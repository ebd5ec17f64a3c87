"""The strict JSON decoder every input path shares."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from pushengine.core import strictjson
from pushengine.core.strictjson import UnsafeJSON

clean_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)
clean = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63)
    | st.floats(allow_nan=False, allow_infinity=False) | clean_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(clean_text, inner, max_size=4),
    max_leaves=20)


@given(clean)
def test_what_json_can_carry_round_trips(value):
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert strictjson.loads(text) == value
        assert strictjson.loads(text.encode("utf-8")) == value


@given(clean, st.sampled_from(['"\\ud800"', '"a\\udfffb"', "NaN", "-Infinity", "1e999",
                               "1" + "0" * 400, "[" * 70 + "]" * 70]))
def test_one_bad_value_anywhere_is_refused(value, bad):
    text = json.dumps({"ok": value, "bad": "HOLE"}).replace('"HOLE"', bad)
    with pytest.raises(UnsafeJSON):
        strictjson.loads(text)


@pytest.mark.parametrize("text, why", [
    (b"\xff", "not UTF-8"), (b"{", "not JSON"), ('"\\ud800"', "surrogate"),
    ('{"a": [1, NaN]}', "a[1] is NaN"), ('{"v": 1e999}', "v is 1e999"),
    ("[" * 65 + "]" * 65, "deeper than 64"), ("[" * 100_000 + "]" * 100_000, "deeper than 64"),
    ('{"k\\udc00": 1}', "a key"),
])
def test_refusals_say_what_and_where(text, why):
    with pytest.raises(UnsafeJSON, match=why.replace("[", r"\[")):
        strictjson.loads(text)


def test_sixty_four_levels_pass():
    assert strictjson.loads("[" * 64 + "]" * 64) is not None


def test_bounds_on_strings_and_lists():
    assert strictjson.problem(["x" * 10], max_string=10) is None
    assert "longer than 10" in strictjson.problem(["x" * 11], max_string=10)
    assert "more than 3 elements" in strictjson.problem({"a": [1, 2, 3, 4]}, max_items=3)
    assert "more than 1 members" in strictjson.problem({"a": 1, "b": 2}, max_items=1)


@pytest.mark.parametrize("value, ok", [
    (0, True), (2 ** 53, True), (-2 ** 53, True), (2 ** 53 + 1, False), (10 ** 400, False),
    ("x", True), (True, False), (1.5, False), (None, False),
])
def test_safe_ids(value, ok):
    assert strictjson.safe_id(value) is ok


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.0, 2.5])
    | st.text(max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                 max_size=3),
    max_leaves=8)


@given(json_values, json_values)
def test_identical_is_equality_of_the_json_text(a, b):
    same_text = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert strictjson.identical(a, b) == same_text
    assert strictjson.identical(a, a)


def test_identical_tells_apart_what_python_calls_equal():
    assert {"public": True} == {"public": 1}
    assert not strictjson.identical({"public": True}, {"public": 1})
    assert not strictjson.identical([1], [1.0])
    assert not strictjson.identical({"a": 0.0}, {"a": -0.0})
    assert strictjson.identical({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})


@given(st.one_of(
    st.text(max_size=80),
    st.text(alphabet="0123456789eE+-.\\uUNaIfinty\"[]{},:٣", max_size=400),
    st.integers(250, 350).map(lambda n: "x" * (n % 7) + "7" * n),
))
def test_the_quick_suspect_test_answers_as_the_one_regex(text):
    assert strictjson.suspect_text(text) == (strictjson._SUSPECT.search(text) is not None)


# -- the shortcut of decode (one object, read by the C scanner alone) -----------------

def _generic_decode(data: bytes) -> tuple[str, object]:
    """What the generic path answers: ("value", value) or ("error", message)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            strictjson._text(data)
        except UnsafeJSON as e:
            return "error", str(e)
    try:
        return "value", strictjson._generic(text)
    except UnsafeJSON as e:
        return "error", str(e)


def _decoded(data: bytes) -> tuple[str, object]:
    try:
        return "value", strictjson.decode(data, judge=False)[0]
    except UnsafeJSON as e:
        return "error", str(e)


def _same(a: tuple[str, object], b: tuple[str, object]) -> bool:
    # repr: NaN stands for itself (an _Invalid), and 0.0 is not -0.0
    return a[0] == b[0] and repr(a[1]) == repr(b[1])


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
_polls = st.builds(lambda sid, timeout, ack, id_: json.dumps(
    {"jsonrpc": "2.0", "id": id_, "method": "session.get_events",
     "params": [sid, timeout] + ([] if ack is None else [ack])}),
    st.text(max_size=12), st.one_of(st.integers(0, 90), st.floats()),
    st.one_of(st.none(), st.integers(-1, 10 ** 20)), st.one_of(st.integers(), st.text(max_size=4)))
_bodies = st.one_of(
    _polls,
    st.dictionaries(st.text(max_size=6), _values, max_size=4).map(json.dumps),
    _values.map(json.dumps))
# ways to spoil a body: cut it, add or remove around it, change a byte
_spoil = st.sampled_from(["", " ", "\n", "x", "}", "{", "]", ",", "\ud800", "NaN", "1e999"])


@given(_bodies, _spoil, _spoil, st.integers(0, 60), st.integers(0, 60))
def test_the_shortcut_answers_as_the_generic_path(body, before, after, cut, at):
    variants = [body, before + body + after, body[:max(len(body) - cut, 0)],
                body[:at] + after + body[at + 1:], body[:at] + before + body[at:]]
    for text in variants:
        data = text.encode("utf-8", "surrogatepass")
        assert _same(_decoded(data), _generic_decode(data)), data


@given(st.binary(max_size=40))
def test_the_shortcut_answers_bytes_as_the_generic_path(tail):
    for data in (b"{" + tail + b"}", b'{"a":' + tail + b"}", b"{}" + tail, tail):
        assert _same(_decoded(data), _generic_decode(data)), data


def test_the_shortcut_refuses_as_the_generic_path():
    for data, why in [(b'{"a": 1} x', "Extra data"), (b'{"a": }', "Expecting value"),
                      (b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}", "nesting deeper"),
                      (b'{"a": "\xff"}', "not UTF-8")]:
        kind, message = _decoded(data)
        assert kind == "error" and why in str(message)
        assert _same((kind, message), _generic_decode(data))
