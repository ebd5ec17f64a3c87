"""The audience and in_segment conditions in a views file (SPEC 15)."""
from __future__ import annotations

import pytest

from pushengine.views.spec import ViewDefinitionError, parse_catalog


def catalog(where):
    return parse_catalog({"views": {"V": {"type": "Offer", "where": where}}})


def test_audience_takes_session_segments_only():
    with pytest.raises(ViewDefinitionError):
        catalog({"audience": "vip"})
    with pytest.raises(ViewDefinitionError):
        catalog({"tier": "$session.segments"})
    with pytest.raises(ViewDefinitionError):
        catalog({"in_segment": "bad name"})
    assert catalog({"audience": "$session.segments"}).views["V"].needs_segments


def test_binding_and_keys():
    spec = catalog({"audience": "$session.segments"}).views["V"]
    bound = spec.bind({}, None, 10, segments=["b", "a"])
    assert bound.key == 'V(session.segments=["a","b"];limit=10)'
    assert bound.params == {}
    match = bound.predicate()
    assert match({"id": 1, "public": True})
    assert match({"id": 1, "public": True, "audience": "a"})
    assert match({"id": 1, "public": True, "audience": ["x", "b"]})
    for audience in ("c", ["c"], [], 5, {"a": 1}, True):
        assert not match({"id": 1, "public": True, "audience": audience}), audience
    assert not match({"id": 1, "audience": "a"})          # private stays private


def test_in_segment_binds_membership_only():
    spec = catalog({"in_segment": "vip"}).views["V"]
    inside = spec.bind({}, None, 10, segments=["other", "vip"])
    outside = spec.bind({}, None, 10, segments=["other"])
    assert inside.key == 'V(session.segments=["vip"];limit=10)'
    assert outside.key == "V(session.segments=[];limit=10)"
    assert inside.predicate()({"id": 1, "public": True})
    assert not outside.predicate()({"id": 1, "public": True})
    # targeted objects still need an audience condition
    assert not inside.predicate()({"id": 1, "public": True, "audience": "vip"})


def test_a_view_without_audience_never_shows_a_targeted_object():
    spec = catalog({"live": True}).views["V"]
    match = spec.bind({}, None, 10).predicate()
    assert match({"id": 1, "public": True, "live": True})
    assert match({"id": 1, "public": True, "live": True, "audience": None})
    assert not match({"id": 1, "public": True, "live": True, "audience": "vip"})
