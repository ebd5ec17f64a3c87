"""Static files (the JS client and the example pages) without HTML error pages."""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.static import File

from pushengine.web.policy import HttpPolicy, path_error


class JsonError(Resource):
    """An error answer of a path that is not the API's: ``{"error": "..."}``."""

    isLeaf = True

    def __init__(self, code: int, message: str) -> None:
        super().__init__()
        self.code = code
        self.body = path_error(message)

    def render(self, request: Request) -> bytes:
        return HttpPolicy.path_answer(request, self.code, self.body)


class StaticFiles(File):
    """A File that answers a missing path or a directory without index with JSON,
    and never serves anything outside its folder: a symlink that leads out of
    it is answered as missing."""

    # twisted.web's own are HTML pages
    childNotFound = JsonError(404, "not found")  # type: ignore[assignment]
    forbidden = JsonError(403, "forbidden")  # type: ignore[assignment]
    _root: str | None = None

    @property
    def root(self) -> str:
        """The real path of the folder this tree of files was made for."""
        if self._root is None:
            self._root = os.path.realpath(self.path)
        return self._root

    def getChild(self, path: bytes, request: Request) -> Resource:
        if b"\x00" in path:          # no file has it; the file system would raise
            return self.childNotFound
        try:
            path.decode("utf-8")
        except UnicodeDecodeError:   # File would log it as an error
            return self.childNotFound
        child: Resource = super().getChild(path, request)
        if isinstance(child, File) and not self._inside(child.path):
            return self.childNotFound
        return child

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep)

    def createSimilarFile(self, path: str) -> StaticFiles:
        child: StaticFiles = super().createSimilarFile(path)
        child._root = self.root
        return child

    def directoryListing(self) -> JsonError:
        return JsonError(404, "not found")

    def redirect(self, request: Request) -> bytes:
        """A directory asked for without its slash: a relative redirect (the
        request's own path, never its Host), without an HTML body."""
        query = request.uri.partition(b"?")[2]
        location = b"/" + request.path.lstrip(b"/") + b"/"
        request.redirect(location + (b"?" + query if query else b""))
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
