"""``pushengine-segment``: upload, list and delete audience segments.

    pushengine-segment upload contacts.csv --name vip [--hashed md5|sha256]
    pushengine-segment list
    pushengine-segment delete vip

``--url`` (default http://127.0.0.1:8080, or PUSHENGINE_URL) is the engine;
``--key`` (or PUSHENGINE_PUBLISH_KEY) the publish key. The file is streamed
from disk with its Content-Length, a progress bar on stderr when it is a
terminal (or with --progress). Exit status: 0 done, 1 refused by the engine
(the error is printed), 2 usage or connection errors.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from typing import IO, Any, BinaryIO
from urllib.parse import quote, urlsplit

BLOCK = 256 * 1024


class Progress:
    """A file object for http.client that draws a bar as it is read."""

    def __init__(self, f: BinaryIO, size: int, out: IO[str], show: bool) -> None:
        self.f, self.size, self.out, self.show = f, size, out, show
        self.sent = 0
        self.started = time.monotonic()
        self.drawn = 0.0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(BLOCK if n is None or n < 0 else max(n, BLOCK))
        self.sent += len(data)
        now = time.monotonic()
        if self.show and (now - self.drawn > 0.1 or not data):
            self.drawn = now
            self.draw(now)
        return data

    def draw(self, now: float) -> None:
        share = self.sent / self.size if self.size else 1.0
        rate = self.sent / max(now - self.started, 1e-6) / (1 << 20)
        bar = "#" * int(share * 30)
        self.out.write(f"\r[{bar:<30}] {share:6.1%} {self.sent >> 20} of "
                       f"{self.size >> 20} MiB, {rate:.1f} MiB/s")
        if self.sent >= self.size:
            self.out.write("\n")
        self.out.flush()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url must be http(s)://host[:port], not {url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), parts.path.rstrip("/")


def request(args: argparse.Namespace, method: str, path: str, body: Progress | None = None,
            size: int | None = None) -> tuple[int, Any]:
    conn, base = _connection(args.url, args.timeout)
    headers = {"accept": "application/json"}
    if args.key:
        headers["authorization"] = f"Bearer {args.key}"
    if body is not None:
        headers["content-type"] = "text/csv"
        headers["content-length"] = str(size)
    conn.request(method, base + path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, {"error": {"code": "http", "message": data[:200].decode(
            "utf-8", "replace")}}


def main(argv: list[str] | None = None, out: IO[str] | None = None,
         err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = argparse.ArgumentParser(prog="pushengine-segment", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PUSHENGINE_URL",
                                                        "http://127.0.0.1:8080"))
    parser.add_argument("--key", default=os.environ.get("PUSHENGINE_PUBLISH_KEY"))
    parser.add_argument("--timeout", type=float, default=3600.0)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upload", help="upload a contact file (CSV) as a segment")
    up.add_argument("file")
    up.add_argument("--name", required=True)
    up.add_argument("--hashed", choices=["md5", "sha256"])
    up.add_argument("--progress", action="store_true", default=None,
                    help="draw the progress bar even when stderr is not a terminal")
    commands.add_parser("list", help="list the segments with their counts")
    rm = commands.add_parser("delete", help="delete a segment")
    rm.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "upload":
            size = os.path.getsize(args.file)
            show = args.progress if args.progress is not None else err.isatty()
            query = f"?hashed={args.hashed}" if args.hashed else ""
            with open(args.file, "rb") as f:
                status, body = request(args, "POST", f"/api/segments/{quote(args.name)}"
                                       + query, Progress(f, size, err, show), size)
        elif args.command == "list":
            status, body = request(args, "GET", "/api/segments")
        else:
            status, body = request(args, "DELETE", f"/api/segments/{quote(args.name)}")
    except (OSError, ValueError, http.client.HTTPException) as e:
        err.write(f"pushengine-segment: {e}\n")
        return 2
    if status != 200:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        if isinstance(error, dict):
            where = f" (line {error['line']})" if error.get("line") else ""
            err.write(f"pushengine-segment: {error.get('code', status)}: "
                      f"{error.get('message', '')}{where}\n")
        else:
            err.write(f"pushengine-segment: HTTP {status}: {error}\n")
        return 1
    if args.command == "list":
        for s in body["segments"]:
            out.write(f"{s['name']}\t{s.get('valid', 0)} entries\t(invalid {s.get('invalid', 0)}, "
                      f"duplicates {s.get('duplicates', 0)}, {s.get('hashed', 'sha256')})\n")
    else:
        out.write(json.dumps(body) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
