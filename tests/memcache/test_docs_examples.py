"""The examples of docs/memcache.md run as written, on the in-process backend.

Each ``python`` block runs as the body of an ``async def`` given ``cache``
(an InMemoryCache) and ``reactor`` (a Clock). A ``print(...)`` line that ends
with a comment holding JSON (``# ["node-b"]``) must print that value.
"""
from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

import pytest
from twisted.internet.defer import Deferred

from pushengine.memcache import InMemoryCache

from tests.memcache.test_visitors import result, start_clock

DOC = Path(__file__).resolve().parents[2] / "docs" / "memcache.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
PRINTED = re.compile(r"^\s*print\(.*\)\s*#\s*(.+)$")


def test_the_guide_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[b.splitlines()[0] for b in BLOCKS])
def test_an_example_runs_and_prints_what_it_says(block: str, capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    source = "async def example(cache, reactor):\n" + textwrap.indent(block, "    ")
    scope: dict[str, object] = {}
    exec(compile(source, str(DOC), "exec"), scope)
    clock = start_clock()
    result(Deferred.fromCoroutine(scope["example"](InMemoryCache(clock), clock)))
    printed = capsys.readouterr().out.splitlines()
    prints = [line for line in block.splitlines() if line.lstrip().startswith("print(")]
    assert len(printed) == len(prints)
    for line, out in zip(prints, printed):
        said = PRINTED.match(line)
        if said is not None:
            assert ast.literal_eval(out) == json.loads(said.group(1)), line
