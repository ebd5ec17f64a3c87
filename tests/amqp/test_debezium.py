"""Debezium's JSON change events (``--amqp-format debezium``) without a broker.

The samples follow the events of Debezium's PostgreSQL connector as its
documentation shows them: the envelope (``before``, ``after``, ``source``,
``op``, ``ts_ms``) with or without the JSON converter's schema wrapper, the
connector's ``source`` block (``txId``, ``lsn``, ``sequence``), and the
semantic types of its temporal, decimal and JSON columns.
"""
import json

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher

from pushengine.amqp import AmqpFeed
from pushengine.amqp.debezium import decode_debezium, decode_message, table_map
from pushengine.core.changes import Change
from pushengine.core.positions import Position
from pushengine.views.spec import Table

from tests.amqp.conftest import RecordingSink

TABLES = {("public", "streams"): ("Stream", "id"),
          ("inventory", "customers"): ("Customer", "customer_id")}


def source(txid=771, lsn=24023128, last_commit=24023000, snapshot="false",
           table="streams", schema="public"):
    return {"version": "2.7.3.Final", "connector": "postgresql", "name": "app",
            "ts_ms": 1709288130100, "snapshot": snapshot, "db": "appdb",
            "sequence": json.dumps([None if last_commit is None else str(last_commit),
                                    str(lsn)]),
            "ts_us": 1709288130100000, "ts_ns": 1709288130100000000,
            "schema": schema, "table": table, "txId": txid, "lsn": lsn, "xmin": None}


def column(name, type_, semantic=None, optional=True, **more):
    schema = {"type": type_, "optional": optional, "field": name, **more}
    if semantic:
        schema["name"] = semantic
        schema["version"] = 1
    return schema


STREAM_COLUMNS = [
    column("id", "int32", optional=False),
    column("title", "string"),
    column("live", "boolean"),
    column("plays", "int64"),
    column("created_at", "string", "io.debezium.time.ZonedTimestamp"),      # timestamptz
    column("starts_at", "int64", "io.debezium.time.MicroTimestamp"),         # timestamp
    column("edited_at", "int64", "io.debezium.time.Timestamp"),              # timestamp(3)
    column("day", "int32", "io.debezium.time.Date"),                         # date
    column("opens", "int64", "io.debezium.time.MicroTime"),                  # time
    column("meta", "string", "io.debezium.data.Json"),                       # jsonb
    column("price", "bytes", "org.apache.kafka.connect.data.Decimal",        # numeric(10,2)
           parameters={"scale": "2", "connect.decimal.precision": "10"}),
    column("ratio", "struct", "io.debezium.data.VariableScaleDecimal",       # numeric
           fields=[{"type": "int32", "optional": False, "field": "scale"},
                   {"type": "bytes", "optional": False, "field": "value"}]),
    {"type": "array", "optional": True, "field": "tags",                    # text[]
     "items": {"type": "string", "optional": True}},
    {"type": "array", "optional": True, "field": "slots",                   # timestamp[]
     "items": {"type": "int64", "optional": True,
               "name": "io.debezium.time.MicroTimestamp", "version": 1}},
]


def envelope_schema(columns, name="app.public.streams"):
    """The JSON converter's schema of a PostgreSQL change event."""
    value = {"type": "struct", "fields": columns, "optional": True,
             "name": f"{name}.Value"}
    return {
        "type": "struct", "optional": False, "name": f"{name}.Envelope", "version": 2,
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {"type": "struct", "optional": False, "field": "source",
             "name": "io.debezium.connector.postgresql.Source",
             "fields": [column("version", "string", optional=False),
                        column("connector", "string", optional=False),
                        column("name", "string", optional=False),
                        column("ts_ms", "int64", optional=False),
                        column("snapshot", "string", "io.debezium.data.Enum",
                               parameters={"allowed": "true,last,false,incremental"}),
                        column("db", "string", optional=False),
                        column("sequence", "string"),
                        column("schema", "string", optional=False),
                        column("table", "string", optional=False),
                        column("txId", "int64"), column("lsn", "int64"),
                        column("xmin", "int64")]},
            column("op", "string", optional=False),
            column("ts_ms", "int64"),
            {"type": "struct", "optional": True, "field": "transaction",
             "name": "event.block", "version": 1,
             "fields": [column("id", "string", optional=False),
                        column("total_order", "int64", optional=False),
                        column("data_collection_order", "int64", optional=False)]},
        ]}


