"""WalFeed: a node following its database's WAL without a broker."""
import pytest
import pytest_twisted
from twisted.internet import reactor

from pushengine.core.changes import Change
from pushengine.core.interfaces import ChangeFeed, FeedUnavailable
from pushengine.postgres.wal import Transaction
from pushengine.postgres.walfeed import WalFeed, slot_name
from tests.deferreds import eventually, failed, fired
from tests.postgres.conftest import execute
from tests.postgres.wal_support import FAST, STREAMS, catalog, drop_slots, sql_value, transaction


class RecordingSink:
    def __init__(self):
        self.batches = []
        self.gaps = 0

    def apply_changes(self, changes):
        self.batches.append(list(changes))

    def feed_gap(self):
        self.gaps += 1

    @property
    def ids(self):
        return [c.id for b in self.batches for c in b]


@pytest.fixture
def feeds(pg_url):
    made = []

    def make(node_id="node-a", **options):
        feed = WalFeed(reactor, pg_url, catalog(Stream="streams"), node_id,
                       **{**FAST, **options})
        made.append(feed)
        return feed

    yield make
    for feed in made:
        pytest_twisted.blockon(feed.stop())
    drop_slots(pg_url)


def slots(url):
    return sql_value(url, "SELECT string_agg(slot_name || ':' || temporary::text, ',') "
                          "FROM pg_replication_slots")


def test_slot_names():
    assert slot_name("node_1") == "pushengine_node_node_1"
    assert slot_name("Node-A.example") == "pushengine_node_node_a_example_" + \
        __import__("hashlib").sha1(b"Node-A.example").hexdigest()[:8]
    assert slot_name("node-a") != slot_name("node_a")
    long = slot_name("n" * 200)
    assert len(long) == 63 and long.startswith("pushengine_node_nnn")


def test_a_transaction_seen_again_is_dropped_and_confirmed():
    feed = WalFeed(reactor, "postgresql://nowhere/db", catalog(Stream="streams"), "n1")
    confirmed = []
    feed.reader.confirm = confirmed.append
    sink = RecordingSink()
    feed.sink = sink
    change = Change("Stream", "upsert", 1, {"id": 1}, xid=900)
    first = Transaction(900, 100, 148, [change])
    feed._deliver(first)
    feed._deliver(first)                              # sent again after a reconnection
    feed._deliver(Transaction(901, 200, 248, []))     # nothing for the engine
    assert sink.batches == [[change]] and confirmed == [148, 148, 248]
    assert feed.stats()["wal_copies_dropped"] == 1
    assert set(feed.counter_names) <= set(feed.stats())


def test_publish_applies_to_this_node_only_and_needs_a_started_feed():
    feed = WalFeed(reactor, "postgresql://nowhere/db", catalog(Stream="streams"), "n1")
    assert isinstance(feed, ChangeFeed)
    failed(feed.publish([Change("Stream", "upsert", 1, {"id": 1})]), FeedUnavailable)
    sink = RecordingSink()
    feed.sink = sink
    assert fired(feed.publish([Change("Stream", "upsert", 1, {"id": 1})])) == 1
    assert sink.ids == [1] and feed.stats()["changes_published"] == 1
    assert feed.health()["up"] is False and feed.health()["kind"] == "postgresql"


@pytest_twisted.ensureDeferred
async def test_end_to_end_with_a_restart(feeds, pg_url):
    execute(pg_url, *STREAMS)
    sink = RecordingSink()
    feed = feeds("node-a")
    service = feed.as_service(sink)
    service.startService()
    await eventually(lambda: feed.health()["up"], what="the feed up")
    # a new temporary slot: the views read before it existed are read again
    await eventually(lambda: sink.gaps == 1, what="the views re-read at start")
    assert slots(pg_url) == f"{feed.slot}:true"
    transaction(pg_url, "INSERT INTO streams (id, title) VALUES (1, 'a')",
                "INSERT INTO streams (id, title) VALUES (2, 'b')")
    transaction(pg_url, "UPDATE streams SET title = 'c' WHERE id = 1")
    await eventually(lambda: len(sink.ids) == 3, what="the changes")
    assert sink.ids == [1, 2, 1] and len(sink.batches) == 2     # a batch per transaction
    assert sink.batches[1][0].obj == {"id": 1, "title": "c", "user_id": None, "tags": None}
    end = feed.reader.received_lsn
    await eventually(lambda: feed.reader.sent_lsn >= end, what="the confirmation")

    await service.stopService()
    assert not feed.health()["up"]
    await eventually(lambda: slots(pg_url) is None, what="the temporary slot gone")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (3)")   # missed while stopped
    service.startService()
    await eventually(lambda: feed.health()["up"], what="the feed up again")
    await eventually(lambda: sink.gaps == 2, what="the views re-read")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (4)")
    await eventually(lambda: sink.ids[-1:] == [4], what="the change after the restart")
    assert sink.ids == [1, 2, 1, 4]


@pytest_twisted.ensureDeferred
async def test_a_lost_connection_makes_a_new_slot_and_a_gap(feeds, pg_url):
    execute(pg_url, *STREAMS)
    sink = RecordingSink()
    feed = feeds("node-b")
    feed.start(sink)
    await eventually(lambda: feed.health()["up"], what="the feed up")
    await eventually(lambda: sink.gaps == 1, what="the gap at start")
    sql_value(pg_url, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots")
    await eventually(lambda: sink.gaps == 2, what="the gap")
    assert feed.health()["up"]
    transaction(pg_url, "INSERT INTO streams (id) VALUES (5)")
    await eventually(lambda: sink.ids == [5], what="the change after reconnecting")


@pytest_twisted.ensureDeferred
async def test_truncate_re_reads_the_views(feeds, pg_url):
    execute(pg_url, *STREAMS)
    sink = RecordingSink()
    feed = feeds("node-c")
    feed.start(sink)
    await eventually(lambda: feed.health()["up"], what="the feed up")
    transaction(pg_url, "INSERT INTO streams (id) VALUES (1)")
    await eventually(lambda: sink.gaps == 1, what="the gap at start")
    transaction(pg_url, "TRUNCATE streams")
    await eventually(lambda: sink.gaps == 2, what="the gap")
    assert sink.ids == [1]


@pytest_twisted.ensureDeferred
async def test_two_nodes_with_one_id_do_not_share_a_slot(feeds, pg_url):
    execute(pg_url, *STREAMS)
    first, second = feeds("twin"), feeds("twin")
    first.start(RecordingSink())
    await eventually(lambda: first.health()["up"], what="the first node up")
    second.start(RecordingSink())
    await eventually(lambda: second.health()["waiting"], what="the second node waiting")
    assert "another node with this id" in second.health()["error"]
