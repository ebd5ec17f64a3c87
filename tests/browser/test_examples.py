"""The example pages follow the engine: inserts, updates, deletes, limits, restarts."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.browser.conftest import SCREENSHOTS, console_flushed, resized, settled

pytestmark = [pytest.mark.service, pytest.mark.e2e]

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
IDS_JS = "() => [...document.querySelectorAll('#list > li')].map((e) => e.dataset.id)"


def iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def stream(id_: int, *, age: int | None = None, user_id: int = 340699, user_name: str = "anna",
           live: bool = True, public: bool = True, title: str | None = None, viewers: int = 3,
           duration: int = 0, **fields) -> dict:
    """A Stream; `age` minutes ago it started (default: a higher id is newer)."""
    created = NOW - dt.timedelta(minutes=age if age is not None else 100 - id_)
    obj = {"id": id_, "title": title or f"Stream number {id_}", "user_id": user_id,
           "user_name": user_name, "live": live, "public": public, "created_at": iso(created),
           "ended_at": None if live else iso(created + dt.timedelta(seconds=duration)),
           "duration": duration, "viewers": viewers, "thumbnail": None, "lat": 55.75, "lon": 37.61}
    obj.update(fields)
    return obj


def shown(page) -> list[int]:
    return [int(i) for i in page.evaluate(IDS_JS)]


def wait_ids(page, expected: list[int], timeout: float = 15.0) -> None:
    """Wait until the page's list shows exactly these ids, in this order."""
    want = [str(i) for i in expected]
    try:
        page.wait_for_function(f"(want) => JSON.stringify(({IDS_JS})()) === JSON.stringify(want)",
                               arg=want, timeout=timeout * 1000)
    except Exception:
        assert shown(page) == expected, "the page does not show the expected list"
        raise


def card(page, id_: int):
    return page.locator(f'#list > li[data-id="{id_}"]')


def watch_size(page) -> None:
    """Record the largest number of cards the list ever had."""
    page.evaluate("""() => {
        const list = document.getElementById('list');
        window.__maxCards = list.children.length;
        new MutationObserver(() => {
            window.__maxCards = Math.max(window.__maxCards, list.children.length);
        }).observe(list, { childList: true });
    }""")


def open_page(page, engine, path: str) -> None:
    page.goto(engine.base + path)
    page.wait_for_selector('#status[data-state="connected"]')


def test_live_page_follows_inserts_updates_and_deletes(engine, page):
    engine.upsert(stream(1), stream(2), stream(3),
                  stream(90, public=False), stream(91, live=False, duration=60))
    open_page(page, engine, "/examples/live.html?limit=5")
    wait_ids(page, [3, 2, 1])
    watch_size(page)
    page.evaluate("() => { document.querySelector('#list > li[data-id=\"2\"]').__mark = 'kept'; }")

    engine.upsert(stream(5))
    wait_ids(page, [5, 3, 2, 1])
    engine.upsert(stream(4))
    wait_ids(page, [5, 4, 3, 2, 1])
    engine.upsert(stream(6))
    wait_ids(page, [6, 5, 4, 3, 2])  # the limit: 1 left

    engine.upsert(stream(4, title="Кошки играют / cats playing", viewers=1234))
    title = card(page, 4).locator(".pe-title")
    page.wait_for_function("(el) => el.textContent === 'Кошки играют / cats playing'", arg=title.element_handle())
    assert card(page, 4).locator(".pe-viewers").text_content() == "1.2K watching"
    assert shown(page) == [6, 5, 4, 3, 2]

    engine.upsert(stream(5, live=False, duration=600))  # ended: leaves the live list, 1 comes back
    wait_ids(page, [6, 4, 3, 2, 1])
    engine.delete(3)
    wait_ids(page, [6, 4, 2, 1])
    engine.upsert(stream(1, age=0))  # now the newest: moves to the top
    wait_ids(page, [1, 6, 4, 2])

    assert page.evaluate("() => document.querySelector('#list > li[data-id=\"2\"]').__mark") == "kept", \
        "the node of an unchanged stream was kept"
    assert page.evaluate("() => window.__maxCards") <= 5
    assert card(page, 6).locator(".pe-live-badge").is_visible()
    assert card(page, 6).locator(".pe-user").text_content() == "anna"
    assert card(page, 6).locator(".pe-user").get_attribute("href") == "/examples/user.html?user=340699"
    assert "started" in card(page, 6).locator(".pe-ago").text_content()
    page.watch.check()