STREAM_ROW = {
    "id": 7, "title": "cat", "live": True, "plays": 12,
    "created_at": "2024-03-01T10:15:30.123456Z",
    "starts_at": 1709288130123456,
    "edited_at": 1709288130123,
    "day": 19783,
    "opens": 36930500000,
    "meta": "{\"lang\": \"en\", \"tags\": [1, 2]}",
    "price": "BOI=",                                  # 12.50
    "ratio": {"scale": 3, "value": "+w=="},          # -0.005
    "tags": ["a", "b"],
    "slots": [1709288130123456, None],
}

STREAM_OBJECT = {
    "id": 7, "title": "cat", "live": True, "plays": 12,
    "created_at": "2024-03-01T10:15:30.123456Z",
    "starts_at": "2024-03-01T10:15:30.123456Z",
    "edited_at": "2024-03-01T10:15:30.123000Z",
    "day": "2024-03-01",
    "opens": "10:15:30.5",
    "meta": {"lang": "en", "tags": [1, 2]},
    "price": 12.5,
    "ratio": -0.005,
    "tags": ["a", "b"],
    "slots": ["2024-03-01T10:15:30.123456Z", None],
}


def event(op, before=None, after=None, src=None, with_schema=True):
    payload = {"before": before, "after": after, "source": src or source(), "op": op,
               "ts_ms": 1709288130200, "transaction": None}
    if not with_schema:
        return json.dumps(payload).encode()
    return json.dumps({"schema": envelope_schema(STREAM_COLUMNS),
                       "payload": payload}).encode()


def test_a_create_with_the_schema_is_an_upsert_in_the_engines_forms():
    decoded = decode_message(event("c", after=STREAM_ROW), TABLES)
    assert decoded.errors == [] and not decoded.ignored and decoded.unmapped is None
    assert decoded.changes == [Change("Stream", "upsert", 7, STREAM_OBJECT, xid=771)]
    # the watermark's position: (the last commit before, the event's own LSN)
    assert decoded.position == Position(24023000, 771, 24023128)
    assert decoded.sent_ms == 1709288130200


def test_an_update_without_the_schema_takes_the_values_as_they_are():
    changes, errors = decode_debezium(
        event("u", before=None, after=STREAM_ROW, with_schema=False), TABLES)
    assert errors == []
    assert changes == [Change("Stream", "upsert", 7, STREAM_ROW, xid=771)]


def test_a_delete_is_a_delete_of_before_by_its_key():
    # REPLICA IDENTITY DEFAULT: before holds the key, the other columns null
    before = {name: None for name in STREAM_ROW} | {"id": 7}
    for with_schema in (True, False):
        changes, errors = decode_debezium(
            event("d", before=before, after=None, with_schema=with_schema), TABLES)
        assert errors == []
        assert changes == [Change("Stream", "delete", 7, before, xid=771)]


def test_a_snapshot_read_is_an_upsert_without_a_position():
    """Every row of a snapshot has the snapshot's one LSN: the watermark
    must not see them, or it would drop all but the first."""
    src = source(txid=(3 << 32) + 555, lsn=24023128, last_commit=None, snapshot="true")
    decoded = decode_message(event("r", after=STREAM_ROW, src=src), TABLES)
    assert decoded.changes == [Change("Stream", "upsert", 7, STREAM_OBJECT,
                                      xid=(3 << 32) + 555)]
    assert decoded.position is None
    # an incremental snapshot's read says the transaction last streamed
    src = source(snapshot="incremental")
    decoded = decode_message(event("r", after=STREAM_ROW, src=src), TABLES)
    assert decoded.changes[0].xid is None and decoded.position is None


