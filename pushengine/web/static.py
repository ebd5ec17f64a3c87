"""Static files (the JS client and the example pages) without HTML error pages."""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from twisted.web.resource import Resource
from twisted.web.static import File


class JsonError(Resource):
    isLeaf = True

    def __init__(self, code: int, message: str) -> None:
        super().__init__()
        self.code = code
        self.message = message

    def render(self, request) -> bytes:
        request.setResponseCode(self.code)
        request.setHeader(b"content-type", b"application/json")
        return ('{"error":{"code":%d,"message":"%s"}}' % (self.code, self.message)).encode()


class StaticFiles(File):
    """A File that answers a missing path or a directory without index with JSON."""

    childNotFound = JsonError(404, "not found")
    forbidden = JsonError(403, "forbidden")

    def getChild(self, path: bytes, request):
        if b"\x00" in path:          # no file has it; the file system would raise
            return self.childNotFound
        return super().getChild(path, request)

    def directoryListing(self):
        return JsonError(404, "not found")

    def redirect(self, request) -> bytes:
        """A directory asked for without its slash: redirect, without an HTML body."""
        path, sep, query = request.uri.partition(b"?")
        request.redirect(path + b"/" + sep + query)
        request.setHeader(b"content-length", b"0")
        return b""


StaticFiles.contentTypes = dict(File.contentTypes, **{
    ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml", ".json": "application/json"})


def static_root() -> Path:
    """The ``static/`` folder: beside the package in a checkout, or where
    ``pip install`` put the data files."""
    here = Path(__file__).resolve().parent.parent.parent / "static"
    if (here / "js").is_dir():
        return here
    for base in (sysconfig.get_path("data"), sys.prefix):
        candidate = Path(base) / "share" / "pushengine" / "static"
        if candidate.is_dir():
            return candidate
    return here
