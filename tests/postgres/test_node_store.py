"""A node started as a user starts it, reading its views' initial states
from PostgreSQL (``--store-url postgresql://``): state from the table at
once after a restart, the database's answer in view order, error 1012 (not
-32603) when the database is away, and a refusal at start for a table that
does not exist."""
from __future__ import annotations

import json

import pytest

from pushengine.postgres.writer import DEMO_SCHEMA
from tests.e2e.conftest import Engine, start
from tests.postgres.conftest import execute

ROWS = """
INSERT INTO streams (id, title, user_id, live, public, created_at)
SELECT g, 'Котики ' || g, g % 3, g % 2 = 0, g % 5 <> 0,
       timestamptz '2026-11-30 10:00:00+00' + g * interval '1 minute'
  FROM generate_series(1, 40) g
"""

pytestmark = pytest.mark.e2e


def test_initial_states_come_from_the_table(pg_url, tmp_path):
    execute(pg_url, DEMO_SCHEMA, ROWS)
    node = start(tmp_path, "--store-url", pg_url)
    try:
        sid = node.call("session.create")
        key, state = node.call("stream.subscribe_public_live", sid, 3)
        assert key == "PublicLiveStreamView(limit=3)"
        # live: even ids; public: not a multiple of 5; newest first
        assert [o["id"] for o in state] == [38, 36, 34]
        assert state[0]["created_at"] == "2026-11-30T10:38:00.000000Z"
        assert state[0]["title"] == "Котики 38"
        key, state = node.call("stream.subscribe_user", sid, 1, 2)
        assert [o["id"] for o in state] == [37, 34]
        health = node.get("/health").json()
        assert health["postgres"]["queries"] >= 2
    finally:
        node.stop()
    # a restarted node answers from the database at once
    node = start(tmp_path, "--store-url", pg_url)
    try:
        sid = node.call("session.create")
        _, state = node.call("stream.subscribe_public_live", sid, 2)
        assert [o["id"] for o in state] == [38, 36]
    finally:
        node.stop()


def test_a_database_away_answers_1012_and_other_calls_go_on(tmp_path):
    from tests.services import free_port
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    node = start(tmp_path, "--store-url", url, "--pg-timeout", "1")
    try:
        sid = node.call("session.create")
        node.ids += 1
        answer = node.post("/api/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method":
                                            "stream.subscribe_public_live",
                                            "params": [sid, 3]}, timeout=30).json()
        assert answer["error"]["code"] == 1012, answer
        assert "database" in answer["error"]["message"]
        assert node.call("session.get_events", sid, 0, 0) == []
        assert node.get("/health").code == 200
    finally:
        node.stop()


def test_a_missing_table_stops_the_node_at_start(pg_url, tmp_path):
    node = Engine(tmp_path, "--store-url", pg_url)
    try:
        node.process.wait(30)        # it stops by itself
    finally:
        node.stop()
    assert "table \"streams\" does not exist" in node.log_text()
