"""The backend path a channel page sends its messages to (a demo).

    PUSHENGINE_URL=http://127.0.0.1:8080 PUSHENGINE_PUBLISH_KEY=... \\
        python docs/recipes/channels_backend.py --port 9000 --page-origin http://127.0.0.1:8080
    open http://127.0.0.1:8080/examples/channels.html?channel=general&send=http://127.0.0.1:9000/send

A page cannot publish to the engine: it cannot hold the publish key, and
``/api/publish`` refuses any request that carries an ``Origin``. It posts
``{"channel", "author", "text"}`` here instead; this backend checks the
request, builds the ``Message`` (id, time, ``public: true``) and publishes it
with ``pushengine.client.SyncClient`` and the publish key, which never leaves
the server. A real site does the same in its own framework, behind its own
login: it takes the author from the signed-in user (not from the form, as
this demo does), limits how often each user may post, and keeps the route on
the site's origin (``?send=/chat/send``), so that no CORS is needed.

Only the page's origin (``--page-origin``) may post: its ``Origin`` header
is checked (a form on another site cannot post in a visitor's name) and
answered with ``Access-Control-Allow-Origin``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pushengine.client import PushengineError, RateLimited, SyncClient

CHANNEL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_BODY = 4096


def message(channel: str, author: str, text: str, now_ms: int) -> dict[str, Any]:
    """The Message a post becomes: an id that sorts with its time, the time
    in milliseconds (the recipe's order), public."""
    return {"id": f"{channel}-{now_ms}-{secrets.token_hex(4)}", "channel": channel,
            "author": author, "text": text, "sent_at": now_ms, "public": True}


def check(post: Any) -> tuple[str, str, str]:
    """``(channel, author, text)`` of a post; ValueError saying what is wrong."""
    if not isinstance(post, dict):
        raise ValueError("send a JSON object {channel, author, text}")
    channel, author, text = post.get("channel"), post.get("author"), post.get("text")
    if not isinstance(channel, str) or not CHANNEL.match(channel):
        raise ValueError("channel: 1 to 64 letters, digits, '_', '.' or '-'")
    if not isinstance(author, str) or not 1 <= len(author.strip()) <= 40:
        raise ValueError("author: 1 to 40 characters")
    if not isinstance(text, str) or not 1 <= len(text.strip()) <= 500:
        raise ValueError("text: 1 to 500 characters")
    return channel, author.strip(), text.strip()


def make_server(node: SyncClient, page_origin: str, port: int = 0,
                host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """The demo backend: ``POST /send`` publishes one message through ``node``."""

    class Send(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            if self.headers.get("Origin") == page_origin:
                self.send_header("Access-Control-Allow-Origin", page_origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Vary", "Origin")
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_OPTIONS(self) -> None:           # the CORS preflight of a JSON POST
            if self.path != "/send" or self.headers.get("Origin") != page_origin:
                return self._answer(403, {"error": "not from the channel page"})
            self.send_response(204)
            self.send_header("Access-Control-Allow-Origin", page_origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Access-Control-Allow-Methods", "POST")
            self.send_header("Access-Control-Allow-Headers", "content-type")
            self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            if self.path != "/send":
                return self._answer(404, {"error": "not found"})
            if self.headers.get("Origin") != page_origin:
                return self._answer(403, {"error": "not from the channel page"})
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                return self._answer(413, {"error": f"at most {MAX_BODY} bytes"})
            try:
                channel, author, text = check(json.loads(self.rfile.read(int(length))))
            except ValueError as e:
                return self._answer(400, {"error": str(e)})
            msg = message(channel, author, text, time.time_ns() // 1_000_000)
            try:
                node.upsert("Message", msg)
            except RateLimited:
                return self._answer(429, {"error": "too many messages; try again"})
            except PushengineError as e:
                return self._answer(503, {"error": f"the engine refused: {e.message}"})
            self._answer(200, {"id": msg["id"]})

    return ThreadingHTTPServer((host, port), Send)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--page-origin", default="http://127.0.0.1:8080",
                        help="the origin that serves the channel page")
    parser.add_argument("--url", default=os.environ.get("PUSHENGINE_URL",
                                                        "http://127.0.0.1:8080"))
    args = parser.parse_args()
    node = SyncClient(args.url, publish_key=os.environ.get("PUSHENGINE_PUBLISH_KEY"))
    server = make_server(node, args.page_origin, args.port)
    print(f"POST http://127.0.0.1:{server.server_address[1]}/send publishes to {args.url}")
    server.serve_forever()


if __name__ == "__main__":
    main()
