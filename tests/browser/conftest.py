"""The example pages in headless Chromium against a real ``twistd -n pushengine``.

Chromium is launched by Playwright from the system (``/usr/bin/chromium``),
never a downloaded browser. Without Chromium or Playwright the tests are
skipped by hand and fail in CI (tests.services).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.services import free_port, require_program, stop_process, unavailable
from tests.waiting import page_sleep, wait_serving, wait_until

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
]
START_DEADLINE = 30.0


def twistd_command() -> list[str]:
    twistd = Path(sys.executable).with_name("twistd")
    if twistd.exists():
        return [str(twistd)]
    return [sys.executable, "-c",
            "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"]


class EngineProcess:
    """``twistd -n pushengine`` on a fixed loopback port, which can be killed and started again."""

    def __init__(self, workdir: Path, *args: str) -> None:
        self.workdir = workdir
        self.args = args
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.logs: list[Path] = []

    def start(self) -> None:
        self.starts += 1
        log = self.workdir / f"twistd-{self.starts}.log"
        self.logs.append(log)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
        # The checkout first on the path: its twisted/plugins holds the plugin.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        command = [*twistd_command(), "-n", f"--pidfile={self.workdir / f'twistd-{self.starts}.pid'}",
                   f"--logfile={log}", "pushengine", "--port", f"tcp:{self.port}:interface=127.0.0.1",
                   *self.args]
        self.process = subprocess.Popen(command, cwd=str(self.workdir), env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wait_serving(self.process, lambda: self.get("/health")[0] == 200, START_DEADLINE,
                     self.log_text, self.stop)

    def kill(self) -> None:
        """Die at once, as a crashed node does: its sessions are gone."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._close()

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)
        self._close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def _close(self) -> None:
        if self.process and self.process.stdout:
            self.process.stdout.close()

    def log_text(self) -> str:
        return "".join(p.read_text("utf-8", "replace") for p in self.logs if p.exists())

    # -- HTTP ------------------------------------------------------------------
    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read()

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def publish(self, *changes: dict) -> None:
        code, body = self.request("POST", "/api/publish", json.dumps(list(changes)).encode(),
                                  {"Content-Type": "application/json"})
        assert code == 200, body
        assert json.loads(body) == {"accepted": len(changes)}, body

    def upsert(self, *objs: dict) -> None:
        self.publish(*({"type": "Stream", "action": "upsert", "obj": o} for o in objs))

    def delete(self, *ids: Any) -> None:
        self.publish(*({"type": "Stream", "action": "delete", "obj": {"id": i}} for i in ids))

    def call(self, method: str, *params: Any) -> Any:
        code, body = self.request("POST", "/api/jsonrpc", json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}).encode(),
            {"Content-Type": "application/json"})
        answer = json.loads(body)
        assert "error" not in answer, answer
        return answer["result"]


def _engine(tmp_path: Path, *args: str):
    engine = EngineProcess(tmp_path, *args)
    engine.start()
    yield engine
    engine.stop()
    log = engine.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-5000:]


@pytest.fixture
def engine(tmp_path):
    """A fresh engine with the in-process default (empty store, no producer)."""
    yield from _engine(tmp_path)


@pytest.fixture(scope="module")
def demo_engine(tmp_path_factory):
    """An engine with ``--demo``: fake streams keep coming, changing and ending."""
    yield from _engine(tmp_path_factory.mktemp("demo"), "--demo")


@pytest.fixture(scope="session")
def browser():
    path = require_program("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright Python package is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


class PageWatch:
    """What a page did that it should not: errors, and requests leaving the machine."""

    def __init__(self) -> None:
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.external: list[str] = []
        self.debug: list[str] = []

    def check(self, allow_network_errors: bool = False) -> None:
        errors = self.console_errors
        if allow_network_errors:
            errors = [e for e in errors if "Failed to load resource" not in e
                      and "ERR_CONNECTION" not in e]
        assert not self.page_errors, self.page_errors
        assert not errors, errors
        assert not self.external, f"requests to other hosts: {self.external}"


def console_flushed(page) -> None:
    """Every console message the page printed so far is in ``page.watch``:
    Playwright delivers them in order, so a marker printed now arrives after
    them (this replaces waiting a while for messages that may come)."""
    marker = f"(test marker {uuid.uuid4().hex})"
    page.evaluate("(m) => console.debug(m)", marker)
    wait_until(lambda: marker in page.watch.debug, 5, "the console marker",
               sleep=page_sleep(page))
    page.watch.debug.remove(marker)


def settled(page) -> None:
    """The page as it looks between two changes (for a screenshot): its
    fonts loaded and no card entering (the flash of an update may run: under
    --demo one always does)."""
    page.wait_for_function(
        "() => document.fonts.status === 'loaded' && !document.getAnimations().some("
        "(a) => a.animationName === 'pe-enter' && a.playState === 'running')")


def resized(page, width: int, height: int) -> None:
    """A new viewport, once the page has laid itself out in it."""
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function("([w, h]) => window.innerWidth === w && window.innerHeight === h",
                           arg=[width, height])
    settled(page)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB",
                                  timezone_id="Europe/Moscow")
    watch = PageWatch()

    def route(r):
        url = r.request.url
        if url.startswith(("http://127.0.0.1:", "data:", "blob:")):
            r.continue_()
        else:
            watch.external.append(url)
            r.abort()

    context.route("**/*", route)
    pg = context.new_page()
    pg.on("console", lambda m: (watch.console_errors if m.type == "error" else watch.debug
                                if m.type == "debug" else []).append(m.text))
    pg.on("pageerror", lambda e: watch.page_errors.append(str(e)))
    pg.watch = watch
    pg.set_default_timeout(15000)
    yield pg
    context.close()
