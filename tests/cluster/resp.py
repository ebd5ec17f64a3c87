"""A tiny blocking Redis client for tests and benchmarks (RESP2 over a socket):
flushing a test database, reading what a node wrote."""
from __future__ import annotations

import socket
from typing import Any


class RespError(Exception):
    pass


class Resp:
    def __init__(self, host: str = "127.0.0.1", port: int = 6379, db: int = 0,
                 timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        if db:
            self("SELECT", db)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Resp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __call__(self, *args: Any) -> Any:
        parts = [str(a).encode() if not isinstance(a, bytes) else a for a in args]
        out = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(out)
        return self._reply()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("Redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("Redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("utf-8", "replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RespError(f"unexpected reply {line!r}")

    def hgetall(self, key: str) -> dict[str, str]:
        flat = self("HGETALL", key)
        return dict(zip(flat[::2], flat[1::2]))
