"""The asyncio flavour: ``AsyncClient``'s calls are coroutines, for FastAPI,
Starlette, aiohttp servers and asyncio workers.

Its HTTP client is httpx's ``AsyncClient`` (``pip install
'pushengine-client[asyncio]'``), one per ``AsyncClient`` with its pool of
keep-alive connections, or one given to it (``http=``: its own limits,
proxies, or ``httpx.MockTransport`` in a test). The calls, their answers,
the errors and the retry rules are those of every flavour (``calls``,
``errors``, ``retry``); this module only sends a request and waits.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pushengine_client.api import Api
from pushengine_client.calls import Call, Calls, Request, Response
from pushengine_client.errors import PushengineError, Unavailable
from pushengine_client.retry import RetryPolicy, Wait, exchange
from pushengine_client.upload import Upload

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


async def _blocks(upload: Upload) -> AsyncIterator[bytes]:
    """An upload's blocks for httpx: read one at a time, each reported."""
    for data in upload.chunks():
        yield data
        await asyncio.sleep(0)      # let the loop breathe between blocks


class AsyncClient(Api):
    """A node's API for asyncio code: every call is awaited.

    ``url``, the keys, ``timeout`` (seconds for the whole answer),
    ``upload_timeout`` and ``retry`` as for ``SyncClient``; ``http``: an
    ``httpx.AsyncClient`` of your own (closed by you), else one is made (and
    closed by ``aclose()`` or ``async with``); ``sleep`` and ``clock``:
    ``asyncio.sleep`` and the loop's clock unless a test gives its own.
    """

    def __init__(self, url: str, *, http: httpx.AsyncClient | None = None,
                 publish_key: str | None = None, api_key: str | None = None,
                 admin_key: str | None = None, timeout: float = 10.0,
                 upload_timeout: float = 3600.0, retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], Any] | None = None,
                 clock: Callable[[], float] | None = None,
                 random: Callable[[], float] = random.random) -> None:
        import httpx
        self._httpx = httpx
        self.calls = Calls(url, publish_key=publish_key, api_key=api_key, admin_key=admin_key,
                           timeout=timeout, upload_timeout=upload_timeout)
        self.retry = retry
        self._own = http is None
        # the answer's deadline is the call's own (asyncio.timeout below);
        # httpx's per-read timeout is left off
        self._http = http if http is not None else httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=timeout))
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self._clock = clock
        self._random = random

    def _now(self) -> float:
        return self._clock() if self._clock is not None else \
            asyncio.get_running_loop().time()

    def _run(self, make: Callable[[], Call[T]]) -> Any:
        return self._drive(make)

    async def _drive(self, make: Callable[[], Call[T]]) -> T:
        steps = exchange(make(), self.retry, self._now, self._random)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Wait):
                    await self._sleep(step.seconds)
                    step = steps.send(None)
                else:
                    step = steps.send(await self._send(step.request))
        except StopIteration as done:
            return cast(T, done.value)
        finally:
            steps.close()

    async def aclose(self) -> None:
        """Close the httpx client this one made (not one given to it)."""
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    async def _send(self, request: Request) -> Response | PushengineError:
        """Send one request: its answer, or the error of a request that got none."""
        httpx = self._httpx
        headers = dict(request.headers)
        content: bytes | AsyncIterator[bytes] | None
        if isinstance(request.body, Upload):
            if request.body.size is not None:
                headers["Content-Length"] = str(request.body.size)
            content = _blocks(request.body)
        else:
            content = request.body
        try:
            async with asyncio.timeout(request.timeout):
                answer = await self._http.request(request.method, request.url,
                                                  headers=headers, content=content)
        except TimeoutError:
            return Unavailable(f"no answer within {request.timeout:g} s", retryable=False)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            return Unavailable(f"cannot connect to {self.calls.url}: {_describe(e)}")
        except httpx.TransportError as e:
            return Unavailable(f"no answer from {self.calls.url}: {_describe(e)}",
                               retryable=False)
        return Response(answer.status_code,
                        {k.lower(): v for k, v in answer.headers.items()}, answer.content)
