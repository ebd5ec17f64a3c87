"""The relay as a user runs it: ``twistd -n pushengine-cdc`` and the console
script (``python -m pushengine.app.cdc``, what ``pushengine-cdc`` runs) as
child processes, against a private PostgreSQL cluster and the local RabbitMQ.

A committed row reaches a queue bound to the exchange with its position in
the headers; SIGTERM stops the relay cleanly; a mapped table without
REPLICA IDENTITY FULL stops it at once, exit status 1, with the table and the
fix in its output.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pushengine.core.positions import Position
from tests.e2e.conftest import ROOT, twistd_command
from tests.pgcluster import start_cluster
from tests.services import require_service, stop_process
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
BROKER = "amqp://guest:guest@127.0.0.1:5672/"
VIEWS = "types:\n  Stream: {id: id, table: streams}\nviews: {}\n"
TABLE = "CREATE TABLE streams (id bigint PRIMARY KEY, title text, live boolean)"


@pytest.fixture(scope="module")
def cluster():
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed")
    c = start_cluster()
    yield c
    c.stop()


def sql(url: str, *statements: str):
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


@pytest.fixture
def database(cluster):
    url = cluster.create_database(f"cdc{uuid.uuid4().hex[:8]}")
    yield url
    # a slot left behind would hold the cluster's WAL
    try:
        sql(url, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE database = current_database() AND NOT active")
    except Exception:
        pass


@pytest.fixture
def queue():
    """A throw-away fanout exchange with one queue bound to it (pika)."""
    require_service("RabbitMQ", "127.0.0.1", 5672)
    import pika
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    exchange = f"e2e.cdc.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare(exchange, "fanout", durable=True)
    name = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(name, exchange)
    channel.exchange_name = exchange
    channel.queue_name = name
    yield channel
    channel.exchange_delete(exchange)
    connection.close()


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def twistd(workdir: Path, *args: str) -> list[str]:
    return [*twistd_command(), "-n", "--pidfile=", f"--logfile={workdir / 'cdc.log'}",
            "pushengine-cdc", *args]


def console(*args: str) -> list[str]:
    return [sys.executable, "-m", "pushengine.app.cdc", *args]


def test_a_committed_row_reaches_the_exchange(tmp_path, database, queue):
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    sql(database, TABLE, "ALTER TABLE streams REPLICA IDENTITY FULL")
    command = twistd(tmp_path, database, "--amqp", BROKER, "--amqp-exchange",
                     queue.exchange_name, "--views", str(views), "--slot", "e2e_relay")
    process = subprocess.Popen(command, cwd=str(tmp_path), env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = tmp_path / "cdc.log"
    try:
        def slot_active():
            if process.poll() is not None:
                pytest.fail(f"the relay exited with {process.returncode}: "
                            f"{log.read_text() if log.exists() else ''}")
            return sql(database, "SELECT active FROM pg_replication_slots "
                                 "WHERE slot_name = 'e2e_relay'") == [(True,)]

        wait_until(slot_active, 30, "the relay following its slot")
        sql(database, "INSERT INTO streams (id, title, live) VALUES (42, 'cat', true)")
        xid = sql(database, "SELECT xmin::text::bigint FROM streams WHERE id = 42")[0][0]

        def message():
            method, properties, body = queue.basic_get(queue.queue_name, auto_ack=True)
            return (properties, body) if method is not None else None

        properties, body = wait_until(message, 30, "the row's message on the queue")
        assert json.loads(body) == [{"type": "Stream", "action": "upsert",
                                     "obj": {"id": 42, "title": "cat", "live": True}}]
        assert properties.content_type == "application/json"
        position = Position.from_headers(properties.headers)
        assert position is not None and position.part == 0 and position.xid == xid
    finally:
        code = stop_process(process)
        out = process.stdout.read().decode("utf-8", "replace") if process.stdout else ""
        process.stdout.close()
    text = log.read_text("utf-8", "replace")
    # twistd ends by the signal it got once it has stopped cleanly
    assert code in (0, -15), out + text
    assert "pushengine-cdc: stopped; 1 transaction(s), 1 message(s), 1 change(s)" in text
    assert "Traceback" not in text, text[-4000:]
    confirmed = sql(database, "SELECT confirmed_flush_lsn >= "
                              "(SELECT pg_current_wal_lsn() - 1000000) FROM "
                              "pg_replication_slots WHERE slot_name = 'e2e_relay'")
    assert confirmed == [(True,)]


@pytest.mark.parametrize("how", ["twistd", "console script"])
def test_a_table_without_replica_identity_full_stops_it(tmp_path, database, how):
    require_service("RabbitMQ", "127.0.0.1", 5672)
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    sql(database, TABLE)
    exchange = f"e2e.cdc.{uuid.uuid4().hex[:8]}"
    args = (database, "--amqp", BROKER, "--amqp-exchange", exchange, "--views", str(views))
    command = twistd(tmp_path, *args) if how == "twistd" else console(*args)
    try:
        done = subprocess.run(command, cwd=str(tmp_path), env=environment(),
                              capture_output=True, text=True, timeout=60)
    finally:
        import pika     # the relay may have declared the exchange before it stopped
        connection = pika.BlockingConnection(pika.URLParameters(BROKER))
        connection.channel().exchange_delete(exchange)
        connection.close()
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pushengine-cdc: cannot follow the WAL: table public.streams"), out
    assert 'ALTER TABLE "public"."streams" REPLICA IDENTITY FULL' in last, out
    assert "Traceback" not in out
    if how == "twistd":
        assert "REPLICA IDENTITY FULL" in (tmp_path / "cdc.log").read_text()


def test_bad_options_exit_1_with_one_line(tmp_path):
    done = subprocess.run(console("postgresql://db/app"), cwd=str(tmp_path),
                          env=environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("pushengine-cdc: --amqp URL is required (or set "
                                   "PUSHENGINE_CDC_AMQP) (see pushengine-cdc --help)")
    views = tmp_path / "views.yaml"
    views.write_text("types:\n  Stream: {id: id}\nviews: {}\n")
    env = {**environment(), "PUSHENGINE_CDC_AMQP": BROKER,
           "PUSHENGINE_CDC_DATABASE": "postgresql://db/app"}
    done = subprocess.run(console("--views", str(views)), cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "maps no type to a table" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