def test_the_first_transaction_after_a_start_has_no_position():
    src = source(last_commit=None)
    decoded = decode_message(event("c", after=STREAM_ROW, src=src), TABLES)
    assert decoded.changes[0].xid == 771 and decoded.position is None


def test_a_connector_without_schemas_names_the_table_by_its_database():
    """MySQL's connector: ``source.db`` and ``source.table``, no txId."""
    payload = {"before": None, "after": {"customer_id": "c-1", "name": "Anne"},
               "source": {"connector": "mysql", "db": "inventory", "table": "customers",
                          "file": "mysql-bin.000003", "pos": 154, "row": 0},
               "op": "c", "ts_ms": 1}
    changes, errors = decode_debezium(json.dumps(payload).encode(), TABLES)
    assert errors == []
    assert changes == [Change("Customer", "upsert", "c-1",
                              {"customer_id": "c-1", "name": "Anne"})]


@pytest.mark.parametrize("body", [
    b"", b"default", b"null", b" null\n",
    b'{"schema": null, "payload": null}',
])
def test_tombstones_are_ignored(body):
    decoded = decode_message(body, TABLES)
    assert decoded.ignored and decoded.changes == [] and decoded.errors == []


@pytest.mark.parametrize("payload", [
    {"ts_ms": 1709288130000},                                     # heartbeat
    {"status": "BEGIN", "id": "571:53195829", "ts_ms": 1, "event_count": None,
     "data_collections": None},
    {"status": "END", "id": "571:53195829", "ts_ms": 1, "event_count": 2,
     "data_collections": [{"data_collection": "public.streams", "event_count": 2}]},
    {"before": None, "after": None, "source": source(), "op": "t", "ts_ms": 1},
    {"op": "m", "ts_ms": 1, "source": source(),
     "message": {"prefix": "audit", "content": "aGk="}},
])
def test_heartbeats_transaction_boundaries_and_truncates_are_ignored(payload):
    for body in (payload, {"schema": {"type": "struct"}, "payload": payload}):
        decoded = decode_message(json.dumps(body).encode(), TABLES)
        assert decoded.ignored and decoded.changes == [] and decoded.errors == []


def test_a_table_no_type_maps_to_is_unmapped():
    decoded = decode_message(event("c", after=STREAM_ROW, src=source(table="audit")),
                             TABLES)
    assert decoded.unmapped == ("public", "audit") and decoded.changes == []
    assert decoded.errors == []


@pytest.mark.parametrize("body, why", [
    (b"not json", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"17", "JSON object"),
    (b'{"op": "c"}', "'source'"),
    (b'{"after": {"id": 1}}', "no 'op'"),
    (b'{"op": "x", "source": {}}', "'op' must be"),
    (b'{"op": "c", "source": {"schema": "public"}, "after": {"id": 1}}', "name the event's"),
    (b'{"op": "c", "source": {"schema": "public", "table": "streams"}, "after": null}',
     "'after' must be"),
    (b'{"op": "d", "source": {"schema": "public", "table": "streams"}, "before": null}',
     "REPLICA IDENTITY"),
    (b'{"op": "c", "source": {"schema": "public", "table": "streams"},'
     b' "after": {"title": "no id"}}', "'after.id'"),
    (b'{"op": "c", "source": {"schema": "public", "table": "streams"},'
     b' "after": {"id": 1, "x": NaN}}', "NaN"),
])
def test_malformed_events_say_why(body, why):
    changes, errors = decode_debezium(body, TABLES)
    assert changes == [] and len(errors) == 1 and why in errors[0], errors


