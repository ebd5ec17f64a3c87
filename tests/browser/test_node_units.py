"""The client's unit tests (tests/js, node's built-in runner) as part of the pytest run."""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.services import require_program

ROOT = Path(__file__).resolve().parents[2]


def test_node_unit_tests() -> None:
    node = require_program("node")
    result = subprocess.run([node, "--test", "tests/js/"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    summary = [line for line in result.stdout.splitlines() if line.startswith("# ")]
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert any(line.startswith("# pass ") for line in summary), result.stdout[-2000:]