def test_the_limit_holds_under_a_burst(engine, page):
    open_page(page, engine, "/examples/live.html?limit=3")
    page.wait_for_function("() => document.getElementById('list').dataset.empty.startsWith('Nobody')")
    watch_size(page)
    engine.upsert(*[stream(i) for i in range(1, 31)])
    wait_ids(page, [30, 29, 28])
    for i in range(31, 41):
        engine.upsert(stream(i))
    wait_ids(page, [40, 39, 38])
    assert page.evaluate("() => window.__maxCards") <= 3
    # The limit selector swaps the view for one with the new limit.
    page.select_option("#limit", "5")
    wait_ids(page, [40, 39, 38, 37, 36])
    assert "limit=5" in page.url
    page.watch.check()


def test_recent_page_shows_ended_streams(engine, page):
    engine.upsert(stream(1, live=False, duration=3725), stream(2, live=False, duration=42),
                  stream(3, live=True))
    open_page(page, engine, "/examples/recent.html?limit=2")
    wait_ids(page, [2, 1])
    assert card(page, 1).locator(".pe-time").text_content() == "1:02:05"
    assert card(page, 2).locator(".pe-time").text_content() == "0:00:42"
    assert card(page, 1).locator(".pe-ago").text_content().startswith("ended ")
    assert not card(page, 1).locator(".pe-live-badge").is_visible()
    engine.upsert(stream(3, live=False, duration=120))  # the live one ends
    wait_ids(page, [3, 2])
    page.watch.check()


def test_user_page(engine, page):
    engine.upsert(stream(1, user_id=777, user_name="vera", live=False, duration=100),
                  stream(2, user_id=777, user_name="vera"),
                  stream(3, user_id=888, user_name="misha"))
    open_page(page, engine, "/examples/user.html?user=777")
    wait_ids(page, [2, 1])
    page.wait_for_function("() => document.getElementById('heading').textContent === 'Streams of vera'")
    assert "2 public streams, 1 live now." in page.locator("#subheading").text_content()
    chips = page.locator("#people .pe-chip")
    page.wait_for_function("() => document.querySelectorAll('#people .pe-chip').length === 1")
    assert chips.first.text_content().endswith("misha"), "people streaming now, without vera herself"
    engine.upsert(stream(4, user_id=777, user_name="vera"), stream(5, user_id=888, user_name="misha"))
    wait_ids(page, [4, 2, 1])
    # Choosing someone else from the chips.
    chips.first.locator("a").click()
    page.wait_for_url("**/user.html?user=888")
    page.wait_for_selector('#status[data-state="connected"]')
    wait_ids(page, [5, 3])
    page.watch.check()


def test_search_page_finds_inflected_forms(engine, page):
    engine.upsert(stream(1, title="Кошки играют / cats playing"), stream(2, title="Собака на прогулке"),
                  stream(3, title="Кошка спит", live=False, duration=30))
    open_page(page, engine, "/examples/search.html")
    page.fill("#q", "кошка")
    wait_ids(page, [3, 1])
    assert "q=%D0%BA%D0%BE%D1%88%D0%BA%D0%B0" in page.url
    engine.upsert(stream(4, title="Мои кошки"), stream(5, title="Просто стрим"))
    wait_ids(page, [4, 3, 1])
    page.fill("#q", "cat")
    wait_ids(page, [1])
    page.fill("#q", "собаки")
    wait_ids(page, [2])
    page.fill("#q", "")
    wait_ids(page, [])
    page.watch.check()


def test_index_links_to_every_example(engine, page):
    engine.upsert(stream(1))
    open_page(page, engine, "/examples/")
    wait_ids(page, [1])
    page.wait_for_function("() => /online/.test(document.getElementById('online').textContent)")
    links = page.eval_on_selector_all(".pe-examples a:not([data-tool])",
                                      "els => els.map((a) => a.getAttribute('href'))")
    assert links == ["/examples/live.html", "/examples/recent.html", "/examples/user.html",
                     "/examples/search.html", "/examples/similar.html",
                     "/examples/notifications.html"]
    tools = page.eval_on_selector_all(".pe-tools a", "els => els.map((a) => a.getAttribute('href'))")
    assert tools == ["/examples/segments.html"]
    for href in links:
        page.goto(engine.base + href)
        page.wait_for_selector('#status[data-state="connected"]')
        assert page.locator(f'.pe-nav a[href="{href}"]').get_attribute("aria-current") == "page"
    page.watch.check()


