"""One private PostgreSQL cluster for every test of this folder
(tests/pgcluster.py), and a fresh database per test."""
from __future__ import annotations

import itertools

import pytest

from tests.pgcluster import Cluster, start_cluster

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster():
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        from tests.services import unavailable
        unavailable("psycopg2 is not installed")
    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A fresh, empty database of the private cluster."""
    return pg_cluster.create_database(f"t{next(_names)}")


def execute(url: str, *statements: str, params=None) -> None:
    """Run statements on ``url`` in autocommit mode (test set-up)."""
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement, params)
    finally:
        conn.close()
