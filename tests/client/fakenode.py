"""A scripted stand-in for a node: answers given in advance, requests kept.

The same script serves as a twisted.web resource (for ``treq.testing.StubTreq``
and ``RequestTraversalAgent``) and as a loopback HTTP server in a thread (for
the synchronous flavour's real sockets).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from twisted.web.resource import Resource


@dataclass
class Seen:
    """A request as the fake node received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    body: Any = None                 # JSON-able, or bytes as they are
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False              # drop the connection after it (sync server only)

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


def rpc_result(result: Any) -> Answer:
    return Answer(200, {"jsonrpc": "2.0", "result": result, "id": 1})


def rpc_error(code: int, message: str, status: int = 200, **headers: str) -> Answer:
    return Answer(status, {"jsonrpc": "2.0", "error": {"code": code, "message": message},
                           "id": 1}, headers)


class FakeNode:
    """Answers in order (the last one again when they run out, or what
    ``respond(seen)`` gives); every request kept in ``seen``."""

    def __init__(self, *answers: Answer, respond: Callable[[Seen], Answer] | None = None
                 ) -> None:
        self.answers = list(answers)
        self.respond = respond
        self.seen: list[Seen] = []
        self.connections = 0             # accepted by the loopback server
        self.lock = threading.Lock()

    def answer(self, seen: Seen) -> Answer:
        with self.lock:
            self.seen.append(seen)
            if self.respond is not None:
                return self.respond(seen)
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    # -- as a twisted.web resource ---------------------------------------------------
    def resource(self) -> Resource:
        node = self

        class Leaf(Resource):
            isLeaf = True

            def render(self, request: Any) -> bytes:
                headers = {k.decode().lower(): v[-1].decode()
                           for k, v in request.requestHeaders.getAllRawHeaders()}
                answer = node.answer(Seen(request.method.decode(), request.uri.decode(),
                                          headers, request.content.read()))
                request.setResponseCode(answer.status)
                request.setHeader(b"content-type", b"application/json")
                for name, value in answer.headers.items():
                    request.setHeader(name.encode(), value.encode())
                return answer.payload()
        return Leaf()

    # -- as a loopback server ---------------------------------------------------------
    @contextmanager
    def serve(self) -> Iterator[str]:
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with node.lock:
                    node.connections += 1

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def _handle(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = node.answer(Seen(self.command, self.path, headers, self._body()))
                data = answer.payload()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                if answer.close:        # as a node closing an idle connection: no header says so
                    self.close_connection = True

            do_GET = do_POST = do_DELETE = _handle

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                  daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
