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
from typing import Callable, Iterable, Sequence

from pushengine.api.caller import Caller

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(text: str | Iterable[str] | None) -> list[Network]:
    """``"127.0.0.1/32, 10.0.0.0/8"`` → networks; ValueError names a bad one."""
    if not text:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    networks: list[Network] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a CIDR network") from None
    return networks


def _address(text: str) -> Address | None:
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
    """Finds who sent a request: its address, through the trusted proxies,
    from its TCP peer and its headers (``HttpPolicy`` asks, for both fronts)."""

    def __init__(self, trusted: Iterable[Network] = ()) -> None:
        self.trusted = list(trusted)
        self._peers: dict[str, tuple[str, bool, bool]] = {}

    def _trusted(self, address: Address) -> bool:
        return any(address.version == n.version and address in n for n in self.trusted)

    def _peer(self, host: str) -> tuple[str, bool, bool]:
        """(address text, trusted proxy, loopback) of a TCP peer, remembered."""
        known = self._peers.get(host)
        if known is None:
            peer = _address(host)
            if peer is None:
                known = (host or "unknown", False, False)
            else:
                known = (str(peer), bool(self.trusted) and self._trusted(peer), peer.is_loopback)
            if len(self._peers) > 10_000:
                self._peers.clear()
            self._peers[host] = known
        return known

    def peer_address(self, host: str) -> tuple[str, bool]:
        """(address text, trusted proxy) of a TCP peer."""
        text, trusted, _ = self._peer(host)
        return text, trusted

    def resolve(self, host: str, forwarded_for: Sequence[bytes],
                relayed: bool) -> tuple[str, bool]:
        """(client address, loopback) for a peer ``host`` and the
        ``X-Forwarded-For`` lines of its request; ``relayed``: the request
        carries any forwarding header. A request relayed by a proxy that is
        not trusted is no loopback client: behind a reverse proxy on the
        same host the peer is loopback for every visitor."""
        text, trusted, loopback = self._peer(host)
        if not trusted:
            # an untrusted loopback peer relaying for someone is no loopback client
            return text, loopback and not relayed
        hops = [h for line in forwarded_for for h in line.decode("latin-1").split(",")]
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break                   # a malformed hop: trust nothing before it
            if not self._trusted(address):
                return str(address), address.is_loopback
        return text, loopback

    def caller(self, host: str, header: Callable[[bytes], Sequence[bytes] | None]) -> Caller:
        """Who sent a request from the TCP peer ``host``; ``header(name)``
        gives the request's values of a header (None when it has none): its
        address, whether it is loopback, the Bearer token it presented,
        whether a web page sent it."""
        address, loopback = self.resolve(host, header(b"x-forwarded-for") or [],
                                         any(header(h) is not None for h in _FORWARDING))
        auth = header(b"authorization")
        return Caller(address, loopback, bearer_token(auth[0] if auth else None),
                      header(b"origin") is not None)


def bearer_token(header: bytes | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    if not header:
        return None
    scheme, _, token = header.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


_FORWARDING = (b"x-forwarded-for", b"forwarded", b"x-real-ip")
# every request header ClientAddresses.caller reads: a request with none of them has the
# same Caller as any other from the same peer
CALLER_HEADERS = frozenset(_FORWARDING + (b"authorization", b"origin"))