def test_an_engine_restart_is_survived_without_reload(engine, page):
    engine.upsert(stream(1), stream(2))
    open_page(page, engine, "/examples/live.html")
    wait_ids(page, [2, 1])
    page.evaluate("() => { window.__sameDocument = true; }")
    sid = page.evaluate("() => window.pushengine.session.sid")

    engine.kill()
    page.wait_for_selector('#status[data-state="retrying"]')
    engine.start()  # same port, a new process: the page's session is unknown there (1001)
    # The new engine's store is empty: the view's new state replaces the old one.
    wait_ids(page, [], timeout=30)
    page.wait_for_selector('#status[data-state="connected"]')
    new_sid = page.evaluate("() => window.pushengine.session.sid")
    assert new_sid and new_sid != sid
    engine.upsert(stream(3))
    wait_ids(page, [3])
    engine.upsert(stream(4), stream(3, title="still here"))
    wait_ids(page, [4, 3])
    assert card(page, 3).locator(".pe-title").text_content() == "still here"
    assert page.evaluate("() => window.__sameDocument") is True, "the page was not reloaded"
    page.watch.check(allow_network_errors=True)


def test_debug_output_is_off_by_default(engine, page):
    # the client logs as it creates its session, subscribes and connects: all
    # before the page says "connected"
    open_page(page, engine, "/examples/live.html")
    console_flushed(page)
    assert not [m for m in page.watch.debug if "[pushengine:" in m]
    open_page(page, engine, "/examples/live.html?debug=1")
    console_flushed(page)
    assert [m for m in page.watch.debug if "[pushengine:" in m]
    page.watch.check()


def test_client_modules_load_in_the_browser(engine, page):
    """The node unit tests' modules also run in Chromium: a quick Deferred round trip."""
    open_page(page, engine, "/examples/live.html")
    result = page.evaluate("""async () => {
        const { Deferred, DeferredManager, ViewList, formatDuration } = await import('/static/js/pushengine.js');
        const d = new Deferred();
        d.addCallback((x) => x + 1).addCallback((x) => new Promise((r) => setTimeout(() => r(x * 2), 5)));
        d.callback(20);
        const value = await d;
        const m = new DeferredManager(2);
        const list = new ViewList({ order: '-n', limit: 2 });
        list.setState([{ id: 1, n: 1 }]);
        list.apply({ action: 'insert', obj: { id: 2, n: 5 } });
        return [value, m.limit, list.items.map((o) => o.id), formatDuration(3725)];
    }""")
    assert result == [42, 2, [2, 1], "1:02:05"]
    page.watch.check()


PAGES = [
    ("index", "/examples/"),
    ("live", "/examples/live.html"),
    ("recent", "/examples/recent.html"),
    ("user", "/examples/user.html"),
    ("search", "/examples/search.html?q=%D0%BA%D0%BE%D1%88%D0%BA%D0%B0"),  # кошка: finds кошки
]


@pytest.mark.parametrize("name,path", PAGES)
def test_screenshots_under_demo(demo_engine, page, name, path):
    """Each page under --demo: it fills itself and keeps changing; a screenshot for a human."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    open_page(page, demo_engine, path)
    if name == "user":
        # Pick the first person streaming now.
        page.wait_for_selector("#people .pe-chip a")
        page.locator("#people .pe-chip a").first.click()
        page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_selector("#list > li", timeout=30000)
    before = json.dumps(page.evaluate(IDS_JS) + [page.locator("#list").inner_text()])
    # The demo starts empty and fills quickly: cards keep entering. Finished
    # animations show the page as it looks between changes.
    settled(page)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), animations="disabled")
    if name == "live":
        resized(page, 390, 844)
        page.screenshot(path=str(SCREENSHOTS / "live-mobile.png"), animations="disabled")
    if name in ("live", "index"):
        # The demo changes the list by itself.
        page.wait_for_function(
            f"(before) => JSON.stringify(({IDS_JS})().concat([document.getElementById('list').innerText])) !== before",
            arg=before, timeout=20000)
    page.watch.check()
