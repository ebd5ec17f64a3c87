"""API keys and JWT session authorization."""
from __future__ import annotations

import binascii
import hmac
import json
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import jwt
from jwt.utils import base64url_decode

from pushengine.core import strictjson
from pushengine.core.errors import NotAuthorized

#: the registered claims that are times (RFC 7519 NumericDate, seconds since the epoch)
TIME_CLAIMS = ("exp", "nbf", "iat")
#: the latest time such a claim may name: the last second of the year 9999
MAX_TIME = 253_402_300_799


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


#: what a key of a JSON Web Key Set may verify: its type (and curve) → the one algorithm
JWKS_ALGORITHMS: dict[tuple[Any, Any], str] = {("RSA", None): "RS256", ("EC", "P-256"): "ES256"}


def load_jwks(text: str) -> dict[str, jwt.PyJWK]:
    """The public keys of a JSON Web Key Set, by ``kid``: RSA keys verify
    RS256 and P-256 keys ES256, nothing else. ValueError for a set that is
    not one, a key without ``kid``, a private or symmetric key, a key whose
    ``alg`` is another, or two keys with one ``kid``."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list) \
            or not data["keys"]:
        raise ValueError('a JSON Web Key Set is an object with a non-empty "keys" list')
    keys: dict[str, jwt.PyJWK] = {}
    for n, jwk in enumerate(data["keys"]):
        if not isinstance(jwk, dict):
            raise ValueError(f"key {n} is not an object")
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid:
            raise ValueError(f"key {n} has no kid")
        if kid in keys:
            raise ValueError(f"two keys have the kid {kid!r}")
        kty = jwk.get("kty")
        alg = JWKS_ALGORITHMS.get((kty, jwk.get("crv") if kty == "EC" else None))
        if alg is None:
            raise ValueError(f"key {kid!r}: only RSA keys (RS256) and P-256 EC keys "
                             f"(ES256) verify tokens")
        if "d" in jwk:
            raise ValueError(f"key {kid!r} is a private key: give its public part only")
        if jwk.get("alg", alg) != alg:
            raise ValueError(f"key {kid!r}: a {kty} key verifies {alg} only")
        try:
            keys[kid] = jwt.PyJWK({**jwk, "alg": alg})
        except jwt.PyJWTError as e:
            raise ValueError(f"key {kid!r}: {e}") from None
    return keys


class TokenVerifier:
    """Checks tokens: HS256 ones signed with the shared secret, and, with a
    JSON Web Key Set, RS256 and ES256 ones whose header names one of its
    keys by ``kid``. A token is verified with the one algorithm its key
    allows: ``alg: none``, HS256 under a public key's ``kid``, or any other
    mix is refused."""

    def __init__(self, secret: str | None, jwks: dict[str, jwt.PyJWK] | None = None) -> None:
        self.secret = secret
        self.jwks = jwks or {}

    @classmethod
    def from_options(cls, secret: str | None, jwks_path: str | None) -> "TokenVerifier":
        """``--secret`` and ``--jwks FILE`` (ValueError: a file that is no key set)."""
        jwks = None
        if jwks_path:
            try:
                text = Path(jwks_path).read_text("utf-8")
            except OSError as e:
                raise ValueError(f"cannot read {jwks_path}: {e.strerror}") from None
            jwks = load_jwks(text)
        return cls(secret, jwks)

    def user(self, token: Any) -> Any:
        return self.verify(token)[0]

    def verify(self, token: Any) -> tuple[Any, dict]:
        """The user and every claim of a good token (NotAuthorized otherwise)."""
        if not self.secret and not self.jwks:
            raise NotAuthorized("authorization is not configured on this service")
        if not isinstance(token, str) or not token or len(token) > 8192:
            raise NotAuthorized("the token must be a non-empty string")
        strict_segments(token)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as e:
            raise NotAuthorized(f"the token is not valid: {e}") from None
        kid = header.get("kid")
        key: Any
        if self.jwks and kid is not None:
            jwk = self.jwks.get(kid) if isinstance(kid, str) else None
            if jwk is None:
                raise NotAuthorized("the token is signed with an unknown key")
            key, algorithm = jwk.key, jwk.algorithm_name
        elif self.secret:
            key, algorithm = self.secret, "HS256"
        else:
            raise NotAuthorized("the token names no key (kid) of this service")
        if header.get("alg") != algorithm:
            raise NotAuthorized(f"the token is not valid: its key verifies {algorithm} only")
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm],
                                options={"require": ["sub"]})
        except jwt.ExpiredSignatureError:
            raise NotAuthorized("the token has expired") from None
        except jwt.InvalidTokenError as e:
            raise NotAuthorized(f"the token is not valid: {e}") from None
        return checked_user(claims)


def strict_segments(token: str) -> None:
    """Refuse (NotAuthorized) a token whose header or claims are not JSON
    that every answer can carry, by the one strict decoder's rules
    (``core/strictjson.py``): a lone surrogate (a ``sub`` of ``"\\ud800"``
    would become a user no answer can name), NaN, Infinity, ``1e999``, an
    integer beyond the float range, nesting deeper than 64 levels. Checked
    before anything else reads the token (PyJWT's decoder accepts all of
    them), so that a refused token changes nothing."""
    parts = token.split(".")
    if len(parts) != 3:
        raise NotAuthorized("the token is not valid: a JWT has three parts")
    for name, part in (("header", parts[0]), ("claims", parts[1])):
        try:
            text = base64url_decode(part.encode("ascii"))
        except (UnicodeEncodeError, binascii.Error, ValueError):
            raise NotAuthorized(f"the token is not valid: its {name} is not base64url") \
                from None
        try:
            value = strictjson.loads(text)
        except strictjson.UnsafeJSON as e:
            raise NotAuthorized(f"the token is not valid: its {name} is not JSON that "
                                f"can be carried ({e})") from None
        if not isinstance(value, dict):
            raise NotAuthorized(f"the token is not valid: its {name} is not a JSON object")


def checked_user(claims: dict) -> tuple[Any, dict]:
    """The user of verified ``claims`` (NotAuthorized without one, or when a
    time claim is no number of seconds within range: see ``checked_time``)."""
    for name in TIME_CLAIMS:
        if name in claims:
            checked_time(claims, name)
    sub = claims.get("sub")
    if not isinstance(sub, str):
        raise NotAuthorized("the token's sub must be a string")
    user = normalize_user(sub)
    if user in ("", None):
        raise NotAuthorized("the token names no user")
    return user, claims


def checked_time(claims: Mapping[str, Any], name: str) -> float:
    """The claim ``name`` (``exp``, ``nbf``, ``iat``) as seconds since the
    epoch: a number, not a boolean, from 0 to ``MAX_TIME`` (NotAuthorized
    otherwise: a 401-digit ``exp`` or ``1e300`` is no time a clock reaches,
    and ``true`` is no time at all)."""
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= MAX_TIME:
        raise NotAuthorized(f"the token's {name} must be a time: a number of seconds "
                            f"from 0 to {MAX_TIME}")
    return float(value)


def remaining(claims: Mapping[str, Any], now: float | None = None) -> float | None:
    """The seconds a verified token's ``exp`` leaves (at least 0; None
    without ``exp``). ``exp`` is wall-clock time, as the verifier checked
    it; the session manager counts the seconds left on its own clock."""
    if claims.get("exp") is None:
        return None
    exp = checked_time(claims, "exp")
    return max(0.0, exp - (time.time() if now is None else now))
