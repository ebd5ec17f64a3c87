"""``/admin/``: the admin page's static files (``static/admin/``).

The files hold no secret: the page asks for the key in a form and sends it
in the body of its calls. A URL that seems to carry a key (a query
parameter named like one) is refused, so that nobody learns to put the key
where access logs and browser histories keep it. The answers forbid
framing, caching and referrers.
"""
from __future__ import annotations

import re

from twisted.web.resource import Resource
from twisted.web.server import Request

from pushengine.web.policy import HttpPolicy, path_error
from pushengine.web.static import StaticFiles, static_root

# query parameter names that look like a secret
SECRET_NAMES = re.compile(rb"key|token|secret|pass|auth", re.IGNORECASE)
HEADERS = {
    b"cache-control": b"no-store",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"content-security-policy": b"default-src 'self'; connect-src 'self' ws: wss:; "
                                b"img-src 'self' data:; style-src 'self'; "
                                b"frame-ancestors 'none'; form-action 'self'",
}

KEY_IN_URL = path_error("the admin key never goes in a URL (URLs are logged): "
                        "open /admin/ and enter it in the page")


class AdminPage:
    def __init__(self) -> None:
        self.files = StaticFiles(str(static_root() / "admin"))
        self.files.indexNames = ["index.html"]

    def serve(self, request: Request) -> Resource | bytes:
        """The resource that answers ``request`` (a file), or a JSON refusal."""
        for name, value in HEADERS.items():
            request.setHeader(name, value)
        if any(SECRET_NAMES.search(name) for name in (request.args or {})):
            return HttpPolicy.path_answer(request, 400, KEY_IN_URL)
        return self.files
