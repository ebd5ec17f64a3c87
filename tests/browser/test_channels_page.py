"""static/examples/channels.html in headless Chromium: a channel's messages
appear as the backend publishes them, and the page's form publishes through
the recipe's backend path (docs/recipes/channels_backend.py)."""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest

from pushengine.client import SyncClient
from tests.browser.conftest import SCREENSHOTS
from tests.e2e.conftest import start

pytestmark = [pytest.mark.service, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "docs" / "recipes"


def load_backend():
    spec = importlib.util.spec_from_file_location("channels_backend",
                                                  RECIPES / "channels_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("channels-page"), "--views",
              str(RECIPES / "channels.yaml"))
    yield e
    e.stop()


@pytest.fixture
def backend(node):
    """The recipe's backend path on a loopback port, publishing to ``node``."""
    client = SyncClient(node.base)
    server = load_backend().make_server(client, page_origin=node.base)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/send"
    server.shutdown()
    server.server_close()
    client.close()


def msg(channel: str, n: int, author: str, text: str) -> dict:
    return {"id": f"{channel}-{n}", "channel": channel, "author": author, "text": text,
            "sent_at": 1767225600000 + n * 60000, "public": True}


def texts(page) -> list[str]:
    return page.eval_on_selector_all("#list .pe-message-text", "els => els.map(e => e.textContent)")


def test_the_page_shows_its_channel_and_publishes_through_the_backend(node, backend, page):
    c = SyncClient(node.base)
    c.upsert("Message", msg("general", 1, "Anna", "Good morning, everyone"))
    page.goto(f"{node.base}/examples/channels.html?channel=general&send={backend}")
    page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_selector('#list li[data-id="general-1"]')

    c.upsert("Message", msg("random", 2, "Mallory", "not for #general"))
    c.upsert("Message", msg("general", 3, "Boris", "The build is green <b>again</b>"))
    page.wait_for_selector('#list li[data-id="general-3"]')
    assert texts(page) == ["The build is green <b>again</b>", "Good morning, everyone"]
    assert page.locator("#list b").count() == 0          # text, never HTML

    page.fill("#author", "Chromium")
    page.fill("#text", "Sent from the page, published by the backend")
    page.click("#send button")
    page.wait_for_function("() => document.querySelector('#list .pe-message-text')"
                           "?.textContent === 'Sent from the page, published by the backend'")
    # the form is emptied once the backend answered (which may come after the event)
    page.wait_for_function("() => document.getElementById('text').value === ''")
    assert len(texts(page)) == 3 and "not for #general" not in texts(page)

    c.delete("Message", "general-1")
    page.wait_for_selector('#list li[data-id="general-1"]', state="detached")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "channels.png"), full_page=True, animations="disabled")
    page.watch.check()
    c.close()


def test_without_a_backend_path_of_its_own_the_page_only_reads(node, page):
    for send in ["", "&send=https://elsewhere.example/steal", "&send=//elsewhere.example/x"]:
        page.goto(f"{node.base}/examples/channels.html?channel=random{send}")
        page.wait_for_selector('#status[data-state="connected"]')
        assert page.locator("#send").is_hidden()
        assert page.locator("#read-only").is_visible()
    page.watch.check()


def test_a_node_without_the_recipe_says_how_to_start_one(engine, page):
    page.goto(f"{engine.base}/examples/channels.html")
    page.wait_for_function("() => document.getElementById('notice').textContent"
                           ".includes('--views docs/recipes/channels.yaml')")
    page.watch.check(allow_network_errors=True)
