"""The synchronous flavour, for Django, Flask, scripts and task workers:
``SyncClient`` blocks until the node has answered (retries included).

It is built on the standard library's ``http.client`` rather than
``urllib.request``, and needs nothing outside it:

- one keep-alive connection per thread (and process) is kept and reused from
  call to call; urllib opens a connection per request, a TCP handshake per
  publish;
- a segment file is streamed block by block with its ``Content-Length``, and
  each block reports progress;
- every status is read the same way, as an answer: urllib raises HTTPError
  for a 4xx or 5xx, whose body must then be dug out of the exception.

Thread-safe: each thread has its own connection (``threading.local``); after
a ``fork`` the child opens its own. A kept connection the node has closed
meanwhile (it closes idle ones after ``--idle-timeout``) is noticed when a
request on it fails before any answer, and the request goes once more on a
new connection.
"""
from __future__ import annotations

import http.client
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from pushengine_client.api import Api
from pushengine_client.calls import Call, Calls, Request, Response
from pushengine_client.errors import PushengineError, Unavailable
from pushengine_client.retry import RetryPolicy, Wait, exchange
from pushengine_client.upload import Upload

T = TypeVar("T")
_STALE = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


class SyncClient(Api):
    """A node's API for blocking code.

    ``url``: the node (``http://127.0.0.1:8080``, or a prefix behind a
    proxy); ``publish_key`` goes in ``Authorization: Bearer`` (publish,
    ``bf.*``, segments), ``api_key`` in ``X-Api-Key``, ``admin_key`` in the
    params of the ``admin_*`` calls. ``timeout``: seconds for a connection
    and for each read of an answer (``upload_timeout`` for a segment upload).
    ``retry``: see ``retry.RetryPolicy``; ``sleep``, ``clock`` and ``random``
    are ``time.sleep``, ``time.monotonic`` and ``random.random`` unless a test
    gives its own.
    """

    def __init__(self, url: str, *, publish_key: str | None = None,
                 api_key: str | None = None, admin_key: str | None = None,
                 timeout: float = 10.0, upload_timeout: float = 3600.0,
                 retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 random: Callable[[], float] = random.random) -> None:
        self.calls = Calls(url, publish_key=publish_key, api_key=api_key, admin_key=admin_key,
                           timeout=timeout, upload_timeout=upload_timeout)
        self.retry = retry
        self._sleep = sleep
        self._clock = clock
        self._random = random
        parts = urlsplit(self.calls.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._where = parts.netloc
        self._local = threading.local()

    def _run(self, make: Callable[[], Call[T]]) -> T:
        steps = exchange(make(), self.retry, self._clock, self._random)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Wait):
                    self._sleep(step.seconds)
                    step = steps.send(None)
                else:
                    step = steps.send(self._send(step.request))
        except StopIteration as done:
            return cast(T, done.value)
        finally:
            steps.close()

    # -- the connection -----------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.calls.timeout)
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def close(self) -> None:
        """Close this thread's connection (the next call opens another)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and self._local.pid == os.getpid():
            conn.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    # -- one request ---------------------------------------------------------------
    def _send(self, request: Request) -> Response | PushengineError:
        """Send one request: its answer, or the error of a request that got none."""
        parts = urlsplit(request.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for last in (False, True):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                if not reused:
                    conn.timeout = self.calls.timeout       # to connect
                    conn.connect()
                conn.sock.settimeout(request.timeout)       # to send and to wait for the answer
            except OSError as e:
                self.close()
                return Unavailable(f"cannot connect to {self._where}: {_describe(e)}")
            try:
                self._write(conn, request, path)
            except PushengineError as e:        # the body broke its own rules
                self.close()
                return e
            except (OSError, http.client.HTTPException) as e:
                if reused and not last and isinstance(e, _STALE) and request.rewind():
                    self.close()
                    continue
                # the node may have answered before it read the whole body (a
                # refused upload is answered at its headers): read that answer
            except BaseException:
                self.close()        # a source that failed: the request is half sent
                raise
            try:
                answer = conn.getresponse()
                body = answer.read()
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if reused and not last and isinstance(e, _STALE) and request.rewind():
                    continue
                return Unavailable(f"no answer from {self._where}: {_describe(e)}",
                                   retryable=False)
            if answer.will_close:
                self.close()
            return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()},
                            body)
        raise AssertionError("unreachable")

    def _write(self, conn: http.client.HTTPConnection, request: Request, path: str) -> None:
        headers = dict(request.headers)
        body: bytes | Upload | Iterator[bytes] | None = request.body
        if isinstance(body, Upload):
            if body.size is not None:
                headers["Content-Length"] = str(body.size)
            body = body.chunks()        # no size: http.client sends it chunked
        conn.request(request.method, path, body=body, headers=headers)