def test_the_engines_own_change_messages_are_read_as_such():
    """/api/publish and the node's statistics publish change messages to the
    same exchange: a batch (array) or one change object."""
    batch = b'[{"type": "Stream", "action": "upsert", "obj": {"id": 1}}, {"type": "S"}]'
    decoded = decode_message(batch, TABLES)
    assert decoded.changes == [Change("Stream", "upsert", 1, {"id": 1})]
    assert len(decoded.errors) == 1 and decoded.errors[0].startswith("change 1:")
    one = b'{"type": "User", "action": "delete", "obj": {"uid": 5}}'
    assert decode_message(one, TABLES, {"User": "uid"}).changes == [
        Change("User", "delete", 5, {"uid": 5})]


@pytest.mark.parametrize("semantic, value, expected", [
    ("io.debezium.time.ZonedTimestamp", "2024-03-01T12:15:30.1234567+02:00",
     "2024-03-01T10:15:30.123456Z"),
    ("io.debezium.time.ZonedTimestamp", "2024-03-01T10:15:30Z", "2024-03-01T10:15:30.000000Z"),
    ("io.debezium.time.ZonedTimestamp", "2024-02-29T23:30:00-01:00",
     "2024-03-01T00:30:00.000000Z"),
    ("io.debezium.time.ZonedTimestamp", "infinity", "infinity"),
    ("io.debezium.time.NanoTimestamp", 1709288130123456789, "2024-03-01T10:15:30.123456Z"),
    ("io.debezium.time.MicroTimestamp", -1, "1969-12-31T23:59:59.999999Z"),
    ("io.debezium.time.MicroTimestamp", 2 ** 62, 2 ** 62),       # out of range: kept
    ("org.apache.kafka.connect.data.Timestamp", 0, "1970-01-01T00:00:00.000000Z"),
    ("io.debezium.time.Date", -1, "1969-12-31"),
    ("org.apache.kafka.connect.data.Date", 0, "1970-01-01"),
    ("io.debezium.time.Time", 3_600_000, "01:00:00"),
    ("io.debezium.time.NanoTime", 86_400_000_000_000, "24:00:00"),
    ("io.debezium.data.Json", "[1, {\"a\": null}]", [1, {"a": None}]),
    ("io.debezium.data.Json", "not json", None),
    ("io.debezium.data.Uuid", "2b1c...", "2b1c..."),
])
def test_semantic_types(semantic, value, expected):
    columns = [column("id", "int32", optional=False), column("v", "int64", semantic)]
    body = json.dumps({"schema": envelope_schema(columns),
                       "payload": {"before": None, "after": {"id": 1, "v": value},
                                   "source": source(), "op": "c"}})
    changes, errors = decode_debezium(body.encode(), TABLES)
    assert errors == [] and changes[0].obj == {"id": 1, "v": expected}


def test_decimals():
    columns = [column("id", "int32", optional=False),
               column("a", "bytes", "org.apache.kafka.connect.data.Decimal",
                      parameters={"scale": "0"}),
               column("b", "bytes", "org.apache.kafka.connect.data.Decimal",
                      parameters={"scale": "2"}),
               column("c", "double", "org.apache.kafka.connect.data.Decimal",
                      parameters={"scale": "2"}),
               column("d", "bytes", "org.apache.kafka.connect.data.Decimal",
                      parameters={"scale": "2"})]
    row = {"id": 1, "a": "B1vNFQ==", "b": "AA==", "c": 1.25, "d": "@@not base64"}
    body = json.dumps({"schema": envelope_schema(columns),
                       "payload": {"after": row, "source": source(), "op": "u"}})
    changes, errors = decode_debezium(body.encode(), TABLES)
    assert errors == []
    # decimal.format=NUMERIC sends numbers: kept; what is not base64 is kept too
    assert changes[0].obj == {"id": 1, "a": 123456789, "b": 0, "c": 1.25,
                              "d": "@@not base64"}


def test_table_map_from_the_views_file():
    tables = {"Stream": Table("streams"), "Customer": Table("customers", "inventory")}
    assert table_map(tables, {"Stream": "id", "Customer": "customer_id"}) == TABLES
    with pytest.raises(ValueError, match="both map to the table public.streams"):
        table_map({"A": Table("streams"), "B": Table("streams", "public")}, {})


