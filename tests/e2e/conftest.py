"""``twistd -n pushengine`` as a subprocess, and a small blocking HTTP client."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.services import free_port, stop_process
from tests.waiting import wait_serving

START_DEADLINE = 30.0
ROOT = Path(__file__).resolve().parents[2]


def twistd_command() -> list[str]:
    twistd = Path(sys.executable).with_name("twistd")
    if twistd.exists():
        return [str(twistd)]
    return [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; "
                                  "sys.argv[0] = 'twistd'; run()"]


class Answer:
    def __init__(self, code: int, headers: Any, body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


class Engine:
    """One engine process on a free loopback port."""

    def __init__(self, workdir: Path, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "twistd.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
        # the checkout first on the path: its twisted/plugins holds the plugin,
        # whichever way (or whether) the package is installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          env.get("PYTHONPATH")]))
        self.command = [*twistd_command(), "-n", "--pidfile=", f"--logfile={self.log}",
                        "pushengine", "--port", f"tcp:{self.port}:interface=127.0.0.1",
                        "--node-id", "e2e", *args]
        self.process = subprocess.Popen(self.command, cwd=str(workdir), env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.ids = 0

    def log_text(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except OSError:
            return ""

    def wait_ready(self) -> None:
        wait_serving(self.process, lambda: self.get("/health").code == 200, START_DEADLINE,
                     self.log_text, self.stop)

    def stop(self) -> int | None:
        code = stop_process(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    # -- HTTP -----------------------------------------------------------------
    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 10) -> Answer:
        req = urllib.request.Request(self.base + path, data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return Answer(response.status, response.headers, response.read())
        except urllib.error.HTTPError as e:
            with e:
                return Answer(e.code, e.headers, e.read())

    def get(self, path: str) -> Answer:
        return self.request("GET", path, timeout=5)

    def post(self, path: str, value: Any, timeout: float = 10) -> Answer:
        body = value if isinstance(value, bytes) else json.dumps(value).encode()
        return self.request("POST", path, body, {"Content-Type": "application/json"}, timeout)

    def call(self, method: str, *params: Any, timeout: float = 10) -> Any:
        self.ids += 1
        answer = self.post("/api/jsonrpc", {"jsonrpc": "2.0", "method": method,
                                            "params": list(params), "id": self.ids},
                           timeout).json()
        if "error" in answer:
            raise AssertionError(f"{method} failed: {answer['error']}")
        return answer["result"]

    def publish(self, *changes: dict) -> Answer:
        return self.post("/api/publish", list(changes))

    def metric(self, name: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families
        text = self.get("/metrics").body.decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return sample.value
        raise AssertionError(f"no metric {name}")


def start(workdir: Path, *args: str) -> Engine:
    engine = Engine(workdir, *args)
    try:
        engine.wait_ready()
    except BaseException:
        engine.stop()
        raise
    return engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    """The shared engine of a test module: small body limit, short polls."""
    e = start(tmp_path_factory.mktemp("engine"), "--max-body", "4096", "--max-timeout", "5")
    yield e
    e.stop()
    log = e.log_text()
    # (klein logs the decoding error of a non-UTF-8 URL with its traceback:
    # the log may hold that one, the client never does)
    assert "Unhandled" not in log and " failed" not in log, log[-5000:]
