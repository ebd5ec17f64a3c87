"""Client addresses through trusted proxies, as the edge's policy finds them
for a twisted.web request."""
from __future__ import annotations

import pytest
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.web.http_headers import Headers

from pushengine.web.clients import ClientAddresses, parse_networks
from pushengine.web.policy import HttpPolicy


class FakeRequest:
    def __init__(self, peer: str, xff: list[str] | None = None, **headers: str) -> None:
        self.peer = peer
        self.requestHeaders = Headers()
        for line in xff or []:
            self.requestHeaders.addRawHeader(b"x-forwarded-for", line.encode())
        for name, value in headers.items():
            self.requestHeaders.addRawHeader(name.replace("_", "-").encode(), value.encode())

    def getClientAddress(self):
        if ":" in self.peer:
            return IPv6Address("TCP", self.peer, 1234)
        return IPv4Address("TCP", self.peer, 1234)


class Found:
    """What the policy finds of a request, with these trusted proxies."""

    def __init__(self, clients: ClientAddresses) -> None:
        self.policy = HttpPolicy(clients=clients)

    def of(self, request: FakeRequest) -> str:
        return self.policy.request_caller(request).address

    def is_loopback(self, request: FakeRequest) -> bool:
        return self.policy.request_caller(request).loopback


TRUSTED = Found(ClientAddresses(parse_networks("127.0.0.1/32, 10.0.0.0/8, ::1")))


@pytest.mark.parametrize("peer, xff, client", [
    ("203.0.113.5", ["1.2.3.4"], "203.0.113.5"),          # untrusted peer: header ignored
    ("127.0.0.1", ["1.2.3.4"], "1.2.3.4"),
    ("127.0.0.1", ["1.2.3.4, 198.51.100.7"], "198.51.100.7"),    # the last hop
    ("127.0.0.1", ["1.2.3.4", "198.51.100.7"], "198.51.100.7"),  # several header lines
    ("127.0.0.1", ["198.51.100.7, 10.1.1.1"], "198.51.100.7"),   # trusted hops skipped
    ("127.0.0.1", ["garbage"], "127.0.0.1"),
    ("127.0.0.1", [], "127.0.0.1"),
    ("::1", ["2001:db8::1"], "2001:db8::1"),
    ("127.0.0.1", ["[2001:db8::2]:443"], "2001:db8::2"),
    ("127.0.0.1", ["198.51.100.9:5555"], "198.51.100.9"),
])
def test_client_address(peer, xff, client):
    assert TRUSTED.of(FakeRequest(peer, xff)) == client


def test_without_trusted_proxies_the_peer_is_the_client():
    assert Found(ClientAddresses()).of(FakeRequest("127.0.0.1", ["1.2.3.4"])) == "127.0.0.1"


def test_loopback_through_an_untrusted_proxy_is_not_loopback():
    plain = Found(ClientAddresses())
    assert plain.is_loopback(FakeRequest("127.0.0.1"))
    assert not plain.is_loopback(FakeRequest("127.0.0.1", ["203.0.113.1"]))
    assert not plain.is_loopback(FakeRequest("127.0.0.1", x_real_ip="203.0.113.1"))
    assert not plain.is_loopback(FakeRequest("203.0.113.1"))
    assert TRUSTED.is_loopback(FakeRequest("127.0.0.1", ["127.0.0.1"]))
    assert not TRUSTED.is_loopback(FakeRequest("127.0.0.1", ["203.0.113.1"]))


def test_bad_networks_are_named():
    with pytest.raises(ValueError, match="'nope'"):
        parse_networks("10.0.0.0/8, nope")
