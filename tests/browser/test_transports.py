"""The example pages on each event transport: WebSocket, Server-Sent Events, long-polling.

Every example page is opened with ``?transport=ws|sse|longpoll``; an insert, an
update and a delete published to the engine show up; the page's requests show
that the forced transport carried the events (no ``session.get_events`` POST
under ws or sse). The engine is killed and started again under an open page on
each transport. Without ``?transport=`` the client chooses WebSocket, and falls
back to SSE and then long-polling when something between page and engine
breaks them (simulated with Playwright's routes).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import ROOT, SCREENSHOTS, console_flushed, settled
from tests.browser.test_examples import card, open_page, shown, stream, wait_ids

pytestmark = [pytest.mark.service, pytest.mark.e2e]

TRANSPORTS = ["ws", "sse", "longpoll"]

# Per page: the address, and the fields that put a stream into its list
# (title: a title the page shows it with; every list is newest first).
PAGES: dict[str, dict] = {
    "/examples/": {"path": "/examples/", "fields": {}},
    "/examples/live.html": {"path": "/examples/live.html", "fields": {}},
    "/examples/recent.html": {"path": "/examples/recent.html", "fields": {"live": False, "duration": 60}},
    "/examples/user.html": {"path": "/examples/user.html?user=777",
                            "fields": {"user_id": 777, "user_name": "vera"}},
    "/examples/search.html": {"path": "/examples/search.html?q=%D0%BA%D0%BE%D1%88%D0%BA%D0%B0",  # кошка
                              "fields": {}, "title": "Кошки номер {id}"},
}


def linked_pages() -> list[str]:
    """The example pages: the index and every page it links to (tools such
    as the segment upload page, marked ``data-tool``, push nothing)."""
    html = (ROOT / "static" / "examples" / "index.html").read_text("utf-8")
    links = re.findall(r'<a href="(/examples/[^"?#]+\.html)"(?! data-tool)', html)
    return ["/examples/", *dict.fromkeys(links)]


class Traffic:
    """What a page sent: JSON-RPC methods over HTTP and over the socket, streams, sockets."""

    def __init__(self, page) -> None:
        self.posts: list[str] = []
        self.streams: list[str] = []
        self.sockets: list[str] = []
        self.socket_sent: list[str] = []
        self.socket_events = 0
        page.on("request", self._request)
        page.on("websocket", self._websocket)

    def _request(self, request) -> None:
        url = request.url
        if "/api/jsonrpc" in url and request.method == "POST":
            try:
                body = json.loads(request.post_data or "null")
            except ValueError:
                body = None
            calls = body if isinstance(body, list) else [body]
            self.posts.extend(c.get("method") for c in calls if isinstance(c, dict))
        elif "/api/events" in url:
            self.streams.append(url)

    def _websocket(self, ws) -> None:
        self.sockets.append(ws.url)

        def sent(payload) -> None:
            try:
                self.socket_sent.append(json.loads(payload).get("method"))
            except (ValueError, AttributeError):
                pass

        def received(payload) -> None:
            if isinstance(payload, str) and payload.startswith('{"jsonrpc":"2.0","method":"events"'):
                self.socket_events += 1

        ws.on("framesent", sent)
        ws.on("framereceived", received)

    def check(self, transport: str) -> None:
        """Only `transport` carried events."""
        if transport == "ws":
            assert any(u.endswith("/api/ws") for u in self.sockets), self.sockets
            assert "session.attach" in self.socket_sent, self.socket_sent
            assert self.socket_events > 0, "no events notification came over the socket"
        else:
            assert not self.sockets, f"a WebSocket under {transport}: {self.sockets}"
        if transport == "sse":
            assert self.streams and all("session=" in u for u in self.streams), self.streams
        else:
            assert not self.streams, f"an event stream under {transport}: {self.streams}"
        if transport == "longpoll":
            assert "session.get_events" in self.posts, self.posts
        else:
            assert "session.get_events" not in self.posts, f"a get_events POST under {transport}"


def transport_of(page) -> str:
    return page.evaluate("() => window.pushengine.events.transport")


def open_on(page, engine, path: str, transport: str | None) -> None:
    if transport:
        path += ("&" if "?" in path else "?") + f"transport={transport}"
    open_page(page, engine, path)
    if transport:
        assert transport_of(page) == transport
        assert page.locator("#status").get_attribute("data-transport") == transport


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("href", linked_pages())
def test_every_page_on_each_transport(engine, page, href, transport):
    traffic = Traffic(page)
    case = PAGES.get(href)
    if case is None:
        # A page this table does not know yet: it loads and connects on the
        # forced transport, without errors.
        open_on(page, engine, href, transport)
        console_flushed(page)
        assert transport_of(page) == transport
        page.watch.check()
        return

    def obj(id_: int, **extra) -> dict:
        fields = {**case["fields"], **extra}
        if "title" in case and "title" not in extra:
            fields["title"] = case["title"].format(id=id_)
        return stream(id_, **fields)

    engine.upsert(obj(1), obj(2))
    open_on(page, engine, case["path"], transport)
    wait_ids(page, [2, 1])
    engine.upsert(obj(3))                                   # insert
    wait_ids(page, [3, 2, 1])
    new_title = "Кошка: новое название" if "title" in case else "A new title"
    engine.upsert(obj(2, title=new_title))                  # update
    page.wait_for_function("(t) => document.querySelector('#list > li[data-id=\"2\"] .pe-title')"
                           "?.textContent === t", arg=new_title)
    engine.delete(1)                                        # delete
    wait_ids(page, [3, 2])
    assert card(page, 2).locator(".pe-title").text_content() == new_title
    assert transport_of(page) == transport
    traffic.check(transport)
    page.watch.check()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_engine_restart_is_survived_on_each_transport(engine, page, transport):
    engine.upsert(stream(1), stream(2))
    traffic = Traffic(page)
    open_on(page, engine, "/examples/live.html", transport)
    wait_ids(page, [2, 1])
    page.evaluate("() => { window.__sameDocument = true; }")
    sid = page.evaluate("() => window.pushengine.session.sid")

    engine.kill()
    page.wait_for_selector('#status[data-state="retrying"]')
    engine.start()  # same port, a new process: the page's session is unknown there (1001)
    wait_ids(page, [], timeout=30)
    page.wait_for_selector('#status[data-state="connected"]', timeout=30000)
    new_sid = page.evaluate("() => window.pushengine.session.sid")
    assert new_sid and new_sid != sid
    engine.upsert(stream(3))
    wait_ids(page, [3])
    engine.upsert(stream(4), stream(3, title="still here"))
    wait_ids(page, [4, 3])
    assert card(page, 3).locator(".pe-title").text_content() == "still here"
    assert page.evaluate("() => window.__sameDocument") is True, "the page was not reloaded"
    assert transport_of(page) == transport, "the forced transport stayed"
    assert page.evaluate("() => window.pushengine.events.given.length") == 0
    traffic.check(transport)
    page.watch.check(allow_network_errors=True)


def test_automatic_choice_is_websocket_and_calls_use_the_socket(engine, page):
    engine.upsert(stream(1))
    traffic = Traffic(page)
    open_page(page, engine, "/examples/live.html")
    wait_ids(page, [1])
    assert transport_of(page) == "ws"
    assert "via WebSocket" in page.locator("#status").text_content()
    engine.upsert(stream(2))
    wait_ids(page, [2, 1])
    traffic.check("ws")
    # Once the socket carries the session, calls go over it, not over HTTP.
    posts = len(traffic.posts)
    n = page.evaluate("() => window.pushengine.api.call('stats.online')")
    assert isinstance(n, int) and n >= 1
    assert len(traffic.posts) == posts, "stats.online was POSTed"
    assert "stats.online" in traffic.socket_sent
    page.watch.check()


def test_a_proxy_that_breaks_websocket_falls_back_to_sse(engine, page):
    # Something between page and engine accepts the upgrade and hangs up at once.
    page.route_web_socket("**/api/ws", lambda ws: ws.close(code=1011, reason="proxy says no"))
    engine.upsert(stream(1))
    traffic = Traffic(page)
    open_page(page, engine, "/examples/live.html")
    wait_ids(page, [1])
    page.wait_for_function("() => window.pushengine.events.transport === 'sse'")
    engine.upsert(stream(2))
    wait_ids(page, [2, 1])
    assert "via Server-Sent Events" in page.locator("#status").text_content()
    assert traffic.streams, "the events came over SSE"
    assert "session.get_events" not in traffic.posts
    assert page.evaluate("() => window.pushengine.events.given.map(([n]) => n)") == ["ws"]
    page.watch.check()


def test_a_proxy_that_breaks_websocket_and_sse_falls_back_to_long_polling(engine, page):
    page.route_web_socket("**/api/ws", lambda ws: ws.close(code=1011, reason="proxy says no"))
    page.route("**/api/events?**", lambda r: r.fulfill(status=502, content_type="text/html",
                                                         body="<h1>502 Bad Gateway</h1>"))
    engine.upsert(stream(1))
    traffic = Traffic(page)
    open_page(page, engine, "/examples/live.html")
    wait_ids(page, [1])
    page.wait_for_function("() => window.pushengine.events.transport === 'longpoll'")
    engine.upsert(stream(2))
    wait_ids(page, [2, 1])
    engine.delete(1)
    wait_ids(page, [2])
    assert "via long-polling" in page.locator("#status").text_content()
    assert "session.get_events" in traffic.posts
    assert page.evaluate("() => window.pushengine.events.given.map(([n]) => n)") == ["ws", "sse"]
    page.watch.check(allow_network_errors=True)


def test_links_keep_the_forced_transport(engine, page):
    engine.upsert(stream(1, user_id=888, user_name="misha"))
    open_on(page, engine, "/examples/live.html", "sse")
    wait_ids(page, [1])
    page.locator('.pe-nav a[href="/examples/recent.html"]').click()
    page.wait_for_url("**/recent.html?transport=sse")
    page.wait_for_selector('#status[data-state="connected"]')
    assert transport_of(page) == "sse"
    page.goto(engine.base + "/examples/user.html?user=777&transport=longpoll")
    page.wait_for_selector("#people .pe-chip a")
    page.locator("#people .pe-chip a").first.click()
    page.wait_for_url("**/user.html?user=888&transport=longpoll")
    page.wait_for_selector('#status[data-state="connected"]')
    assert transport_of(page) == "longpoll"
    page.watch.check()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_screenshot_per_transport(demo_engine, page, transport):
    """The live page under --demo on each transport; a screenshot for a human."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    traffic = Traffic(page)
    open_on(page, demo_engine, "/examples/live.html", transport)
    page.wait_for_selector("#list > li", timeout=30000)
    # The demo changes the list by itself: wait for a change that came as an event.
    page.wait_for_function("() => window.pushengine.events.lastSeq >= 3", timeout=30000)
    page.wait_for_function("() => document.querySelectorAll('#list > li').length > 0")
    settled(page)
    path: Path = SCREENSHOTS / f"live-{transport}.png"
    page.screenshot(path=str(path), animations="disabled")
    assert path.stat().st_size > 10000
    # the demo ends streams too: a list of one may be empty for a moment
    page.wait_for_function("() => document.querySelectorAll('#list > li').length > 0",
                           timeout=30000)
    assert len(shown(page)) > 0
    traffic.check(transport)
    page.watch.check()
