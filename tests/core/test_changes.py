"""Change messages: decoding, validation, batches."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pushengine.core.changes import decode_changes, encode_changes


def test_one_change_and_a_batch():
    one = {"type": "Stream", "action": "insert", "obj": {"id": 1}}
    changes, errors = decode_changes(json.dumps(one))
    assert errors == [] and changes[0].action == "upsert" and changes[0].id == 1
    batch = [one, {"type": "Stream", "action": "delete", "obj": {"id": "x"}}]
    changes, errors = decode_changes(json.dumps(batch).encode())
    assert [c.action for c in changes] == ["upsert", "delete"] and errors == []


@pytest.mark.parametrize("body, error", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{nope", "not JSON"),
    (b'{"type":"S","action":"upsert","obj":{"id":NaN}}', "NaN"),
    (b'{"type":"S","action":"upsert","obj":{"id":1,"v":Infinity}}', "Infinity"),
    (b'"text"', "JSON object"),
    (b'{"action":"upsert","obj":{"id":1}}', "'type'"),
    (b'{"type":"S","action":"merge","obj":{"id":1}}', "'action'"),
    (b'{"type":"S","action":"upsert","obj":[1]}', "'obj'"),
    (b'{"type":"S","action":"upsert","obj":{"id":true}}', "obj.id"),
    (b'{"type":"S","action":"upsert","obj":{"id":""}}', "obj.id"),
    (b'{"type":"S","action":"upsert","obj":{"id":1.5}}', "obj.id"),
])
def test_malformed_messages_are_explained(body, error):
    changes, errors = decode_changes(body)
    assert changes == [] and len(errors) == 1 and error in errors[0]


def test_a_bad_change_in_a_batch_is_named_by_index():
    body = json.dumps([{"type": "S", "action": "upsert", "obj": {"id": 1}},
                       {"type": "S", "action": "upsert", "obj": {}}])
    changes, errors = decode_changes(body)
    assert len(changes) == 1 and errors == ["change 1: 'obj.id' must be a non-empty string "
                                            "or an integer within ±2**53"]


def test_id_field_per_type():
    changes, errors = decode_changes(b'{"type":"User","action":"upsert","obj":{"uid":5}}',
                                     {"User": "uid"})
    assert changes[0].id == 5 and errors == []


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63)
                           | st.text().filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF
                                                                for c in t)),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=10)


@given(st.lists(st.fixed_dictionaries({
    "type": st.text(min_size=1, max_size=10),
    "action": st.sampled_from(["upsert", "delete"]),
    "obj": st.fixed_dictionaries({"id": st.integers(-2**53, 2**53)
                                        | st.text(st.characters(blacklist_categories=["Cs"]),
                                                  min_size=1, max_size=20)},
                                 optional={"data": json_values})}), min_size=1, max_size=5))
def test_encode_then_decode_is_identity(items):
    changes, errors = decode_changes(json.dumps(items))
    assert errors == []
    again, errors = decode_changes(encode_changes(changes))
    assert errors == [] and again == changes


@given(st.binary(max_size=200))
def test_any_bytes_never_raise(body):
    changes, errors = decode_changes(body)
    if not changes and not errors:
        # only an empty batch holds nothing to apply and nothing wrong
        assert json.loads(body) == []


def test_an_empty_batch_is_neither_a_change_nor_an_error():
    assert decode_changes(b"[]") == ([], [])
    assert decode_changes(b" [ ]\n") == ([], [])


@pytest.mark.parametrize("text, why", [
    ('{"type":"Stream","action":"upsert","obj":{"id":1,"t":"\\ud800"}}', "surrogate"),
    ('{"type":"Stream","action":"upsert","obj":{"id":1,"v":1e999}}', "1e999"),
    ('{"type":"Stream","action":"upsert","obj":{"id":9007199254740993}}', "2**53"),
    ('{"type":"Stream","action":"upsert","obj":{"id":1,"v":' + "[" * 70 + "]" * 70 + "}}",
     "deeper than 64"),
])
def test_the_publish_command_refuses_what_no_answer_can_carry(text, why):
    """``pushengine-publish`` validates with the same decoder as every feed."""
    from pushengine.tools.publish_cli import BadInput, read_messages
    with pytest.raises(BadInput, match=re.escape(why)):
        read_messages([(1, text)], "line")
