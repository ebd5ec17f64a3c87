"""The one strict reader of a decimal number that arrives as text in a header.

Numbers in headers (an AMQP ``timestamp_ms``, SSE ``Last-Event-ID``,
``Content-Length``, a chunk size) are ASCII digits only, of bounded length.
``str.isdigit`` and ``int`` are too lenient for them: ``isdigit`` accepts
``"²"`` (which ``int`` then refuses with ValueError), ``int`` accepts
``"١٢٣"``, ``" 12"``, ``"+12"``, ``"1_000"``, and raises ValueError past
4,300 digits. ``parse_decimal`` answers an ``int`` or ``None``, never raises.
"""
from __future__ import annotations

_DIGITS = frozenset(b"0123456789")


def parse_decimal(text: str | bytes, max_digits: int) -> int | None:
    """The value of ``text`` when it is 1 to ``max_digits`` ASCII digits
    (``0``-``9``; leading zeros allowed), else None. No sign, no spaces, no
    underscores, no other script's digits."""
    if type(text) is bytes:
        # bytes.isdigit is true of ASCII digits only (the common case, fast)
        return int(text) if 0 < len(text) <= max_digits and text.isdigit() else None
    if isinstance(text, str):
        # str.isdigit is true of ASCII digits only in an ASCII string
        return (int(text) if 0 < len(text) <= max_digits and text.isascii()
                and text.isdigit() else None)
    if isinstance(text, (bytes, bytearray)):
        raw = bytes(text)
    else:
        return None
    if not 0 < len(raw) <= max_digits or not _DIGITS.issuperset(raw):
        return None
    return int(raw)
