"""When to send a call again, and the steps of one call, free of any I/O.

``exchange(call, policy, now, rand)`` is a generator that both flavours
drive: it yields ``Send(request)`` — the driver sends it and sends back the
``Response``, or the PushengineError of a request that got none — and
``Wait(seconds)`` — the driver waits (``time.sleep``, ``deferLater`` on the
injected clock) and sends back None; it returns the call's result or raises
its error. So the retry rules are written once:

- only errors that say nothing was done are retried: HTTP 429 and 503, the
  JSON-RPC twins 1007 and 1011, and a connection that could not be made;
  never another 4xx, a 500, or a request whose answer did not come (the node
  may have done it);
- ``Retry-After`` is honoured as it is; without it the wait doubles from
  ``base`` up to ``cap``, less a random share of up to ``jitter`` so that
  many backends do not come back at once;
- at most ``attempts`` sends, and no wait that would end more than ``total``
  seconds after the first send: a longer ``Retry-After`` ends the call with
  its RateLimited at once, ``retry_after`` telling the caller how long;
- a streamed body that cannot be read again (a generator) is not resent.
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TypeVar, Union

from pushengine_client.calls import Call, Request, Response
from pushengine_client.errors import PushengineError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a call is retried (see the module)."""

    attempts: int = 5
    total: float = 30.0
    base: float = 0.5
    cap: float = 8.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts counts the first send: at least 1")
        if not (self.total >= 0 and self.base >= 0 and self.cap >= 0):
            raise ValueError("total, base and cap are seconds, 0 or more")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a share, from 0 to 1")

    def delay(self, attempt: int, error: PushengineError, elapsed: float,
              rand: float) -> float | None:
        """Seconds to wait before send ``attempt + 1``, or None to give up.
        ``elapsed``: seconds since the first send; ``rand`` in [0, 1)."""
        if not error.retryable or attempt >= self.attempts:
            return None
        if error.status is not None and 400 <= error.status < 500 and error.status != 429:
            return None         # whatever its body says, a 4xx but 429 is not retried
        if error.retry_after is not None:
            wait = max(error.retry_after, 0.0)
        else:
            backoff = min(self.cap, self.base * 2.0 ** (attempt - 1))
            wait = backoff * (1.0 - self.jitter * rand)
        if elapsed + wait > self.total:
            return None
        return wait


NO_RETRY = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class Send:
    """Send this request; answer with its Response or its PushengineError."""

    request: Request


@dataclass(frozen=True)
class Wait:
    """Wait this many seconds; answer with None."""

    seconds: float


Step = Union[Send, Wait]
Outcome = Union[Response, PushengineError, None]


def exchange(call: Call[T], policy: RetryPolicy, now: Callable[[], float],
             rand: Callable[[], float]) -> Generator[Step, Outcome, T]:
    """The steps of ``call`` under ``policy`` (see the module); ``now`` is
    the driver's clock in seconds, ``rand`` its random numbers in [0, 1)."""
    started = now()
    attempt = 1
    try:
        while True:
            outcome = yield Send(call.request)
            try:
                if isinstance(outcome, PushengineError):
                    raise outcome
                if not isinstance(outcome, Response):
                    raise TypeError(f"a Send is answered with a Response, not {outcome!r}")
                return call.read(outcome)
            except PushengineError as error:
                error.attempts = attempt
                error.call = error.call or call.name
                wait = policy.delay(attempt, error, now() - started, rand())
                if wait is None or not call.request.rewind():
                    raise
            yield Wait(wait)
            attempt += 1
    finally:
        call.close()
