"""Claims a token may not carry (SPEC section 22, "Tokens"): a signed JWT
whose claims JSON or UTF-8 cannot carry, or whose times are out of range, is
refused with 1003 and changes nothing. Before, ``session.authorize`` with a
``sub`` of ``"\\ud800"`` answered -32603 but left the session authorized as
that user, and ``presence.list`` then answered -32603 to every other session
of the view; a 401-digit ``exp`` was -32603, ``iat: true`` was accepted.

The tokens are real: signed by PyJWT with the node's HS256 secret, and with
an RSA key of the node's ``--jwks`` set (RS256)."""
from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from pushengine.core.hooks import SessionHooksBase
from tests.http.harness import ClockNode, Http, Rpc

SECRET = "claims-test-secret-of-enough-length!"
VIEWS = """
types: {Stream: {id: id}}
views:
  RoomView:
    type: Stream
    params: [room_id, limit]
    where: {room_id: $room_id}
    order: id
    presence: true
"""


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def node(tmp_path, rsa_key):
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    jwk["kid"] = "r1"
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    (tmp_path / "views.yaml").write_text(VIEWS)
    node = ClockNode("--views", str(tmp_path / "views.yaml"), "--secret", SECRET,
                     "--jwks", str(tmp_path / "jwks.json"))
    node.rpc = Rpc(Http(node.web.resource()))
    return node


def signed(claims: dict, how: str, rsa_key) -> str:
    """``claims`` as PyJWT encodes them (``json.dumps``: NaN and Infinity
    as such, lone surrogates as escapes), signed."""
    if how == "HS256":
        return jwt.encode(claims, SECRET, algorithm="HS256")
    return jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "r1"})


def in_an_hour() -> float:
    return time.time() + 3600


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


BAD_CLAIMS = {
    "a sub with a lone surrogate": lambda: {"sub": "\ud800"},
    "a lone surrogate in another claim": lambda: {"sub": "7", "name": "x\udfff"},
    "a lone surrogate in a key": lambda: {"sub": "7", "\ud800": 1},
    "NaN": lambda: {"sub": "7", "score": float("nan")},
    "an infinite exp": lambda: {"sub": "7", "exp": float("inf")},
    "an exp of 401 digits": lambda: {"sub": "7", "exp": 10 ** 400},
    "an nbf of 401 digits": lambda: {"sub": "7", "nbf": -(10 ** 400)},
    "an exp beyond the year 9999": lambda: {"sub": "7", "exp": 1e300},
    "an integer beyond the float range": lambda: {"sub": "7", "n": 10 ** 400},
    "an iat that is a boolean": lambda: {"sub": "7", "iat": True},
    "an nbf that is a boolean": lambda: {"sub": "7", "nbf": False},
    "an exp that is a boolean": lambda: {"sub": "7", "exp": True},
    "an iat before the epoch": lambda: {"sub": "7", "iat": -5},
    "nesting deeper than 64 levels": lambda: {"sub": "7", "x": deep(65)},
}


class Ear(SessionHooksBase):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def authorized(self, session, claims) -> None:
        self.heard.append("authorized")

    def changed(self, session) -> None:
        self.heard.append("changed")


@pytest.mark.parametrize("how", ["HS256", "RS256"])
@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_a_signed_token_with_claims_no_answer_can_carry_is_1003_and_changes_nothing(
        node, rsa_key, how: str, case: str) -> None:
    rpc = node.rpc
    # someone in the room, who asks who is there
    other = rpc("session.create")
    assert rpc("session.authorize", other, signed({"sub": "5", "exp": in_an_hour()}, how,
                                                  rsa_key)) == 5
    key, _ = rpc("session.subscribe", other, "RoomView", {"room_id": 1}, 10)
    sid = rpc("session.create")
    assert rpc("session.subscribe", sid, "RoomView", {"room_id": 1}, 10)[0] == key
    ear = Ear()
    node.hooks.add(ear)
    token = signed(BAD_CLAIMS[case](), how, rsa_key)
    error = rpc.error("session.authorize", sid, token)
    assert error.code == 1003, error.message
    assert "\\ud800" not in error.message and "\ud800" not in error.message
    session = node.engine.sessions.get(sid)
    assert session.user is None and ear.heard == []
    assert rpc.error("session.refresh", sid, token).code == 1003
    assert rpc("presence.list", other, key) == [5]
    assert rpc("presence.list", sid, key) == [5]
    # the same session still takes a good token
    assert rpc("session.authorize", sid, signed({"sub": "6"}, how, rsa_key)) == 6
    assert rpc("presence.list", other, key) == [5, 6]


@pytest.mark.parametrize("how", ["HS256", "RS256"])
def test_refresh_with_bad_claims_keeps_the_authorization_as_it_was(node, rsa_key, how) -> None:
    rpc = node.rpc
    sid = rpc("session.create")
    assert rpc("session.authorize", sid, signed({"sub": "7", "exp": time.time() + 60}, how,
                                                rsa_key)) == 7
    for make in BAD_CLAIMS.values():
        claims = make()
        if claims.get("sub") == "7":
            assert rpc.error("session.refresh", sid, signed(claims, how, rsa_key)).code == 1003
    node.clock.advance(59)
    assert node.engine.sessions.get(sid).user == 7
    node.clock.advance(2)                       # the first token's exp still ends it
    assert node.engine.sessions.get(sid).user is None


def forged_header(header: bytes, claims: dict) -> str:
    """A token with ``header`` as its header, HS256-signed with the secret."""
    import hashlib
    import hmac

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")
    signing = b64(header) + b"." + b64(json.dumps(claims).encode())
    sig = b64(hmac.new(SECRET.encode(), signing, hashlib.sha256).digest())
    return (signing + b"." + sig).decode()


def test_a_header_nested_past_the_limit_is_1003_not_an_internal_error(node) -> None:
    sid = node.rpc("session.create")
    header = b'{"alg":"HS256","x":' + b"[" * 3000 + b"]" * 3000 + b"}"
    token = forged_header(header, {"sub": "7"})
    assert len(token) <= 8192
    assert node.rpc.error("session.authorize", sid, token).code == 1003
    assert node.engine.sessions.get(sid).user is None


def test_times_within_range_are_accepted(node, rsa_key) -> None:
    sid = node.rpc("session.create")
    now = time.time()
    claims = {"sub": "7", "iat": int(now), "nbf": now - 10, "exp": now + 600}
    assert node.rpc("session.authorize", sid, signed(claims, "HS256", rsa_key)) == 7
