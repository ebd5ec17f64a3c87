"""Reading the result of a Deferred that must have fired already."""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure


def fired(d: Deferred) -> Any:
    """The result of ``d``, which must have fired (in-process stores and
    caches answer at once); a failure is raised."""
    out: list = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]
