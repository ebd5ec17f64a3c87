"""Tokens verified by the public keys of a JSON Web Key Set (``--jwks``),
besides the HS256 ``--secret``: RS256 and ES256, the key chosen by ``kid``,
and only the one algorithm each key allows."""
from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from twisted.python import usage

from pushengine.api.auth import load_jwks
from tests.http.harness import ClockNode, Http, Rpc

SECRET = "jwks-test-secret-of-enough-length!!"


def public_jwk(private, kid: str) -> dict:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key())
                     if isinstance(private, rsa.RSAPrivateKey)
                     else jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    jwk["kid"] = kid
    return jwk


@pytest.fixture(scope="module")
def keys():
    return {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1()),
            "stranger": rsa.generate_private_key(public_exponent=65537, key_size=2048)}


@pytest.fixture
def node(tmp_path, keys):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(keys["rsa"], "r1"),
                                         public_jwk(keys["ec"], "e1")]}))
    node = ClockNode("--secret", SECRET, "--jwks", str(path))
    node.rpc = Rpc(Http(node.web.resource()))
    return node


def authorize(node, token):
    sid = node.rpc("session.create")
    return sid, node.rpc("session.authorize", sid, token)


def claims(**more):
    return {"sub": "42", "exp": time.time() + 600, **more}


def test_rs256_and_es256_tokens_of_the_set_verify(node, keys):
    assert authorize(node, jwt.encode(claims(), keys["rsa"], "RS256",
                                      headers={"kid": "r1"}))[1] == 42
    assert authorize(node, jwt.encode(claims(sub="alice"), keys["ec"], "ES256",
                                      headers={"kid": "e1"}))[1] == "alice"
    # the shared secret still verifies HS256 tokens without a kid
    assert authorize(node, jwt.encode(claims(), SECRET, "HS256"))[1] == 42


def test_the_exp_of_a_jwks_token_ends_the_authorization(node, keys):
    sid, user = authorize(node, jwt.encode(claims(exp=time.time() + 30), keys["ec"], "ES256",
                                           headers={"kid": "e1"}))
    node.clock.advance(31)
    assert node.engine.sessions.get(sid).user is None


def refused(node, token):
    sid = node.rpc("session.create")
    assert node.rpc.error("session.authorize", sid, token).code == 1003
    assert node.engine.sessions.get(sid).user is None


def test_what_is_refused(node, keys):
    rsa_public_pem = keys["rsa"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    # an unknown kid, signed by a key outside the set
    refused(node, jwt.encode(claims(), keys["stranger"], "RS256", headers={"kid": "x9"}))
    # a known kid, signed by another key
    refused(node, jwt.encode(claims(), keys["stranger"], "RS256", headers={"kid": "r1"}))
    # the RSA key's kid with ES256 (the EC key's algorithm)
    refused(node, jwt.encode(claims(), keys["ec"], "ES256", headers={"kid": "r1"}))
    # alg: none, with and without a kid
    refused(node, jwt.encode(claims(), None, "none", headers={"kid": "r1"}))
    refused(node, jwt.encode(claims(), None, "none"))
    # HS256 keyed with the public key: under its kid, and without a kid
    segments = [{"alg": "HS256", "typ": "JWT", "kid": "r1"}, claims()]
    forged = forge_hs256(segments, rsa_public_pem)
    refused(node, forged)
    refused(node, forge_hs256([{"alg": "HS256", "typ": "JWT"}, claims()], rsa_public_pem))
    # the JWK itself as the secret
    refused(node, forge_hs256(segments, json.dumps(public_jwk(keys["rsa"], "r1")).encode()))
    # an RS256 token without a kid is checked against --secret as HS256: refused
    refused(node, jwt.encode(claims(), keys["rsa"], "RS256"))
    # expired
    refused(node, jwt.encode(claims(exp=time.time() - 5), keys["rsa"], "RS256",
                             headers={"kid": "r1"}))


def forge_hs256(parts, secret: bytes) -> str:
    """An HS256 token keyed with ``secret`` built by hand (PyJWT itself
    refuses to sign HS256 with a PEM key)."""
    import hashlib
    import hmac

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")
    head, body = (b64(json.dumps(p).encode()) for p in parts)
    signing = head + b"." + body
    return (signing + b"." + b64(hmac.new(secret, signing, hashlib.sha256).digest())).decode()


def test_a_bad_key_set_stops_the_node(tmp_path, keys):
    rsa_jwk = public_jwk(keys["rsa"], "r1")
    private = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys["rsa"]))
    for bad, why in [("not json", "not JSON"), ({"keys": []}, "non-empty"),
                     ({"keys": [{**rsa_jwk, "kid": None}]}, "no kid"),
                     ({"keys": [rsa_jwk, rsa_jwk]}, "two keys"),
                     ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}, "only RSA"),
                     ({"keys": [{**private, "kid": "p"}]}, "private"),
                     ({"keys": [{**rsa_jwk, "alg": "HS256"}]}, "RS256 only")]:
        path = tmp_path / "bad.json"
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(usage.UsageError, match=why):
            ClockNode("--secret", SECRET, "--jwks", str(path))
    with pytest.raises(usage.UsageError, match="cannot read"):
        ClockNode("--jwks", str(tmp_path / "missing.json"))


def test_a_key_set_alone_refuses_tokens_without_a_kid(tmp_path, keys):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(keys["rsa"], "r1")]}))
    node = ClockNode("--jwks", str(path))
    node.rpc = Rpc(Http(node.web.resource()))
    refused(node, jwt.encode(claims(), "anything-of-enough-length-for-hs256!", "HS256"))
    assert authorize(node, jwt.encode(claims(), keys["rsa"], "RS256",
                                      headers={"kid": "r1"}))[1] == 42
    assert set(load_jwks(path.read_text())) == {"r1"}
