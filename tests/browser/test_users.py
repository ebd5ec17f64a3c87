"""User names and avatars on the example pages, through the user cache
(static/js/usercache.js, user.public_profiles): a renamed user is shown
renamed once the cache's entry expires (SPEC section 11)."""
from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.browser.conftest import SCREENSHOTS, resized, settled
from tests.browser.test_examples import card, open_page, stream, wait_ids

pytestmark = [pytest.mark.service, pytest.mark.e2e]
TTL = 1.5  # seconds, the pages' ?user_ttl=


def svg_avatar(initials: str, colour: str) -> str:
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='64' height='64'>"
           f"<circle cx='32' cy='32' r='32' fill='{colour}'/><text x='32' y='41' "
           f"font-family='sans-serif' font-size='24' fill='white' text-anchor='middle'>"
           f"{initials}</text></svg>")
    return "data:image/svg+xml," + quote(svg, safe="")


def user(id_: int, name: str, avatar: str | None = None, **private) -> dict:
    return {"type": "User", "action": "upsert",
            "obj": {"id": id_, "name": name, "avatar": avatar, **private}}


def cache_stats(page) -> dict:
    """What the page's user cache did: loader calls (user.public_profiles,
    over whichever transport the page uses), users loaded, most loads at once."""
    return page.evaluate("""() => {
        const u = window.pushengine.users;
        return { requests: u.requests, loads: u.loads, peak: u.manager.peak, limit: u.manager.limit };
    }""")


def name_of(page, id_: int) -> str:
    return card(page, id_).locator(".pe-user-name").text_content()


def wait_name(page, id_: int, name: str, timeout: float) -> float:
    """Wait until card ``id_`` names its user ``name``; the seconds it took."""
    start = time.monotonic()
    page.wait_for_function(
        "([id, name]) => document.querySelector(`#list > li[data-id=\"${id}\"] .pe-user-name`)"
        "?.textContent === name", arg=[id_, name], timeout=timeout * 1000)
    return time.monotonic() - start


def test_names_and_avatars_come_from_the_profiles_and_follow_a_rename(engine, page):
    engine.publish(user(340699, "Anna Petrova", svg_avatar("AP", "#7b3fa0"), email="anna@example.com"),
                   user(340700, "Boris Ivanov"),
                   *({"type": "User", "action": "upsert", "obj": {"id": 500 + i, "name": f"Viewer {i}"}}
                     for i in range(20)))
    engine.upsert(stream(1, user_id=340699, user_name="anna"), stream(2, user_id=340700, user_name="boris"),
                  stream(3, user_id=999, user_name="nobody-profile"),
                  *(stream(10 + i, user_id=500 + i, user_name=f"v{i}") for i in range(20)))
    open_page(page, engine, f"/examples/live.html?limit=50&user_ttl={TTL}")
    wait_ids(page, shown_order())
    wait_name(page, 1, "Anna Petrova", 10)
    wait_name(page, 2, "Boris Ivanov", 10)
    # no profile for user 999: the stream's own user_name
    assert name_of(page, 3) == "nobody-profile"
    assert card(page, 1).locator(".pe-user").text_content() == "Anna Petrova"
    # Anna's avatar is her image; Boris has none: his initial on a colour
    page.wait_for_function(
        "() => document.querySelector('#list > li[data-id=\"1\"] .pe-avatar img')?.naturalWidth > 0")
    assert card(page, 2).locator(".pe-avatar img").count() == 0
    assert card(page, 2).locator(".pe-avatar").get_attribute("data-initial") == "B"
    # only the public fields reached the page
    profile = page.evaluate("() => window.pushengine.users.peek(340699)")
    assert set(profile) == {"id", "name", "avatar"}
    # 23 users in a batch or two, never more than the cache's 2 loads in flight
    stats = cache_stats(page)
    assert stats["requests"] <= 3 and stats["loads"] >= 23, stats
    assert stats["limit"] == 2 and 1 <= stats["peak"] <= 2, stats

    before = cache_stats(page)
    renamed_at = time.monotonic()
    engine.publish(user(340699, "Anna Smirnova", svg_avatar("AS", "#1f7a4d")))
    took = wait_name(page, 1, "Anna Smirnova", 4 * TTL + 5)
    assert took <= TTL + TTL / 2 + 3, took  # the entry expires, the next refresh reloads it
    after = cache_stats(page)
    assert after["requests"] > before["requests"], "the new name came from a profile load"
    assert after["peak"] <= 2, after
    assert name_of(page, 2) == "Boris Ivanov"
    page.wait_for_function(
        "() => decodeURIComponent(document.querySelector('#list > li[data-id=\"1\"] .pe-avatar img')"
        "?.getAttribute('src') ?? '').includes('AS')")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    resized(page, 1280, 700)
    card(page, 1).scroll_into_view_if_needed()
    settled(page)
    page.screenshot(path=str(SCREENSHOTS / "users-renamed.png"), animations="disabled")
    assert time.monotonic() - renamed_at < 30
    page.watch.check()


def shown_order() -> list[int]:
    """The live list of the test above: newest first (a higher id is newer)."""
    return list(range(29, 9, -1)) + [3, 2, 1]


def test_the_user_page_names_the_user_and_the_chips_by_profile(engine, page):
    engine.publish(user(777, "Vera Popova", svg_avatar("VP", "#a0522d")), user(888, "Misha Orlov"))
    engine.upsert(stream(1, user_id=777, user_name="vera"), stream(2, user_id=888, user_name="misha"))
    open_page(page, engine, f"/examples/user.html?user=777&user_ttl={TTL}")
    wait_ids(page, [1])
    page.wait_for_function("() => document.getElementById('heading').textContent === 'Streams of Vera Popova'")
    page.wait_for_function("() => document.querySelector('#people .pe-chip a')?.textContent === 'Misha Orlov'")
    engine.publish(user(888, "Misha Sokolov"), user(777, "Vera Kozlova"))
    page.wait_for_function("() => document.querySelector('#people .pe-chip a')?.textContent === 'Misha Sokolov'",
                           timeout=(4 * TTL + 5) * 1000)
    page.wait_for_function("() => document.getElementById('heading').textContent === 'Streams of Vera Kozlova'",
                           timeout=(4 * TTL + 5) * 1000)
    assert name_of(page, 1) == "Vera Kozlova"
    page.watch.check()


def test_without_profiles_the_pages_use_the_streams_names(engine, page):
    """A user the engine has no profile of: the stream's user_name, as before."""
    engine.upsert(stream(1, user_id=4242, user_name="solo"))
    open_page(page, engine, "/examples/live.html")
    wait_ids(page, [1])
    page.wait_for_function("() => window.pushengine.users.peek(4242) === null")
    assert name_of(page, 1) == "solo"
    assert card(page, 1).locator(".pe-avatar").get_attribute("data-initial") == "S"
    page.watch.check()
