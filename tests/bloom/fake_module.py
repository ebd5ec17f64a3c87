"""A tiny RESP server that answers the bloom module's BF.* commands (from an
in-process filter), as a Redis with the module does: to test the Redis
backend's use of a server's own BF.* commands where no such server is."""
from __future__ import annotations

from typing import Any

from twisted.internet import protocol

from pushengine.bloom.memory import MemoryBloom
from tests.deferreds import fired


def _bulk(value: Any) -> bytes:
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, Exception):
        return b"-ERR %s\r\n" % str(getattr(value, "message", value)).encode()
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(_bulk(v) for v in value)
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class ModuleProtocol(protocol.Protocol):
    def __init__(self, server: "FakeModuleServer") -> None:
        self.server = server
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while True:
            command, rest = self._parse(self.buffer)
            if command is None:
                return
            self.buffer = rest
            self.transport.write(self.server.answer(command))

    @staticmethod
    def _parse(data: bytes) -> tuple[list[bytes] | None, bytes]:
        if not data.startswith(b"*") or b"\r\n" not in data:
            return None, data
        head, rest = data.split(b"\r\n", 1)
        args = []
        for _ in range(int(head[1:])):
            if b"\r\n" not in rest:
                return None, data
            length, rest = rest.split(b"\r\n", 1)
            n = int(length[1:])
            if len(rest) < n + 2:
                return None, data
            args.append(rest[:n])
            rest = rest[n + 2:]
        return args, rest


class FakeModuleServer(protocol.Factory):
    def __init__(self) -> None:
        self.bloom = MemoryBloom()
        self.commands: list[str] = []

    def buildProtocol(self, addr: Any) -> ModuleProtocol:
        return ModuleProtocol(self)

    def _run(self, d: Any) -> Any:
        try:
            return fired(d)
        except Exception as e:  # noqa: BLE001 - answered as the module's error
            return e

    def answer(self, args: list[bytes]) -> bytes:
        name = args[0].decode().upper()
        self.commands.append(name)
        text = [a.decode("utf-8", "replace") for a in args[1:]]
        if name in ("SELECT", "AUTH"):
            return b"+OK\r\n"
        if name == "PEXPIRE":
            return b":1\r\n"
        if name == "BF.EXISTS":
            return _bulk(self._run(self.bloom.exists(text[0], text[1])))
        if name == "BF.MEXISTS":
            return _bulk(self._run(self.bloom.mexists(text[0], text[1:])))
        if name == "BF.RESERVE":
            upper = [t.upper() for t in text]
            expansion = int(text[upper.index("EXPANSION") + 1]) if "EXPANSION" in upper else None
            result = self._run(self.bloom.reserve(text[0], float(text[1]), int(text[2]),
                                                  expansion, "NONSCALING" in upper))
            return b"+OK\r\n" if result == "OK" else _bulk(result)
        if name == "BF.INSERT":
            key, options, i = text[0], {}, 1
            while text[i].upper() != "ITEMS":
                word = text[i].upper()
                if word in ("NOCREATE", "NONSCALING"):
                    options[word.lower()] = True
                    i += 1
                else:
                    value = float(text[i + 1]) if word == "ERROR" else int(text[i + 1])
                    options[word.lower()] = value
                    i += 2
            return _bulk(self._run(self.bloom.insert(key, text[i + 1:], **options)))
        if name == "BF.INFO":
            info = self._run(self.bloom.info(text[0]))
            if isinstance(info, Exception):
                return _bulk(info)
            return _bulk([x for pair in info.items() for x in pair])
        return b"-ERR unknown command '%s'\r\n" % name.encode()
