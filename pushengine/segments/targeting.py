"""A session's contacts, hashed at ``session.authorize`` (SPEC section 15).

The JWT's ``email`` and ``phone`` claims are normalized as a contact file's
cells are (segments/parse.py) and kept only as digests: SHA-256 (what an
upload keeps) and MD5 (what a ``?hashed=md5`` upload holds). The raw values
are never stored nor logged.
"""
from __future__ import annotations

import hashlib
from typing import Any

from pushengine.segments.parse import normalize_email
from pushengine.segments.phones import normalize_phone


def contact_digests(claims: dict[str, Any]) -> tuple[bytes, ...]:
    """The digests of a token's valid ``email`` / ``phone`` claims."""
    found: list[bytes] = []
    for claim, normalize in (("phone", normalize_phone), ("email", normalize_email)):
        value = claims.get(claim)
        if isinstance(value, int) and not isinstance(value, bool) and claim == "phone":
            value = str(value)
        if not isinstance(value, str) or len(value) > 320:
            continue
        normalized = normalize(value)
        if normalized is None:
            continue
        data = normalized.encode("utf-8")
        found.append(hashlib.sha256(data).digest())
        found.append(hashlib.md5(data, usedforsecurity=False).digest())
    return tuple(found)
