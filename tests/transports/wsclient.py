"""A small blocking WebSocket client for tests (wsproto over a socket)."""
from __future__ import annotations

import json
import socket
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection, BytesMessage, CloseConnection, Message, Ping, RejectConnection,
    RejectData, Request, TextMessage)


class WsClient:
    def __init__(self, port: int, path: str = "/api/ws", headers: list | None = None,
                 timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.messages: list[Any] = []
        self.closed: CloseConnection | None = None
        self.rejected: int | None = None
        self.pings = 0
        self.ids = 0
        self.sock.sendall(self.ws.send(Request(host="127.0.0.1", target=path,
                                               extra_headers=headers or [])))
        while not self._pump(accepting=True):
            pass

    def _pump(self, accepting: bool = False) -> bool:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the server")
        self.ws.receive_data(data)
        done = False
        parts: list = []
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                done = True
            elif isinstance(event, (RejectConnection, RejectData)):
                if isinstance(event, RejectConnection):
                    self.rejected = event.status_code
                done = True
            elif isinstance(event, Message):
                parts.append(event.data)
                if event.message_finished:
                    data_ = parts[0][:0].join(parts) if parts else b""
                    parts = []
                    self.messages.append(json.loads(data_) if isinstance(event, TextMessage)
                                         else data_)
            elif isinstance(event, Ping):
                self.pings += 1
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.closed = event
                done = True
        return done or accepting is False

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(text)))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data)))

    def call(self, method: str, *params: Any) -> Any:
        """Send a call and wait for its answer (events that arrive meanwhile are kept)."""
        self.ids += 1
        my_id = self.ids
        self.send_text(json.dumps({"jsonrpc": "2.0", "id": my_id, "method": method,
                                   "params": list(params)}))
        answer = self.wait(lambda m: isinstance(m, dict) and m.get("id") == my_id)
        self.messages.remove(answer)
        return answer

    def wait(self, predicate, limit: int = 200) -> Any:
        for _ in range(limit):
            for m in self.messages:
                if predicate(m):
                    return m
            if self.closed is not None:
                raise ConnectionError(f"closed: {self.closed.code} {self.closed.reason}")
            self._pump()
        raise AssertionError("no such message")

    def events(self, count: int) -> list[dict]:
        """Wait until ``count`` events arrived; return them (and forget them)."""
        got: list[dict] = []
        for _ in range(400):
            while self.messages:
                m = self.messages[0]
                if isinstance(m, dict) and m.get("method") == "events":
                    got.extend(m["params"])
                    self.messages.pop(0)
                else:
                    break
            if len(got) >= count:
                return got
            self._pump()
        raise AssertionError(f"only {len(got)} events of {count}")

    def close(self) -> None:
        try:
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        except Exception:
            pass
        self.sock.close()
