"""``stream.subscribe_similar`` through the real resource: the initial state,
the events that follow changes, and -32602 for bad input (SPEC sections 12
and 13)."""
from __future__ import annotations

import pytest

from tests.http.harness import ClockNode, Http, Rpc


def stream(id_: int, title: str, **fields) -> dict:
    return {"id": id_, "title": title, "user_id": 1, "live": True, "public": True,
            "created_at": id_, **fields}


def publish(http: Http, *objs: dict, action: str = "upsert") -> None:
    reply = http.post("/api/publish", [{"type": "Stream", "action": action, "obj": o}
                                       for o in objs])
    assert reply.code == 200, reply


def test_subscribe_similar_follows_changes(rpc: Rpc, sid: str, node: ClockNode) -> None:
    publish(rpc.http, stream(1, "Cats playing the piano"), stream(2, "Dogs at the beach"),
            stream(3, "cats playing piano live"), stream(4, "Cats playing the piano",
                                                         public=False))
    key, state = rpc("stream.subscribe_similar", sid, "cats, playing the piano!", 5)
    assert key == 'SimilarStreamView(text="cats playing the piano";limit=5)'
    assert [(o["id"], o["_similarity"]) for o in state] == [(1, 1.0), (3, 0.6)]
    publish(rpc.http, stream(5, "the piano cats playing"), stream(1, "Cats", live=False))
    got = rpc("session.get_events", sid, 0)
    assert [(e["action"], e["obj"]["id"]) for e in got] == [("insert", 5), ("delete", 1)]
    # the view's initial state came from the store's LSH index
    assert node.engine.store.turns == 0


@pytest.mark.parametrize("params, message", [
    (["", 5], "at least one word"),
    (["   ", 5], "at least one word"),
    (["?!", 5], "at least one word"),
    (["x" * 1025, 5], "1024"),
    ([5, 5], "at least one word"),
    ([None, 5], "at least one word"),
    (["cats", 51], "limit"),
])
def test_bad_similar_params_are_minus_32602(rpc: Rpc, sid: str, node: ClockNode,
                                            params, message) -> None:
    error = rpc.error("stream.subscribe_similar", sid, *params)
    assert error.code == -32602 and message in error.message, error.message
    assert node.engine.sessions.sessions[sid].subs == {}
    error = rpc.error("session.subscribe", sid, "SimilarStreamView", {"text": params[0]},
                      params[1])
    assert error.code == -32602
