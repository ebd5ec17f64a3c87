"""The HTTP object store, against a stub backend (treq's StubTreq: no
real HTTP)."""
from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from pushengine.core.interfaces import ObjectStore
from pushengine.memcache import InMemoryCache
from pushengine.stores.http import HttpStore, StoreError, encode_query


class View:
    def __init__(self, name: str) -> None:
        self.name = name


LIVE = View("PublicLiveStreamView")


class Backend(Resource):
    """Answers every GET with ``self.body`` (or holds it until release)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[bytes] = []
        self.held: list = []
        self.hold = False
        self.code = 200
        self.body = json.dumps([{"id": 1}, {"id": 2}]).encode()

    def render_GET(self, request):
        self.requests.append(request.uri)
        request.setResponseCode(self.code)
        if self.hold:
            self.held.append(request)
            return NOT_DONE_YET
        return self.body

    def release(self) -> None:
        held, self.held = self.held, []
        for request in held:
            request.write(self.body)
            request.finish()


class HttpStoreTests(SynchronousTestCase):
    url = "http://backend.example/objects"

    def setUp(self):
        self.clock = Clock()
        self.backend = Backend()
        self.treq = StubTreq(self.backend)

    def store(self, **kwargs) -> HttpStore:
        return HttpStore(self.treq, self.url, clock=self.clock, **kwargs)

    def query(self, store, params=None, limit=10, view=LIVE):
        d = store.query(view, params or {}, limit)
        self.treq.flush()
        return d

    def test_is_an_object_store(self):
        self.assertIsInstance(self.store(), ObjectStore)
        self.assertIsNone(self.store().apply_changes([]))

    def test_the_request(self):
        params = {"word": "кот", "user_id": 340699, "live": True, "near": None, "tags": ["a", "b"], "limit": 99}
        result = self.successResultOf(self.query(self.store(), params, limit=10))
        self.assertEqual(result, [{"id": 1}, {"id": 2}])
        url = urlsplit(self.backend.requests[0].decode())
        self.assertEqual(url.path, "/objects")
        self.assertEqual(
            parse_qsl(url.query),
            [("view", "PublicLiveStreamView"), ("limit", "10"), ("live", "true"), ("near", "null"),
             ("tags", "a"), ("tags", "b"), ("user_id", "340699"), ("word", "кот")],
        )

    def test_query_string_rules(self):
        self.assertEqual(encode_query("V", {"b": 1.5, "a": [], "c": False}, 3), "view=V&limit=3&b=1.5&c=false")
        with self.assertRaises(ValueError):
            encode_query("V", {"a": {"nested": 1}}, 3)
        self.failureResultOf(self.store().query(LIVE, {"a": {"x": 1}}, 3), StoreError)

    def test_a_url_with_a_query_gets_more_parameters(self):
        store = HttpStore(self.treq, self.url + "?key=s", clock=self.clock)
        self.successResultOf(self.query(store))
        self.assertTrue(self.backend.requests[0].decode().startswith("/objects?key=s&view="))

    def test_concurrent_first_queries_share_one_request(self):
        self.backend.hold = True
        store = self.store()
        first, second = store.query(LIVE, {"a": 1}, 10), store.query(LIVE, {"a": 1}, 10)
        other = store.query(LIVE, {"a": 2}, 10)
        self.treq.flush()
        self.assertEqual(len(self.backend.requests), 2)
        self.backend.release()
        self.treq.flush()
        one, two = self.successResultOf(first), self.successResultOf(second)
        self.assertEqual(one, two)
        self.assertIsNot(one, two)  # each caller may change its own list
        self.successResultOf(other)
        self.backend.hold = False
        self.successResultOf(self.query(store, {"a": 1}))  # done: a new request
        self.assertEqual(len(self.backend.requests), 3)

    def test_backend_errors_are_clear(self):
        store = self.store()
        for code, body, words in [
            (500, b"[]", "HTTP 500"),
            (200, b"{\"id\": 1}", "not a list"),
            (200, b"<html>", "invalid JSON"),
            (200, b"[1, 2]", "not objects"),
        ]:
            self.backend.code, self.backend.body = code, body
            failure = self.failureResultOf(self.query(store), StoreError)
            self.assertIn(words, str(failure.value))
        self.flushLoggedErrors()

    def test_a_backend_that_never_answers_times_out(self):
        self.backend.hold = True
        store = self.store(timeout=5)
        d = self.query(store)
        self.clock.advance(4.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.assertIn("failed", str(self.failureResultOf(d, StoreError).value))


class CachedHttpStoreTests(SynchronousTestCase):
    url = "http://backend.example/objects"

    def setUp(self):
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.cache = InMemoryCache(self.clock)  # shared by the "nodes", like memcached
        self.backend = Backend()

    def node(self, **kwargs):
        treq = StubTreq(self.backend)
        kwargs.setdefault("ttl", 30)
        return treq, HttpStore(treq, self.url, cache=self.cache, clock=self.clock, **kwargs)

    def test_a_cold_start_of_many_nodes_makes_one_request(self):
        self.backend.hold = True
        nodes = [self.node() for _ in range(5)]
        answers = [store.query(LIVE, {"user_id": 7}, 10) for _, store in nodes]
        for treq, _ in nodes:
            treq.flush()
        self.assertEqual(len(self.backend.requests), 1)
        self.backend.release()
        for treq, _ in nodes:
            treq.flush()
        self.clock.advance(0.1)  # the waiting nodes poll the cache
        for d in answers:
            self.assertEqual(self.successResultOf(d), [{"id": 1}, {"id": 2}])
        self.assertEqual(len(self.backend.requests), 1)

    def test_cached_for_ttl_then_fetched_again(self):
        (treq, store), (treq2, store2) = self.node(ttl=30), self.node(ttl=30)
        d = store.query(LIVE, {}, 10)
        treq.flush()
        self.successResultOf(d)
        d = store2.query(LIVE, {}, 10)  # another node: from the cache
        self.assertEqual(self.successResultOf(d), [{"id": 1}, {"id": 2}])
        self.assertEqual(len(self.backend.requests), 1)
        self.clock.advance(30)
        self.backend.body = b'[{"id": 3}]'
        d = store2.query(LIVE, {}, 10)
        treq2.flush()
        self.assertEqual(self.successResultOf(d), [{"id": 3}])
        self.assertEqual(len(self.backend.requests), 2)

    def test_invalidate_a_view(self):
        treq, store = self.node()
        d = store.query(LIVE, {}, 10)
        treq.flush()
        self.successResultOf(d)
        self.successResultOf(store.invalidate(LIVE.name))
        self.backend.body = b"[]"
        d = store.query(LIVE, {}, 10)
        treq.flush()
        self.assertEqual(self.successResultOf(d), [])

    def test_a_bad_answer_is_never_cached(self):
        treq, store = self.node()
        self.backend.code = 500
        d = store.query(LIVE, {}, 10)
        treq.flush()
        self.failureResultOf(d, StoreError)
        self.backend.code = 200
        d = store.query(LIVE, {}, 10)
        treq.flush()
        self.assertEqual(self.successResultOf(d), [{"id": 1}, {"id": 2}])
        self.flushLoggedErrors()
