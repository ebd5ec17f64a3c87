"""The registry entry of a session: written and read back, refused when unreadable."""
from __future__ import annotations

import pytest

from pushengine.cluster.record import BadRecord, SessionRecord, Subscription


def record(**kw) -> SessionRecord:
    base = dict(owner="node-1", user=340699, seq=17, period=28333333, subs=[
        Subscription("UserStreamView", {"user_id": 340699}, 10,
                     "UserStreamView(user_id=340699;limit=10)"),
        Subscription("WordStreamView", {"word": "кошка"}, 5,
                     'WordStreamView(word="кошка";limit=5)'),
    ])
    base.update(kw)
    return SessionRecord(**base)


def test_fields_round_trip() -> None:
    r = record()
    fields = r.fields()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    assert fields["owner"] == "node-1" and fields["seq"] == "17" and fields["v"] == "1"
    assert SessionRecord.parse(fields) == r
    # as Redis answers: bytes, or text
    assert SessionRecord.parse({k.encode(): v.encode() for k, v in fields.items()}) == r


@pytest.mark.parametrize("user", [None, 42, "alice", "0042", "\ud800odd"])
def test_users_keep_their_type(user) -> None:
    r = record(user=user, period=None)
    assert "period" not in r.fields()
    assert SessionRecord.parse(r.fields()).user == user
    r.fields()["user"].encode("ascii")  # a lone surrogate is escaped, never an encoding error


@pytest.mark.parametrize("change", [
    {"v": "2"}, {"owner": ""}, {"seq": "x"}, {"seq": "-1"}, {"subs": "{"},
    {"subs": "{}"}, {"subs": '[{"view": "V"}]'}, {"user": "{"}, {"period": "soon"},
    {"subs": '[{"view": "V", "params": {}, "limit": true, "key": "k"}]'},
])
def test_unreadable_records_are_refused(change) -> None:
    fields = {**record().fields(), **change}
    with pytest.raises(BadRecord):
        SessionRecord.parse(fields)
    with pytest.raises(BadRecord):
        SessionRecord.parse({k: v for k, v in record().fields().items() if k != "v"})


def test_the_end_of_the_authorization_round_trips() -> None:
    r = record(until=1796012151.25)
    assert r.fields()["until"] == "1796012151.25"
    assert SessionRecord.parse(r.fields()) == r
    assert "until" not in record().fields() and SessionRecord.parse(record().fields()).until is None
    for bad in ("soon", "nan"):
        with pytest.raises(BadRecord):
            SessionRecord.parse(dict(record().fields(), until=bad))


def test_the_held_mark_round_trips_and_is_absent_otherwise() -> None:
    held = SessionRecord("node-1", seq=3, period=5, held=True)
    assert held.fields()["held"] == "1"
    assert SessionRecord.parse(held.fields()) == held
    assert "held" not in SessionRecord("node-1").fields()
    assert not SessionRecord.parse({"v": "1", "owner": "n", "held": "0"}).held
