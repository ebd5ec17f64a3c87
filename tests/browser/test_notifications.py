"""The notifications example page (once_per_user, SPEC section 14) in
headless Chromium: new streams from people you follow, each shown once —
a reload shows only what is new, another user sees their own."""
from __future__ import annotations

import jwt
import pytest

from tests.browser.conftest import SCREENSHOTS, _engine
from tests.browser.test_examples import open_page, stream, wait_ids

pytestmark = [pytest.mark.service, pytest.mark.e2e]

SECRET = "browser-test-secret-of-enough-length"


def token(user: str) -> str:
    return jwt.encode({"sub": user}, SECRET, algorithm="HS256")


@pytest.fixture
def signed_engine(tmp_path):
    yield from _engine(tmp_path, "--secret", SECRET)


def test_each_new_stream_is_shown_once(signed_engine, page):
    engine = signed_engine
    engine.upsert(stream(1, user_id=5, user_name="anna"), stream(2, user_id=6, user_name="boris"),
                  stream(3, user_id=7, user_name="carl"),            # not followed
                  stream(4, user_id=5, live=False, duration=60))      # ended: not new
    path = f"/examples/notifications.html?token={token('42')}&follow=5,6"
    open_page(page, engine, path)
    wait_ids(page, [2, 1])
    page.wait_for_function("() => /user 42/.test(document.getElementById('who').textContent)")
    engine.upsert(stream(8, user_id=6, user_name="boris", title="Boris goes live again"))
    wait_ids(page, [8, 2, 1])
    engine.upsert(stream(9, user_id=7))                               # someone else's
    engine.upsert(stream(1, user_id=5, user_name="anna", title="Anna renamed her stream"))
    page.wait_for_function(
        "() => /renamed/.test(document.querySelector('#list > li[data-id=\"1\"]').innerText)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "notifications.png"), animations="disabled")
    wait_ids(page, [8, 2, 1])

    # a reload: nothing shown before comes back; what is new arrives
    page.reload()
    page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_function("() => /Nothing new/.test(document.getElementById('list').dataset.empty)")
    wait_ids(page, [])
    engine.upsert(stream(10, user_id=5, user_name="anna"))
    wait_ids(page, [10])

    # another user has notifications of their own
    page.goto(engine.base + f"/examples/notifications.html?token={token('43')}&follow=5")
    page.wait_for_selector('#status[data-state="connected"]')
    wait_ids(page, [10, 1])
    page.watch.check()


def test_without_a_token_the_page_says_what_it_needs(signed_engine, page):
    open_page(page, signed_engine, "/examples/notifications.html?follow=5")
    assert "token" in page.locator("#notice").inner_text()
    assert page.locator("#list > li").count() == 0
    page.watch.check()
