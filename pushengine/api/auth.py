"""API keys and JWT session authorization."""
from __future__ import annotations

import hmac
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import jwt

from pushengine.core.errors import NotAuthorized


class ApiKeys:
    """The keys a client must present; an empty set lets everybody in."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self.keys = frozenset(k for k in keys if k)

    @classmethod
    def from_options(cls, key: str | None, path: str | None) -> "ApiKeys":
        keys = [key] if key else []
        if path:
            for line in Path(path).read_text("utf-8").splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    keys.append(line)
        return cls(keys)

    @property
    def required(self) -> bool:
        return bool(self.keys)

    def allows(self, presented: str | None) -> bool:
        if not self.keys:
            return True
        if not presented:
            return False
        # bytes: compare_digest refuses str with non-ASCII characters
        given = presented.encode("utf-8", "surrogateescape")
        return any(hmac.compare_digest(given, k.encode("utf-8", "surrogateescape"))
                   for k in self.keys)


def normalize_user(sub: Any) -> Any:
    """JWT subjects are strings; a decimal one is the integer user id.

    Only the canonical form counts: ASCII digits without leading zeros, so
    that no other subject ("0042", "٤٢") becomes the same user as "42"."""
    if isinstance(sub, str) and sub.isascii() and sub.isdigit() and len(sub) < 19 \
            and (sub == "0" or sub[0] != "0"):
        return int(sub)
    return sub


class TokenVerifier:
    """Checks HS256 tokens signed with the shared secret."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret

    def user(self, token: Any) -> Any:
        return self.verify(token)[0]

    def verify(self, token: Any) -> tuple[Any, dict]:
        """The user and every claim of a good token (NotAuthorized otherwise)."""
        if not self.secret:
            raise NotAuthorized("authorization is not configured on this service")
        if not isinstance(token, str) or not token or len(token) > 8192:
            raise NotAuthorized("the token must be a non-empty string")
        try:
            claims = jwt.decode(token, self.secret, algorithms=["HS256"],
                                options={"require": ["sub"]})
        except jwt.ExpiredSignatureError:
            raise NotAuthorized("the token has expired") from None
        except jwt.InvalidTokenError as e:
            raise NotAuthorized(f"the token is not valid: {e}") from None
        return checked_user(claims)


def checked_user(claims: dict) -> tuple[Any, dict]:
    """The user of verified ``claims`` (NotAuthorized without one)."""
    user = normalize_user(claims.get("sub"))
    if user in ("", None):
        raise NotAuthorized("the token names no user")
    return user, claims


def remaining(claims: Mapping[str, Any], now: float | None = None) -> float | None:
    """The seconds a verified token's ``exp`` leaves (at least 0; None
    without ``exp``). ``exp`` is wall-clock time, as the verifier checked
    it; the session manager counts the seconds left on its own clock."""
    exp = claims.get("exp")
    if exp is None:
        return None
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or exp != exp:
        raise NotAuthorized("the token's exp must be a number")
    return max(0.0, float(exp) - (time.time() if now is None else now))
