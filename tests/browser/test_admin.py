"""The admin page in headless Chromium against ``twistd -n pushengine --admin-key``:
it follows a burst of sessions and changes, publishes through its form and
looks a session up; the key never appears in a URL."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tests.browser.conftest import EngineProcess
from tests.browser.test_examples import stream

pytestmark = [pytest.mark.service, pytest.mark.e2e]
KEY = "browser-admin-key-0123456789"
NODE = "admin-node"


@pytest.fixture
def admin_engine(tmp_path):
    engine = EngineProcess(tmp_path, "--admin-key", KEY, "--node-id", NODE, "--max-timeout", "20")
    engine.start()
    yield engine
    engine.stop()
    log = engine.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-5000:]


def shots(tmp_path: Path) -> Path:
    """Where screenshots go: $SCREENSHOT_DIR when set (to look at them), else the test's tmp."""
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def text(page, selector: str) -> str:
    return page.locator(selector).text_content()


def wait_text(page, selector: str, want: str, timeout: float = 15.0) -> None:
    try:
        page.wait_for_function("([s, w]) => document.querySelector(s)?.textContent === w",
                               arg=[selector, want], timeout=timeout * 1000)
    except Exception:
        assert text(page, selector) == want, selector
        raise


def sign_in(page, engine, key: str = KEY) -> None:
    page.goto(engine.base + "/admin/")
    page.wait_for_selector("#login-form")
    page.fill("#key", key)
    page.click("#login-form button")


def test_admin_page_follows_sessions_and_changes(admin_engine, page, tmp_path):
    engine = admin_engine
    urls: list[str] = []
    bodies: list[str] = []
    page.on("request", lambda r: (urls.append(r.url), bodies.append(r.post_data or "")))
    folder = shots(tmp_path)

    # a wrong key: refused, the form stays
    sign_in(page, engine, "not-the-right-key-at-all")
    page.wait_for_function("() => document.getElementById('login-error').textContent !== ''")
    assert "admin key" in text(page, "#login-error")
    assert page.locator("#dash").is_hidden()
    page.screenshot(path=str(folder / "admin-login.png"))

    sign_in(page, engine)
    page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_selector("#dash", state="visible")
    wait_text(page, "#total-nodes", "1")
    wait_text(page, "#total-sessions", "1")           # the page's own session
    wait_text(page, f'#nodes tr[data-node="{NODE}"] td[data-field="feed"]', "memory")
    assert page.locator(f'#nodes tr[data-node="{NODE}"] td[data-field="feed"] span') \
        .get_attribute("data-up") == "true"
    assert text(page, f'#nodes tr[data-node="{NODE}"] td[data-field="redis"]') == "not used"

    # a burst of sessions: 12 on the live view, 8 on the recent one
    sids = [engine.call("session.create") for _ in range(20)]
    for sid in sids[:12]:
        engine.call("stream.subscribe_public_live", sid, 10)
    for sid in sids[12:]:
        engine.call("session.subscribe", sid, "PublicRecentStreamView", {}, 20)
    wait_text(page, "#total-sessions", "21")
    wait_text(page, "#total-subscriptions", "20")
    wait_text(page, '#views tr[data-key="PublicLiveStreamView(limit=10)"] td.n', "12")
    wait_text(page, '#views tr[data-key="PublicRecentStreamView(limit=20)"] td.n', "8")
    assert page.locator("#views tbody tr").first.get_attribute("data-key") == \
        "PublicLiveStreamView(limit=10)"

    # three long-polls parked
    def poll(sid):
        try:
            engine.call("session.get_events", sid, 12)
        except Exception:
            pass
    pollers = [threading.Thread(target=poll, args=(sid,), daemon=True) for sid in sids[:3]]
    for t in pollers:
        t.start()
    wait_text(page, "#total-waiting", "3")

    # a burst of changes: counted in, and the chart's "in" line leaves zero
    engine.upsert(*[stream(i) for i in range(1, 31)])
    wait_text(page, "#total-in", "30 in all")
    page.wait_for_function("""() => [...window.pushengineAdmin.nodes.values()]
        .some((n) => n.history.some((p) => p[1] > 0))""")
    page.wait_for_function("""() => {
        const line = document.querySelector('#chart polyline[data-series="in"]');
        return line && line.getAttribute('points').split(' ').length > 1;
    }""")
    wait_text(page, "#total-waiting", "0")           # the changes answered the polls
    for t in pollers:
        t.join(15)

    # sessions end
    for sid in sids[15:]:
        engine.call("session.destroy", sid)
    wait_text(page, "#total-sessions", "16")
    wait_text(page, '#views tr[data-key="PublicRecentStreamView(limit=20)"] td.n', "3")
    page.wait_for_timeout(1500)                       # a little history for the picture
    page.screenshot(path=str(folder / "admin-dashboard.png"), full_page=True)

    # publish through the form
    change = {"type": "Stream", "action": "upsert", "obj": dict(
        stream(777, title="Published from the admin page"), created_at="2099-01-01T00:00:00Z")}
    page.fill("#change", json.dumps(change))
    page.click("#publish-form button")
    wait_text(page, "#publish-result", "Accepted 1 change.")
    viewer = engine.call("session.create")
    _, state = engine.call("stream.subscribe_public_live", viewer, 10)
    assert state[0]["id"] == 777 and state[0]["title"] == "Published from the admin page"
    wait_text(page, "#total-in", "31 in all")
    page.fill("#change", "{not json")
    page.click("#publish-form button")
    page.wait_for_function("() => document.getElementById('publish-result').dataset.ok === 'false'")
    page.fill("#change", json.dumps({"type": "Stream", "action": "upsert", "obj": {}}))
    page.click("#publish-form button")
    page.wait_for_function(
        "() => document.getElementById('publish-result').textContent.startsWith('Refused')")

    # look a session up
    page.fill("#sid", sids[0])
    page.click("#lookup-form button")
    page.wait_for_selector('#lookup-result tr[data-key="PublicLiveStreamView(limit=10)"]')
    assert text(page, '#lookup-result dd[data-field="node"]') == NODE
    assert text(page, '#lookup-result dd[data-field="user"]') == "anonymous"
    row = page.locator('#lookup-result tr[data-key="PublicLiveStreamView(limit=10)"] td')
    assert [row.nth(i).text_content() for i in range(4)] == \
        ["PublicLiveStreamView(limit=10)", "10", "10", "13"]
    page.screenshot(path=str(folder / "admin-lookup.png"), full_page=True)
    page.fill("#sid", "no-such-session")
    page.click("#lookup-form button")
    page.wait_for_function(
        "() => document.getElementById('lookup-result').textContent.startsWith('No such session')")

    # the key went in bodies only, never in a URL
    assert not any(KEY in u for u in urls), [u for u in urls if KEY in u]
    assert any(KEY in b and "admin.subscribe" in b for b in bodies)
    page.watch.check()

    # a reload keeps the key in this tab; signing out forgets it
    page.reload()
    page.wait_for_selector('#status[data-state="connected"]')
    wait_text(page, "#total-nodes", "1")
    page.click("#signout")
    page.wait_for_selector("#login", state="visible")
    assert page.evaluate("() => sessionStorage.length") == 0
    page.watch.check()


def test_admin_page_is_closed_without_the_option(engine, page):
    page.goto(engine.base + "/admin/")
    assert json.loads(page.locator("body").text_content()) == {"error": "not found"}
