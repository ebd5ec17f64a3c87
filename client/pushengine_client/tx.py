"""The Twisted flavour: ``TwistedClient``'s calls return Deferreds.

Its HTTP client is a constructor argument: treq's module by default, or
anything with treq's ``request(method, url, headers=, data=)`` whose
responses have ``code``, ``headers`` and ``content()`` — a
``treq.client.HTTPClient`` over an Agent and connection pool of your own, or
``treq.testing.StubTreq`` in a test. So is the reactor (``IReactorTime``):
it times the answers, the waits between retries and the blocks of an upload,
and a test gives a ``Clock``.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectError, ConnectionClosed, DNSLookupError
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Cooperator, CooperativeTask, TaskFinished, TaskStopped
from twisted.python.failure import Failure
from twisted.web.client import (
    RequestGenerationFailed, RequestNotSent, RequestTransmissionFailed, ResponseFailed,
    ResponseNeverReceived)
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer
from zope.interface import implementer

from pushengine_client.api import Api
from pushengine_client.calls import Call, Calls, Request, Response
from pushengine_client.errors import PushengineError, Unavailable
from pushengine_client.retry import RetryPolicy, Wait, exchange
from pushengine_client.upload import Upload

T = TypeVar("T")


class DelayedCall(Protocol):
    """A timer ``Clock.callLater`` set (``IDelayedCall``)."""

    def active(self) -> bool: ...

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the client needs of the reactor (``IReactorTime``): a test's
    ``twisted.internet.task.Clock`` is one."""

    def seconds(self) -> float: ...

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any,
                  **kwargs: Any) -> DelayedCall: ...


class Consumer(Protocol):
    """What an upload writes to (the request's ``IConsumer``)."""

    def write(self, data: bytes) -> None: ...


def sleep(clock: Clock, seconds: float) -> Deferred[None]:
    """A Deferred that fires after ``seconds`` on ``clock`` (cancellable)."""
    timer: list[DelayedCall] = []
    d: Deferred[None] = Deferred(lambda _: timer[0].cancel())
    timer.append(clock.callLater(seconds, d.callback, None))
    return d


class HTTPResponse(Protocol):
    """What the client reads of a treq response."""

    @property
    def code(self) -> int: ...

    @property
    def headers(self) -> Headers: ...

    def content(self) -> Deferred[bytes]: ...


class HTTPClient(Protocol):
    """A treq-like client: treq's module, ``treq.client.HTTPClient``,
    ``treq.testing.StubTreq`` (whose Deferreds fire with an HTTPResponse)."""

    def request(self, method: str, url: str, *, headers: dict[str, str],
                data: bytes | UploadProducer | None) -> Deferred[HTTPResponse]: ...


def _describe(f: BaseException) -> str:
    reasons = getattr(f, "reasons", None)      # twisted.web's wrapped failures
    if reasons:
        return "; ".join(r.getErrorMessage() for r in reasons)
    return str(f) or type(f).__name__


@implementer(IBodyProducer)
class UploadProducer:
    """An ``Upload`` as the request body: one block per turn of the
    cooperator, paused while the connection's buffer is full."""

    def __init__(self, upload: Upload, cooperator: Cooperator) -> None:
        self.upload = upload
        self.length = upload.size if upload.size is not None else UNKNOWN_LENGTH
        self.error: BaseException | None = None
        self._cooperator = cooperator
        self._task: CooperativeTask[Iterator[None]] | None = None

    def startProducing(self, consumer: Consumer) -> Deferred[None]:
        task = self._task = self._cooperator.cooperate(self._blocks(consumer))

        def failed(f: Failure) -> Any:
            if isinstance(f.value, TaskStopped):
                return Deferred()       # stopped by the request: it ends by itself
            self.error = f.value
            return f
        return task.whenDone().addCallbacks(lambda _: None, failed)

    def _blocks(self, consumer: Consumer) -> Iterator[None]:
        for data in self.upload.chunks():
            consumer.write(data)
            yield None

    def pauseProducing(self) -> None:
        if self._task is not None:
            self._task.pause()

    def resumeProducing(self) -> None:
        if self._task is not None:
            self._task.resume()

    def stopProducing(self) -> None:
        if self._task is not None:
            try:
                self._task.stop()
            except TaskFinished:
                pass


