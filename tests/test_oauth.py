"""OAuth 2.1 resource-server mode (credentials/oauth.py, ADR 0028): JWT access tokens checked
offline against a JWKS file the test writes from keys it generates. Each attack is
refused by name: wrong audience, expired, another key, ``alg: none``, HS256 keyed with
the public key, another issuer; the claims map to a Caller; no log line holds a token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from structlog.testing import capture_logs

from credentials.auth import (
    AuthError,
    ExpiredToken,
    InsufficientScope,
    InvalidToken,
    caller_from_authorization,
    www_authenticate,
)
from credentials.oauth import (
    OAuthVerifier,
    load_jwks,
    metadata_url,
    protected_resource_metadata,
    resource_metadata,
)
from ledger.errors import InputError

AUD = "https://memory.example/mcp"
ISS = "https://auth.example"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: Any, kid: str) -> dict[str, Any]:
    pub = key.public_key()
    if isinstance(pub, ed25519.Ed25519PublicKey):
        doc = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(pub))
    elif isinstance(pub, ec.EllipticCurvePublicKey):
        doc = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(pub))
    else:
        doc = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(pub))
    return {**doc, "kid": kid, "use": "sig"}


KEYS: dict[str, tuple[str, Any]] = {
    "ed": ("EdDSA", ed25519.Ed25519PrivateKey.generate()),
    "p256": ("ES256", ec.generate_private_key(ec.SECP256R1())),
    "rsa": ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
}
OTHER = ed25519.Ed25519PrivateKey.generate()  # trusted by nobody


@pytest.fixture(scope="module")
def jwks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(k, kid) for kid, (_, k) in KEYS.items()]}))
    return path


@pytest.fixture
def verifier(jwks_file: Path) -> OAuthVerifier:
    return OAuthVerifier.from_file(jwks_file, AUD, ISS, now=lambda: NOW)


def claims(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISS, "aud": AUD, "sub": "person@example.com", "client_id": "claude",
        "jti": "at-0001", "iat": int(NOW.timestamp()) - 10,
        "exp": int((NOW + timedelta(minutes=5)).timestamp()),
        "scope": "openid memory:assistant", "subjects": ["user_1", "user_2"]}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def sign(kid: str = "ed", key: Any = None, headers: dict[str, Any] | None = None,
         **over: Any) -> str:
    alg, own = KEYS[kid]
    return jwt.encode(claims(**over), key or own, algorithm=alg,
                      headers={"kid": kid, "typ": "at+jwt", **(headers or {})})


def refused(v: OAuthVerifier, token: str, kind: type[AuthError], reason: str) -> None:
    with pytest.raises(kind) as e:
        v.authenticate(token)
    assert e.value.reason == reason, e.value
    assert token not in str(e.value) and token not in str(e.value.hint)


# ------------------------------------------------------------------ accepted
@pytest.mark.parametrize("kid", sorted(KEYS))
def test_each_allowed_algorithm_is_accepted(verifier: OAuthVerifier, kid: str) -> None:
    caller = verifier.authenticate(sign(kid))
    assert caller.role == "assistant" and caller.credential_id == "oauth:at-0001"
    assert caller.subjects == frozenset({"user_1", "user_2"}) and caller.tenant is None
    assert caller.signing_key is None
    assert caller.expires_at == NOW + timedelta(minutes=5)
    assert "person" not in caller.credential_id  # sub may name a person: never recorded


def test_claims_map_to_the_callers_scope(verifier: OAuthVerifier) -> None:
    op = verifier.authenticate(sign(scope="memory:operator", subjects=None, jti=None))
    assert (op.role, op.subjects, op.signing_key, op.credential_id) == \
        ("operator", None, "operator", "oauth:claude")
    aud = verifier.authenticate(sign(scope="memory:auditor", tenant="acme", subjects=None))
    assert (aud.role, aud.tenant, aud.subjects) == ("auditor", "acme", None)
    t = verifier.authenticate(sign(tenant="acme", subjects=None, aud=[AUD, "https://x.example"]))
    assert t.tenant == "acme" and t.stored_ref("u") == "acme:u"
    # no typ header (many servers omit it) and no kid (one key of that algorithm)
    bare = jwt.encode(claims(), KEYS["p256"][1], algorithm="ES256")
    assert verifier.authenticate(bare).role == "assistant"


def test_clock_skew_within_the_leeway_is_accepted(verifier: OAuthVerifier) -> None:
    t = int(NOW.timestamp())
    verifier.authenticate(sign(exp=t - 29))
    verifier.authenticate(sign(nbf=t + 29, iat=t + 29))


# ------------------------------------------------------------------ attacks
def test_token_for_another_resource_is_refused(verifier: OAuthVerifier) -> None:
    refused(verifier, sign(aud="https://other.example/mcp"), InvalidToken, "audience")
    refused(verifier, sign(aud=["https://memory.example"]), InvalidToken, "audience")
    refused(verifier, sign(aud=None), InvalidToken, "claims")


def test_expired_and_not_yet_valid_tokens_are_refused(verifier: OAuthVerifier) -> None:
    t = int(NOW.timestamp())
    refused(verifier, sign(exp=t - 31), ExpiredToken, "expired")
    refused(verifier, sign(nbf=t + 31), ExpiredToken, "not_yet_valid")
    refused(verifier, sign(iat=t + 31), InvalidToken, "claims")
    refused(verifier, sign(exp=None), InvalidToken, "claims")
    refused(verifier, sign(exp="tomorrow"), InvalidToken, "claims")


def test_token_signed_by_an_untrusted_key_is_refused(verifier: OAuthVerifier) -> None:
    refused(verifier, sign("ed", key=OTHER), InvalidToken, "signature")  # the kid lies
    refused(verifier, sign("ed", headers={"kid": "nobody"}), InvalidToken, "key")
    # a key of the file, but not of the algorithm the header names
    refused(verifier, sign("ed", headers={"kid": "p256"}), InvalidToken, "key")
    good = sign()
    head, body, sig = good.split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=="))
    forged["scope"] = "memory:operator"
    refused(verifier, f"{head}.{b64(json.dumps(forged).encode())}.{sig}", InvalidToken,
            "signature")


def _unsigned(header: dict[str, Any], body: dict[str, Any]) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(body).encode())}"


@pytest.mark.parametrize("alg", ["none", "None", "NONE", ""])
def test_alg_none_is_refused(verifier: OAuthVerifier, alg: str) -> None:
    for sig in ("", b64(b"x")):
        token = _unsigned({"alg": alg, "typ": "at+jwt", "kid": "ed"}, claims()) + "." + sig
        refused(verifier, token, InvalidToken, "algorithm")


@pytest.mark.parametrize("secret", ["pem", "jwk", "der"])
def test_hs256_keyed_with_the_public_key_is_refused(verifier: OAuthVerifier,
                                                    secret: str) -> None:
    """The classic confusion: sign HMAC with the (public) RSA key the server trusts."""
    pub = KEYS["rsa"][1].public_key()
    key = {"pem": pub.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo),
           "der": pub.public_bytes(serialization.Encoding.DER,
                                   serialization.PublicFormat.SubjectPublicKeyInfo),
           "jwk": json.dumps(public_jwk(KEYS["rsa"][1], "rsa")).encode()}[secret]
    for alg, digest in (("HS256", hashlib.sha256), ("HS512", hashlib.sha512)):
        signing_input = _unsigned({"alg": alg, "typ": "at+jwt", "kid": "rsa"}, claims())
        mac = hmac.new(key, signing_input.encode(), digest).digest()
        refused(verifier, f"{signing_input}.{b64(mac)}", InvalidToken, "algorithm")


def test_other_algorithms_and_types_are_refused(verifier: OAuthVerifier) -> None:
    pss = jwt.encode(claims(), KEYS["rsa"][1], algorithm="PS256", headers={"kid": "rsa"})
    refused(verifier, pss, InvalidToken, "algorithm")
    refused(verifier, sign(headers={"typ": "id+jwt"}), InvalidToken, "type")
    refused(verifier, "not.a.jwt", InvalidToken, "malformed")


def test_token_of_another_issuer_is_refused(verifier: OAuthVerifier, jwks_file: Path) -> None:
    refused(verifier, sign(iss="https://evil.example"), InvalidToken, "issuer")
    refused(verifier, sign(iss=None), InvalidToken, "claims")
    anyone = OAuthVerifier.from_file(jwks_file, AUD, None, now=lambda: NOW)
    assert anyone.authenticate(sign(iss="https://other-as.example")).role == "assistant"


@pytest.mark.parametrize("over", [
    {"scope": "openid profile"}, {"scope": None}, {"scope": ["memory:assistant"]},
    {"scope": "memory:assistant memory:operator"}, {"subjects": None},
    {"subjects": "user_1"}, {"subjects": ["bad ref"]}, {"tenant": "a:b", "subjects": None},
], ids=str)
def test_claims_that_grant_no_clear_scope_are_refused(verifier: OAuthVerifier,
                                                      over: dict[str, Any]) -> None:
    refused(verifier, sign(**over), InsufficientScope, "scope")


def test_no_credential_id_is_refused(verifier: OAuthVerifier) -> None:
    refused(verifier, sign(jti=None, client_id=None), InvalidToken, "claims")


# ------------------------------------------------------------------ the JWKS file
BAD_JWKS: list[tuple[Callable[[], Any], str]] = [
    (lambda: {"keys": []}, "not a JWKS"),
    (lambda: [], "not a JWKS"),
    (lambda: {"keys": [{"kty": "oct", "k": b64(b"secret"), "kid": "h"}]}, "symmetric"),
    (lambda: {"keys": [{**public_jwk(KEYS["ed"][1], "x"), "d": b64(b"0" * 32)}]},
     "private key material"),
    (lambda: {"keys": [public_jwk(rsa.generate_private_key(65537, 1024), "weak")]},  # noqa: S505 -- the weak key that must be refused
     r"2048\+ bits"),
    (lambda: {"keys": [public_jwk(ec.generate_private_key(ec.SECP384R1()), "p384")]},
     "P-256"),
    (lambda: {"keys": [{**public_jwk(KEYS["rsa"][1], "r"), "alg": "HS256"}]},
     "for algorithm 'HS256'"),
    (lambda: {"keys": [{**public_jwk(KEYS["ed"][1], "e"), "use": "enc"}]}, "use 'enc'"),
    (lambda: {"keys": [public_jwk(KEYS["ed"][1], "same"), public_jwk(KEYS["p256"][1], "same")]},
     "share a kid"),
    (lambda: {"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}]}, "not a usable public key"),
]


@pytest.mark.parametrize("make, match", BAD_JWKS, ids=[m.replace("\\", "") for _, m in BAD_JWKS])
def test_a_jwks_with_anything_but_public_signing_keys_is_refused(
        make: Callable[[], Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        load_jwks(make())


def test_jwks_file_and_audience_errors(tmp_path: Path, jwks_file: Path) -> None:
    with pytest.raises(InputError, match="cannot read the JWKS file"):
        OAuthVerifier.from_file(tmp_path / "missing.json", AUD)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="is not JSON"):
        OAuthVerifier.from_file(tmp_path / "bad.json", AUD)
    for aud in ("http://memory.example/mcp", "memory.example", "https://m.example/#x"):
        with pytest.raises(InputError, match="--audience"):
            OAuthVerifier.from_file(jwks_file, aud)
    assert OAuthVerifier.from_file(jwks_file, "http://127.0.0.1:8765/mcp").audience


# ------------------------------------------------------------------ metadata, header, logs
def test_protected_resource_metadata() -> None:
    assert metadata_url(AUD) == "https://memory.example/.well-known/oauth-protected-resource/mcp"
    assert metadata_url("https://memory.example/") == \
        "https://memory.example/.well-known/oauth-protected-resource"
    doc = protected_resource_metadata(AUD, [ISS])
    assert doc == {"resource": AUD, "authorization_servers": [ISS],
                   "bearer_methods_supported": ["header"],
                   "scopes_supported": ["memory:assistant", "memory:operator",
                                        "memory:auditor"],
                   "resource_name": "memory-ledger"}
    with pytest.raises(InputError):
        protected_resource_metadata("http://memory.example/mcp")
    assert resource_metadata(AUD, ISS) == doc
    assert "authorization_servers" not in resource_metadata(AUD)
    header = www_authenticate(InvalidToken("x", reason="audience"),
                              resource_metadata=metadata_url(AUD))
    assert header == ('Bearer realm="memory-ledger", error="invalid_token", resource_metadata='
                      '"https://memory.example/.well-known/oauth-protected-resource/mcp"')


def test_the_header_parser_hands_jwts_to_the_verifier(verifier: OAuthVerifier) -> None:
    token = sign()
    assert caller_from_authorization(f"Bearer {token}", None, verifier).role == "assistant"
    with pytest.raises(InvalidToken):  # no OAuth configured: a JWT is no ledger token
        caller_from_authorization(f"Bearer {token}", None, None)


def test_no_log_line_holds_a_token(verifier: OAuthVerifier) -> None:
    tokens = [sign(), sign(aud="https://other.example"), sign(key=OTHER),
              sign(scope="openid")]
    with capture_logs() as logs:
        for t in tokens:
            try:
                verifier.authenticate(t)
            except AuthError:
                pass
    assert [x.get("reason") for x in logs] == ["audience", "signature", "scope"]
    text = repr(logs)
    for t in tokens:
        assert t.split(".")[2][:20] not in text and t.split(".")[1][:20] not in text
