"""Who sent a call, as the transport knows it, for methods that must know.

Transports build one per request (HTTP) or per connection (WebSocket) and
pass it to ``Dispatcher.handle``; a method declared ``with_caller=True``
receives it. The core never sees a transport: only this small value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Caller:
    address: str                      # the client's address (through trusted proxies)
    loopback: bool = False            # a client on this machine, not relayed by a proxy
    bearer: str | None = None         # the token of ``Authorization: Bearer <token>``
    from_page: bool = False           # the request carried an Origin (a web page sent it)
    # a connection that can carry the session's events itself (a WebSocket):
    # session.create and session.attach attach it to the session
    channel: Any = None
    # the W3C ``traceparent`` the request carried (a WebSocket's: its upgrade
    # request's), read only when the node exports traces (``--otlp-endpoint``)
    traceparent: str | None = None