class TwistedClient(Api):
    """A node's API for Twisted code: every call returns a Deferred.

    ``reactor``: an ``IReactorTime`` (the reactor, or a test's Clock);
    ``url``, the keys, ``timeout`` (seconds for the whole answer) and
    ``retry`` as for ``SyncClient``; ``http``: the treq-like client (treq's
    module when not given); ``random``: ``random.random`` unless a test gives
    its own.
    """

    def __init__(self, reactor: Clock, url: str, *, http: HTTPClient | None = None,
                 publish_key: str | None = None, api_key: str | None = None,
                 admin_key: str | None = None, timeout: float = 10.0,
                 upload_timeout: float = 3600.0, retry: RetryPolicy = RetryPolicy(),
                 random: Callable[[], float] = random.random) -> None:
        if http is None:
            import treq
            # treq's functions take their options as **kwargs
            http = cast(HTTPClient, treq)
        self.calls = Calls(url, publish_key=publish_key, api_key=api_key, admin_key=admin_key,
                           timeout=timeout, upload_timeout=upload_timeout)
        self.reactor = reactor
        self.retry = retry
        self._http = http
        self._random = random

        def schedule(work: Callable[[], None]) -> IDelayedCall:
            return cast(IDelayedCall, reactor.callLater(0, work))
        self._cooperator = Cooperator(scheduler=schedule)

    def _run(self, make: Callable[[], Call[T]]) -> Deferred[T]:
        return Deferred.fromCoroutine(self._drive(make))

    async def _drive(self, make: Callable[[], Call[T]]) -> T:
        steps = exchange(make(), self.retry, self.reactor.seconds, self._random)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Wait):
                    await sleep(self.reactor, step.seconds)
                    step = steps.send(None)
                else:
                    step = steps.send(await self._send(step.request))
        except StopIteration as done:
            return cast(T, done.value)
        finally:
            steps.close()

    async def _send(self, request: Request) -> Response | PushengineError:
        """Send one request: its answer, or the error of a request that got none."""
        producer = UploadProducer(request.body, self._cooperator) \
            if isinstance(request.body, Upload) else None
        data: bytes | UploadProducer | None = producer if producer is not None else \
            request.body if isinstance(request.body, bytes) else None
        answer = Deferred.fromCoroutine(self._fetch(request, data))
        timer = None if request.timeout is None else \
            self.reactor.callLater(request.timeout, answer.cancel)
        try:
            return await answer
        except CancelledError:
            if timer is None or timer.active():
                raise       # cancelled by the caller
            return Unavailable(f"no answer within {request.timeout:g} s", retryable=False)
        except (ConnectError, DNSLookupError, RequestNotSent) as e:
            return Unavailable(f"cannot connect to {self.calls.url}: {_describe(e)}")
        except (ResponseFailed, ResponseNeverReceived, RequestTransmissionFailed,
                RequestGenerationFailed, ConnectionClosed) as e:
            if producer is not None and producer.error is not None:
                if isinstance(producer.error, PushengineError):
                    return producer.error
                raise producer.error from None      # the source's own failure
            return Unavailable(f"no answer from {self.calls.url}: {_describe(e)}",
                               retryable=False)
        finally:
            if timer is not None and timer.active():
                timer.cancel()

    async def _fetch(self, request: Request, data: bytes | UploadProducer | None) -> Response:
        response: HTTPResponse = await self._http.request(
            request.method, request.url, headers=dict(request.headers), data=data)
        body = await response.content()
        headers = {name.decode("latin-1").lower(): values[-1].decode("latin-1")
                   for name, values in response.headers.getAllRawHeaders() if values}
        return Response(response.code, headers, body)
