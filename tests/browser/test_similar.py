"""The "similar streams" example page follows the engine: streams enter, move,
change their similarity and leave as titles change (SPEC section 13)."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.browser.conftest import SCREENSHOTS, resized, settled
from tests.browser.test_examples import card, open_page, stream, wait_ids

pytestmark = [pytest.mark.service, pytest.mark.e2e]


def badge(page, id_: int) -> str:
    return card(page, id_).locator(".pe-similarity").text_content()


def marked(page, id_: int) -> list[str]:
    return card(page, id_).locator(".pe-title mark").all_text_contents()


def test_similar_page_follows_changes(engine, page):
    engine.upsert(stream(1, title="Cats playing the piano"),
                  stream(2, title="cats playing piano live"),
                  stream(3, title="Dogs at the beach"),
                  stream(4, title="Cats playing the piano", live=False, duration=60),
                  stream(5, title="the piano cats playing", public=False))
    open_page(page, engine, "/examples/similar.html?q=" + quote("Cats playing the piano"))
    wait_ids(page, [1, 2])                       # 100%, then 3 of 5 words: 60%
    assert badge(page, 1) == "100% alike" and badge(page, 2) == "60% alike"
    assert marked(page, 2) == ["cats", "playing", "piano"]
    assert card(page, 2).locator(".pe-title").text_content() == "cats playing piano live"

    engine.upsert(stream(6, title="Playing the piano, cats!"))
    wait_ids(page, [6, 1, 2])                    # a tie: the higher id first
    engine.upsert(stream(2, title="cats playing the piano live"))
    page.wait_for_function("() => document.querySelector('#list > li[data-id=\"2\"] "
                           ".pe-similarity').textContent === '80% alike'")
    engine.upsert(stream(1, title="Birds in the garden"))   # 1 of 7 words: leaves
    wait_ids(page, [6, 2])
    engine.upsert(stream(2, title="cats playing the piano live", live=False))
    wait_ids(page, [6])
    engine.delete(6)
    wait_ids(page, [])
    page.wait_for_function("() => document.getElementById('list').dataset.empty.includes('like')")

    page.fill("#q", "dogs at the beach")
    wait_ids(page, [3])
    assert "q=dogs+at+the+beach" in page.url or "q=dogs%20at%20the%20beach" in page.url
    engine.upsert(stream(7, title="Two dogs at the beach"))
    wait_ids(page, [3, 7])
    page.fill("#q", "")
    wait_ids(page, [])
    page.watch.check()


def test_similar_page_screenshot(engine, page):
    """A screenshot for a human: a filled page, desktop and mobile."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    titles = ["Cats playing the piano", "Two cats playing the piano live",
              "Cats playing piano at night", "The cat plays the piano",
              "Kittens playing the piano", "Piano lessons: cats playing",
              "Dogs playing in the snow", "Cooking with cats"]
    users = ["anna", "boris", "vera", "gleb", "dasha", "egor", "zhenya", "ilya"]
    engine.upsert(*(stream(i + 1, title=t, user_name=users[i], user_id=340690 + i,
                           viewers=7 * i + 3, age=5 * i + 1)
                    for i, t in enumerate(titles)))
    open_page(page, engine, "/examples/similar.html?q=" + quote("cats playing the piano"))
    page.wait_for_selector("#list > li")
    wait_ids(page, [1, 2, 6, 5, 3])     # 100, 67, 60, 60 (the higher id first), 50%
    settled(page)
    page.screenshot(path=str(SCREENSHOTS / "similar.png"), animations="disabled")
    resized(page, 390, 844)
    page.screenshot(path=str(SCREENSHOTS / "similar-mobile.png"), animations="disabled")
    page.watch.check()
