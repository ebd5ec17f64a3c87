"""Reaching the real services tests need.

A test that needs RabbitMQ, memcached, Redis or Chromium calls
``require_service``: run by hand without the service it is skipped with the
reason; under CI (CI=true) it fails, because CI must start everything.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unavailable(reason: str) -> None:
    """Skip (by hand) or fail (in CI) with ``reason``."""
    if in_ci():
        pytest.fail(f"required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require_service(name: str, host: str, port: int) -> None:
    if not port_open(host, port):
        unavailable(f"{name} is not reachable on {host}:{port}")


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed")
    return path


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> int | None:
    """Stop a child process: SIGTERM, and SIGKILL when it has not exited
    within ``grace`` seconds; its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace)
    return process.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
