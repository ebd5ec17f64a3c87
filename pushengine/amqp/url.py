"""``amqp://user:pass@host:5672/vhost`` URLs, as RabbitMQ documents them."""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

DEFAULT_PORT = 5672


@dataclass(frozen=True)
class AmqpUrl:
    """Where and as whom to connect; ``str()`` never shows the password."""

    host: str = "localhost"
    port: int = DEFAULT_PORT
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    vhost: str = "/"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        vhost = "" if self.vhost == "/" else quote(self.vhost, safe="")
        return f"amqp://{quote(self.username, safe='')}@{host}:{self.port}/{vhost}"


def parse_amqp_url(url: str) -> AmqpUrl:
    """Parse an AMQP URL; raise ValueError with the reason when it is not one.

    The vhost is the path without its leading slash, percent-decoded (so
    ``%2F`` is the default vhost ``/``); an empty path or ``/`` means ``/``.
    User and password default to guest/guest, the port to 5672.  ``amqps``
    is refused: TLS is not supported by this adapter.
    """
    parts = urlsplit(url.strip())
    if parts.scheme == "amqps":
        raise ValueError("amqps:// (TLS) is not supported; use amqp://")
    if parts.scheme != "amqp":
        raise ValueError(f"not an amqp:// URL: {url!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"bad port in AMQP URL {url!r}") from None
    path = parts.path
    if path in ("", "/"):
        vhost = "/"
    else:
        raw = path[1:]
        if "/" in raw:
            raise ValueError(
                f"the vhost in {url!r} holds a '/': write it as %2F")
        vhost = unquote(raw)
    return AmqpUrl(
        host=parts.hostname or "localhost",
        port=port,
        username=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=vhost,
    )
