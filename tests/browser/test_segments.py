"""The segments page (static/examples/segments.html) in headless Chromium: a
good file is uploaded and listed, a file split by ';' is refused with its
error and line, the key travels in a header only, a segment is deleted."""
from __future__ import annotations

import pytest

from tests.browser.conftest import SCREENSHOTS, _engine

pytestmark = [pytest.mark.service, pytest.mark.e2e]

KEY = "page-publish-key"


@pytest.fixture
def keyed_engine(tmp_path):
    yield from _engine(tmp_path, "--publish-key", KEY, "--segment-min", "3")


def test_upload_list_errors_and_delete(keyed_engine, page, tmp_path):
    good = tmp_path / "contacts.csv"
    good.write_text("phone,email,name\n+7 (999) 555-11-11,Anna@Example.com,Анна\n"
                    "79995551112,bob@example.com,Bob\n79995551112,not-an-email,Dup\n",
                    encoding="utf-8")
    bad = tmp_path / "excel.csv"
    bad.write_text("phone;email\n79995551111;anna@example.com\n", encoding="utf-8")
    seen = []
    page.on("request", lambda r: seen.append((r.url, r.headers.get("authorization"))))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    page.goto(keyed_engine.base + "/examples/segments.html")
    # without the key the list is refused, and the page says so
    page.wait_for_function("document.getElementById('notice').textContent.includes('publish key')")
    page.fill("#key", KEY)
    page.fill("#name", "vip")
    page.set_input_files("#file", str(good))
    page.click("#send")
    page.wait_for_selector('#result[data-state="ok"]')
    assert "Segment vip uploaded" in page.text_content("#result-title")
    counts = page.text_content("#result-counts")
    assert "Valid4" in counts and "Invalid1" in counts and "Duplicates1" in counts
    page.wait_for_selector('#segment-rows tr[data-name="vip"]')
    page.screenshot(path=str(SCREENSHOTS / "segments-uploaded.png"), full_page=True)

    page.fill("#name", "excel")
    page.set_input_files("#file", str(bad))
    page.click("#send")
    page.wait_for_selector('#result[data-state="error"]')
    assert page.text_content("#result-title") == "Refused: header_validation"
    assert "(line 1)" in page.text_content("#result-message")
    assert "';'" in page.text_content("#result-message")
    page.screenshot(path=str(SCREENSHOTS / "segments-refused.png"), full_page=True)
    assert page.locator("#segment-rows tr").count() == 1      # nothing changed

    page.click('#segment-rows tr[data-name="vip"] button')
    page.wait_for_selector("#empty:not([hidden])")
    assert keyed_engine.call("session.create")               # the node is fine
    api = [(url, auth) for url, auth in seen if "/api/segments" in url]
    assert api and all(KEY not in url for url, _ in api)
    assert any(auth == f"Bearer {KEY}" for _, auth in api)
    page.watch.check(allow_network_errors=True)               # the 401 before the key
