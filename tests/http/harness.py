"""An engine node on a Clock, driven in memory through its real klein resource.

``ClockNode`` is ``pushengine.app.service.Node`` with ``twisted.internet.task.Clock``
as its reactor: sessions, polls and pings run on simulated time. ``Http``
sends requests with ``treq.testing.StubTreq`` and checks every answer against
the transport's promises (no HTML, no traceback).
"""
from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from pushengine.app.service import Node
from pushengine.app.tap import Options

BASE = "http://127.0.0.1"


def options(*argv: str) -> Options:
    o = Options(environ={})
    o.parseOptions(["--node-id", "test-node", *argv])
    return o


class ClockNode(Node):
    """A Node on a Clock (its own, or ``clock``: nodes of one test may share
    one); ``feed`` replaces the in-process feed when given."""

    def __init__(self, *argv: str, feed: Any = None, store: Any = None,
                 clock: Clock | None = None) -> None:
        self._feed_override = feed
        self._store_override = store
        self.clock = clock if clock is not None else Clock()
        super().__init__(options(*argv), self.clock)
        self.feed.start(self.engine)

    def _feed(self) -> Any:
        return self._feed_override if self._feed_override is not None else super()._feed()

    def _store(self) -> Any:
        return self._store_override if self._store_override is not None else super()._store()


class Reply:
    def __init__(self, code: int, headers: Any, body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        values = self.headers.getRawHeaders(name)
        return values[0] if values else None

    @property
    def content_type(self) -> str:
        return self.header("content-type") or ""

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Reply {self.code} {self.content_type} {self.body[:200]!r}>"


def check(reply: Reply) -> Reply:
    """What no answer may ever be: an HTML page or a stack trace."""
    assert "html" not in reply.content_type.lower(), reply
    assert b"Traceback" not in reply.body, reply
    assert b"<html" not in reply.body.lower(), reply
    return reply


class Pending:
    """A request sent and not answered yet (a parked long-poll)."""

    def __init__(self, http: "Http", d: Deferred) -> None:
        self.http = http
        self.out: list = []
        d.addBoth(self.out.append)
        self.deferred = d

    @property
    def done(self) -> bool:
        self.http.flush()
        return bool(self.out)

    async def settle(self) -> Reply:
        """Wait (on the real reactor) for an answer whose body a producer
        sends: twisted.web drives a file's producer with the global cooperator."""
        from twisted.internet import reactor
        from twisted.internet.task import deferLater
        for _ in range(400):
            if self.done:
                break
            await deferLater(reactor, 0.005, lambda: None)
        return self.reply()

    def reply(self) -> Reply:
        assert self.done, "no answer yet"
        result = self.out[0]
        if isinstance(result, Failure):
            result.raiseException()
        return result

    def json(self) -> Any:
        return self.reply().json()


class Http:
    def __init__(self, resource: Any) -> None:
        self.stub = StubTreq(resource)

    def flush(self) -> None:
        """Move every byte both ways (a file producer takes several rounds)."""
        for _ in range(50):
            self.stub.flush()
            if not self.stub._agent._pumps:
                break

    def send(self, method: str, path: str, body: bytes | str | None = None,
             headers: dict | None = None) -> Pending:
        d = self.stub.request(method, BASE + path, data=body, headers=headers or {},
                              allow_redirects=False)

        def read(response) -> Deferred:
            return response.content().addCallback(
                lambda body: check(Reply(response.code, response.headers, body)))
        d.addCallback(read)
        pending = Pending(self, d)
        self.flush()
        return pending

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict | None = None) -> Reply:
        return self.send(method, path, body, headers).reply()

    def get(self, path: str, headers: dict | None = None) -> Reply:
        return self.request("GET", path, None, headers)

    def post(self, path: str, body: bytes | str | Any, headers: dict | None = None) -> Reply:
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        return self.request("POST", path, body,
                            {"content-type": "application/json", **(headers or {})})


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


class Rpc:
    """JSON-RPC 2.0 calls over ``Http``."""

    def __init__(self, http: Http, path: str = "/api/jsonrpc") -> None:
        self.http = http
        self.path = path
        self.ids = 0

    def body(self, method: str, params: Any = None) -> bytes:
        self.ids += 1
        call: dict = {"jsonrpc": "2.0", "method": method, "id": self.ids}
        if params is not None:
            call["params"] = params
        return json.dumps(call).encode()

    def send(self, method: str, *params: Any) -> Pending:
        return self.http.send("POST", self.path, self.body(method, list(params)),
                              {"content-type": "application/json"})

    @staticmethod
    def unwrap(answer: dict) -> Any:
        assert answer.get("jsonrpc") == "2.0", answer
        if "error" in answer:
            raise RpcError(answer["error"]["code"], answer["error"]["message"])
        return answer["result"]

    def __call__(self, method: str, *params: Any) -> Any:
        reply = self.send(method, *params).reply()
        assert reply.code == 200, reply
        assert reply.content_type.startswith("application/json"), reply
        return self.unwrap(reply.json())

    def error(self, method: str, *params: Any) -> RpcError:
        """The error a call must fail with."""
        try:
            result = self(method, *params)
        except RpcError as e:
            return e
        raise AssertionError(f"{method} succeeded with {result!r}")


class Raw:
    """Bytes into the node's real Site (body limit included), from any address."""

    def __init__(self, site: Any, host: str = "127.0.0.1") -> None:
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport
        self.transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
                                         peerAddress=IPv4Address("TCP", host, 40000))
        self.protocol = site.buildProtocol(self.transport.getPeer())
        self.protocol.makeConnection(self.transport)

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    @property
    def closing(self) -> bool:
        return self.transport.disconnecting

    def response(self) -> Reply:
        """The first complete response written so far."""
        replies = self.responses()
        assert replies, f"no complete response yet: {self.transport.value()!r}"
        return replies[0]

    def responses(self) -> list[Reply]:
        """Every complete response written on the connection so far, in order."""
        from twisted.web.http_headers import Headers
        data = self.transport.value()
        out = []
        while True:
            head, sep, rest = data.partition(b"\r\n\r\n")
            if not sep:
                return out
            lines = head.split(b"\r\n")
            code = int(lines[0].split()[1])
            headers = Headers()
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers.addRawHeader(name.strip(), value.strip())
            if (headers.getRawHeaders(b"transfer-encoding") or [b""])[0].lower() == b"chunked":
                body = b""
                while True:
                    size, _, rest = rest.partition(b"\r\n")
                    if not size:
                        return out
                    n = int(size, 16)
                    if n == 0:
                        rest = rest[2:]
                        break
                    body, rest = body + rest[:n], rest[n + 2:]
            else:
                length = int((headers.getRawHeaders(b"content-length") or [b"0"])[0])
                if len(rest) < length:
                    return out
                body, rest = rest[:length], rest[length:]
            out.append(check(Reply(code, headers, body)))
            data = rest


def http_request(method: str, path: str, body: bytes = b"", headers: dict | None = None,
                 length: int | None = None) -> bytes:
    """An HTTP/1.1 request's bytes; ``length`` may claim another Content-Length."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
