"""Who a client is: its address, seen through trusted reverse proxies.

A client's address is the TCP peer of its connection. Behind a reverse proxy
every peer is the proxy (on the same host: 127.0.0.1, which would make every
visitor "loopback"); when the peer is one of ``--trusted-proxies`` (CIDRs),
the address is taken from ``X-Forwarded-For`` instead: the last address in it
that is not itself a trusted proxy (with a single proxy, simply the last one,
which that proxy appended). A header from an untrusted peer is ignored: any
client can write one.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable

from pushengine.caller import Caller

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str | Iterable[str] | None) -> list[Network]:
    """``"127.0.0.1/32, 10.0.0.0/8"`` → networks; ValueError names a bad one."""
    if not text:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    networks = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a CIDR network") from None
    return networks


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:          # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:                         # v4:port
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


class ClientAddresses:
    """Finds the client address of a twisted.web request."""

    def __init__(self, trusted: Iterable[Network] = ()) -> None:
        self.trusted = list(trusted)

    def _trusted(self, address) -> bool:
        return any(address.version == n.version and address in n for n in self.trusted)

    def of(self, request) -> str:
        """The client's address as text (the peer's when nothing better is known)."""
        host = getattr(request.getClientAddress(), "host", None) or ""
        peer = _address(host)
        if peer is None:
            return host or "unknown"
        if not self.trusted or not self._trusted(peer):
            return str(peer)
        headers = request.requestHeaders.getRawHeaders(b"x-forwarded-for") or []
        hops = [h for line in headers for h in line.decode("latin-1").split(",")]
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break                   # a malformed hop: trust nothing before it
            if not self._trusted(address):
                return str(address)
        return str(peer)

    def caller(self, request) -> Caller:
        """Who sent ``request``: its address, whether it is loopback, the
        Bearer token it presented, whether a web page sent it."""
        auth = request.requestHeaders.getRawHeaders(b"authorization")
        bearer = None
        if auth:
            scheme, _, token = auth[0].decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
        return Caller(self.of(request), self.is_loopback(request), bearer,
                      request.requestHeaders.hasHeader(b"origin"))

    def is_loopback(self, request) -> bool:
        """A client on this machine. A request relayed by a proxy that is not
        trusted (it carries forwarding headers) is not: behind a reverse
        proxy on the same host the peer is loopback for every visitor."""
        address = _address(self.of(request))
        if address is None or not address.is_loopback:
            return False
        peer = _address(getattr(request.getClientAddress(), "host", None) or "")
        if peer is not None and self._trusted(peer):
            return True
        return not any(request.requestHeaders.hasHeader(h) for h in _FORWARDING)


_FORWARDING = (b"x-forwarded-for", b"forwarded", b"x-real-ip")