# The feed in --amqp-format debezium

class Message:
    def __init__(self, body, tag=1, properties=None):
        self.content = type("Content", (), {"body": body, "properties": properties or {}})
        self.delivery_tag = tag
        self.redelivered = False


def debezium_feed(clock=None):
    feed = AmqpFeed(clock or MemoryReactorClock(), "amqp://h/", node_id="n",
                    id_fields={"Stream": "id"}, format="debezium",
                    tables={"Stream": Table("streams")})
    sink = RecordingSink()
    feed._sink = sink
    return feed, sink


def test_the_feed_applies_events_and_counts_what_it_drops():
    logged = []
    globalLogPublisher.addObserver(logged.append)
    try:
        feed, sink = debezium_feed()
        feed.handle_message(Message(event("c", after=STREAM_ROW)))
        for tag in (2, 3):
            feed.handle_message(Message(event("c", after=STREAM_ROW,
                                              src=source(table="audit", lsn=9 + tag)), tag))
        feed.handle_message(Message(b"", 4))
        feed.handle_message(Message(b'{"op": "c"}', 5))
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert sink.changes == [Change("Stream", "upsert", 7, STREAM_OBJECT, xid=771)]
    stats = feed.stats()
    assert (stats["unmapped_events"], stats["ignored_events"], stats["malformed_messages"],
            stats["changes_applied"]) == (2, 1, 1, 1)
    assert feed.health()["format"] == "debezium"
    said = [e for e in logged if "public.audit" in str(e.get("table", "")) or
            e.get("table") == "audit"]
    assert len(said) == 1     # the unmapped table is logged once


def test_the_watermark_drops_events_sent_again_in_commit_order():
    """A restarted Debezium sends events again; transactions arrive in
    commit order, and a later one's changes may have lower LSNs."""
    feed, sink = debezium_feed()

    def upsert(n, lsn, last_commit, txid):
        row = dict(STREAM_ROW, id=n)
        return event("c", after=row, src=source(txid=txid, lsn=lsn, last_commit=last_commit))

    feed.handle_message(Message(upsert(1, 500, 100, 10), 1))
    feed.handle_message(Message(upsert(2, 510, 100, 10), 2))
    # a transaction that began earlier and committed later: lower LSNs
    feed.handle_message(Message(upsert(3, 300, 520, 9), 3))
    # Debezium restarted: the last two events again
    feed.handle_message(Message(upsert(2, 510, 100, 10), 4))
    feed.handle_message(Message(upsert(3, 300, 520, 9), 5))
    feed.handle_message(Message(upsert(4, 700, 600, 11), 6))
    assert [(c.id, c.xid) for c in sink.changes] == [(1, 10), (2, 10), (3, 9), (4, 11)]
    assert feed.stats()["wal_copies_dropped"] == 2


def test_the_lag_comes_from_the_events_time():
    clock = MemoryReactorClock()
    clock.advance(1709288131.2)
    feed, _ = debezium_feed(clock)
    feed.handle_message(Message(event("c", after=STREAM_ROW)))
    assert feed.stats()["feed_lag_seconds"] == pytest.approx(1.0)


def test_the_debezium_format_needs_a_mapping_and_fanout():
    reactor = MemoryReactorClock()
    with pytest.raises(ValueError, match="format must be"):
        AmqpFeed(reactor, "amqp://h/", format="avro")
    with pytest.raises(ValueError, match="mapped to tables"):
        AmqpFeed(reactor, "amqp://h/", format="debezium")
    with pytest.raises(ValueError, match="fanout"):
        AmqpFeed(reactor, "amqp://h/", format="debezium", routing="interest",
                 tables={"Stream": Table("streams")})
    feed = AmqpFeed(reactor, "amqp://h/", node_id="n")
    assert feed.tables is None and feed.stats()["unmapped_events"] == 0
