"""How the suite tests code that returns Deferreds: one style, two cases.

**The Deferred has fired already** (the in-process backends, anything driven
by a ``twisted.internet.task.Clock``): the test is a plain function and reads
the result with ``fired(d)`` (the failure is raised), ``failed(d, *errors)``
(the failure, which must be one of ``errors``) or checks ``pending(d)``.
Time moves only when the test calls ``clock.advance``. A trial
``SynchronousTestCase`` does the same with its ``successResultOf``,
``failureResultOf`` and ``assertNoResult``, which these functions mirror.

**The Deferred fires later, on the real reactor** (real sockets: memcached,
Redis, RabbitMQ, a listening port): the test is an ``async def`` decorated
with ``@pytest_twisted.ensureDeferred`` and ``await``s Deferreds; a condition
another party brings about is awaited with ``await eventually(check)``.
Helpers are ``async def`` too; one that must run while the test goes on is
started with ``Deferred.fromCoroutine``. A fixture that needs the reactor is
a ``pytest_twisted.async_yield_fixture`` (or, for a synchronous fixture's
set-up and tear-down, ``pytest_twisted.blockon``).

Not used: ``inlineCallbacks`` in tests, fixed sleeps, and hand-made polling
loops (``tests/waiting.py`` has the one for real processes driven from the
test's thread).
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from tests.waiting import Deadline

T = TypeVar("T")


def fired(d: Deferred) -> Any:
    """The result of ``d``, which must have fired (in-process stores and
    caches answer at once); a failure is raised."""
    out: list = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]


def failed(d: Deferred, *errors: type[BaseException]) -> Failure:
    """The failure of ``d``, which must have failed, with one of ``errors``
    (any exception when none is given)."""
    out: list = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    failure = out[0]
    assert isinstance(failure, Failure), f"the Deferred succeeded with {failure!r}"
    if errors and not failure.check(*errors):
        failure.raiseException()
    return failure


def pending(d: Deferred) -> bool:
    """Whether ``d`` has not fired yet (for ``assert pending(d)``)."""
    return not d.called


async def eventually(check: Callable[[], T], timeout: float = 10.0,
                     what: str = "the condition", interval: float = 0.02) -> T:
    """Wait on the running reactor until ``check()`` is true; return its
    value, or fail after ``timeout`` seconds saying ``what`` was awaited."""
    from twisted.internet import reactor

    deadline = Deadline(timeout, what)
    while not (value := check()):
        deadline.check(value)
        await deferLater(reactor, interval, lambda: None)
    return value
