"""OAuth 2.1 resource-server mode: JWT access tokens checked offline (ADR 0028).

``ledger serve --jwks FILE --audience URL [--issuer URL]``: the server trusts an
authorization server it never calls. Its public keys come from a JWKS file; a token is
accepted only when, in this order:

1. it is a compact JWS of three parts whose header names an allowed algorithm:
   ``EdDSA`` (Ed25519), ``ES256`` (P-256) or ``RS256`` (RSA of 2048 bits or more).
   ``none``, every HMAC algorithm and every other name are refused before any key is
   looked at, so neither ``alg: none`` nor an HMAC keyed with a public key can pass;
2. ``typ``, when present, is ``at+jwt`` (RFC 9068) or ``JWT``: an ID token is no
   access token;
3. its ``kid`` names a key of the file (or, without ``kid``, the file holds exactly one
   key for that algorithm), and that key's type is the algorithm's;
4. the signature verifies with that key (PyJWT, ``algorithms=[that one]``);
5. ``aud`` holds the configured audience: this server's resource URL (RFC 8707);
6. ``iss`` equals the configured issuer, when one is configured;
7. ``exp`` is present and not passed, ``nbf`` and ``iat`` are not in the future, each
   with :data:`LEEWAY` seconds for clock skew;
8. the claims map to a scope (:meth:`OAuthVerifier.caller_from_claims`): the ``scope``
   claim grants exactly one of ``memory:assistant``, ``memory:operator``,
   ``memory:auditor``; ``subjects`` (a list of subject refs) and ``tenant`` (a string)
   confine it, and an assistant token must carry at least one of them. The credential
   id recorded for its acts is ``oauth:`` + ``jti`` (or ``client_id``): ids of the
   token and of the client, never ``sub``, which may name a person.

Steps 1-7 refuse with :class:`~credentials.auth.InvalidToken` or
:class:`~credentials.auth.ExpiredToken`, step 8 with :class:`~credentials.auth.InsufficientScope`;
the reason code goes to the log, the token never does.
:func:`protected_resource_metadata` builds the RFC 9728 document the server publishes
at :func:`metadata_url`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import jwt
import structlog
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from credentials.auth import AuthError, ExpiredToken, InsufficientScope, InvalidToken
from ledger import clock
from ledger.errors import InputError
from service.caller import Caller, Role

__all__ = [
    "ALGORITHMS",
    "LEEWAY",
    "ROLE_SCOPES",
    "OAuthVerifier",
    "load_jwks",
    "metadata_url",
    "protected_resource_metadata",
    "resource_metadata",
]

log = structlog.get_logger("ledger")

ALGORITHMS = ("EdDSA", "ES256", "RS256")
LEEWAY = 30
"""Seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
ROLE_SCOPES: dict[str, Role] = {"memory:assistant": "assistant",
                                "memory:operator": "operator",
                                "memory:auditor": "auditor"}
SUBJECTS_CLAIM = "subjects"
TENANT_CLAIM = "tenant"
MIN_RSA_BITS = 2048
_TYPES = ("at+jwt", "application/at+jwt", "jwt")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")  # ledger/inputs.py REF_PATTERN
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CRED = re.compile(r"[A-Za-z0-9._:@/+=\-]{1,128}")


@dataclass(frozen=True)
class _Key:
    kid: str | None
    algorithm: str
    key: Any


def _key_algorithm(public: Any) -> str | None:
    if isinstance(public, ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(public, ec.EllipticCurvePublicKey) and isinstance(public.curve, ec.SECP256R1):
        return "ES256"
    if isinstance(public, rsa.RSAPublicKey) and public.key_size >= MIN_RSA_BITS:
        return "RS256"
    return None


def load_jwks(doc: Mapping[str, Any], source: str = "JWKS") -> tuple[_Key, ...]:
    """The public keys of a JWKS document; refuses anything but EdDSA, ES256 and RS256
    (2048+ bits) public signing keys, and any private or symmetric key."""
    keys = doc.get("keys") if isinstance(doc, Mapping) else None
    if not isinstance(keys, list) or not keys:
        raise InputError(f"{source}: not a JWKS (no non-empty \"keys\" list)",
                         hint="give the authorization server's public JWKS (RFC 7517 §5)")
    out: list[_Key] = []
    for i, jwk in enumerate(keys):
        where = f"{source}: keys[{i}]"
        if not isinstance(jwk, Mapping):
            raise InputError(f"{where} is not an object")
        if jwk.get("kty") == "oct":
            raise InputError(f"{where} is a symmetric key; only public signing keys "
                             "are trusted", hint="remove it from the file")
        if any(p in jwk for p in ("d", "p", "q", "dp", "dq", "qi", "k")):
            raise InputError(f"{where} holds private key material",
                             hint="keep only the public parts (kty, crv, x, y, n, e, kid)")
        if jwk.get("use", "sig") != "sig":
            raise InputError(f"{where} is for use {jwk.get('use')!r}, not signatures")
        if "alg" in jwk and jwk["alg"] not in ALGORITHMS:
            raise InputError(f"{where} is for algorithm {jwk['alg']!r}",
                             hint=f"allowed: {', '.join(ALGORITHMS)}")
        try:
            public = jwt.PyJWK(dict(jwk)).key
        except (jwt.exceptions.PyJWKError, jwt.exceptions.InvalidKeyError, ValueError,
                TypeError) as e:
            raise InputError(f"{where} is not a usable public key: {e}") from e
        alg = _key_algorithm(public)
        if alg is None or ("alg" in jwk and jwk["alg"] != alg):
            raise InputError(f"{where} is not an Ed25519, P-256 or RSA ({MIN_RSA_BITS}+ "
                             "bits) public key for its algorithm",
                             hint=f"allowed: {', '.join(ALGORITHMS)}")
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InputError(f"{where}: kid is not a string")
        out.append(_Key(kid, alg, public))
    kids = [k.kid for k in out if k.kid is not None]
    if len(kids) != len(set(kids)):
        raise InputError(f"{source}: two keys share a kid", hint="give each key its own kid")
    return tuple(out)


def _check_resource(url: str, what: str) -> str:
    parts = urlsplit(url)
    local = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and local):
        raise InputError(f"{what} {url!r} is not an https URL",
                         hint="use this server's public URL, e.g. https://memory.example/mcp "
                              "(http only on loopback)")
    if not parts.netloc or parts.fragment:
        raise InputError(f"{what} {url!r} must name a host and have no #fragment "
                         "(RFC 8707 §2)")
    return url


class OAuthVerifier:
    """Checks JWT access tokens for one resource (the audience) against a JWKS."""

    def __init__(self, keys: Sequence[_Key], audience: str, issuer: str | None = None, *,
                 leeway: int = LEEWAY, operator_key: str = "operator",
                 now: Callable[[], datetime] = clock.now) -> None:
        if not keys:
            raise InputError("no trusted keys for OAuth access tokens")
        self.keys = tuple(keys)
        self.audience = _check_resource(audience, "--audience")
        self.issuer = issuer
        self.leeway = leeway
        self.operator_key = operator_key
        self._now = now

    @classmethod
    def from_file(cls, jwks: Path, audience: str, issuer: str | None = None,
                  **kwargs: Any) -> OAuthVerifier:
        """The verifier for ``ledger serve --jwks FILE --audience URL [--issuer URL]``;
        a file that is missing or not a public JWKS is an :class:`InputError`."""
        try:
            doc = json.loads(jwks.read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(f"cannot read the JWKS file {jwks}: {e.strerror or e}",
                             hint="give the authorization server's public keys as a file") \
                from e
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(f"the JWKS file {jwks} is not JSON: {e}") from e
        return cls(load_jwks(doc, str(jwks)), audience, issuer, **kwargs)

    # ------------------------------------------------------------------ per request
    def authenticate(self, token: str) -> Caller:
        """The caller a JWT access token proves, or an :class:`~credentials.auth.AuthError`."""
        try:
            claims = self.verify(token)
            return self.caller_from_claims(claims)
        except AuthError as e:
            log.info("auth.refused", reason=e.reason, kind="jwt")
            raise

    def verify(self, token: str) -> dict[str, Any]:
        """Steps 1-7 of the module's list: the verified claims, or raise."""
        def invalid(reason: str, what: str) -> InvalidToken:
            return InvalidToken(f"the access token {what}", reason=reason,
                                hint="ask the authorization server for a token for "
                                     f"{self.audience}")

        # 1. the header, before any key: an allowed asymmetric algorithm only
        try:
            header = jwt.get_unverified_header(token)
        except jwt.exceptions.DecodeError:
            raise invalid("malformed", "is not a JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise invalid("algorithm", f"uses an algorithm this server does not accept "
                                       f"(allowed: {', '.join(ALGORITHMS)})")
        # 2. an access token, not an ID token
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in _TYPES):
            raise invalid("type", "is not an access token (typ)")
        # 3. the key
        kid = header.get("kid")
        if kid is not None:
            found = [k for k in self.keys if k.kid == kid]
        else:
            found = [k for k in self.keys if k.algorithm == alg]
            found = found if len(found) == 1 else []
        if len(found) != 1 or found[0].algorithm != alg:
            raise invalid("key", "is signed by no trusted key")
        # 4.-6. the signature, audience and issuer (times are checked below, step 7)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, found[0].key, algorithms=[alg], audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "aud"], "verify_exp": False,
                         "verify_nbf": False, "verify_iat": False})
        except jwt.exceptions.InvalidSignatureError:
            raise invalid("signature", "signature does not verify") from None
        except jwt.exceptions.InvalidAudienceError:
            raise invalid("audience", f"is not for this resource ({self.audience})") from None
        except jwt.exceptions.InvalidIssuerError:
            raise invalid("issuer", "is from another issuer") from None
        except jwt.exceptions.MissingRequiredClaimError as e:
            raise invalid("claims", f"lacks the {e.claim!r} claim") from None
        except jwt.exceptions.InvalidTokenError:
            raise invalid("malformed", "is not a valid JWT") from None
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise invalid("issuer", "is from another issuer")
        # 7. times, with leeway
        now = self._now().timestamp()
        times = {}
        for name in ("exp", "nbf", "iat"):
            value = claims.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise invalid("claims", f"has a non-numeric {name!r} claim")
            times[name] = float(value)
        if now > times["exp"] + self.leeway:
            raise ExpiredToken("the access token has expired", reason="expired",
                               hint="get a new access token")
        if "nbf" in times and now + self.leeway < times["nbf"]:
            raise ExpiredToken("the access token is not valid yet", reason="not_yet_valid",
                               hint="check the clocks of this server and the issuer")
        if "iat" in times and now + self.leeway < times["iat"]:
            raise invalid("claims", "was issued in the future")
        return claims

    def caller_from_claims(self, claims: Mapping[str, Any]) -> Caller:
        """Step 8: the scope of verified claims (see the module's docstring)."""
        def refuse(what: str) -> InsufficientScope:
            return InsufficientScope(f"the access token {what}", reason="scope",
                                     hint="ask for scope memory:assistant, memory:operator "
                                          "or memory:auditor")

        scope = claims.get("scope", "")
        if not isinstance(scope, str):
            raise refuse("has a scope claim that is not a string (RFC 9068 §2.2.3)")
        roles = {ROLE_SCOPES[s] for s in scope.split() if s in ROLE_SCOPES}
        if not roles:
            raise refuse("grants no memory scope")
        if len(roles) > 1:
            raise refuse(f"grants {len(roles)} ledger roles at once; one token, one role")
        role = roles.pop()
        subjects: frozenset[str] | None = None
        if SUBJECTS_CLAIM in claims:
            raw = claims[SUBJECTS_CLAIM]
            if not isinstance(raw, list) or not all(isinstance(s, str) and _REF.fullmatch(s)
                                                    for s in raw):
                raise refuse(f"has a {SUBJECTS_CLAIM!r} claim that is not a list of "
                             "subject refs")
            subjects = frozenset(raw)
        tenant = claims.get(TENANT_CLAIM)
        if tenant is not None and not (isinstance(tenant, str) and _TENANT.fullmatch(tenant)):
            raise refuse(f"has a {TENANT_CLAIM!r} claim that is not a tenant name")
        if role == "assistant" and subjects is None and tenant is None:
            raise refuse(f"grants memory:assistant without a {SUBJECTS_CLAIM!r} or "
                         f"{TENANT_CLAIM!r} claim to confine it")
        cred = claims.get("jti") or claims.get("client_id")
        if not isinstance(cred, str) or not _CRED.fullmatch(cred):
            raise InvalidToken("the access token has no usable jti or client_id to record "
                               "its acts by", reason="claims",
                               hint="configure the authorization server to issue RFC 9068 "
                                    "access tokens")
        return Caller(credential_id=f"oauth:{cred}", role=role, subjects=subjects,
                      tenant=tenant, signing_key=self.operator_key if role == "operator"
                      else None,
                      expires_at=datetime.fromtimestamp(float(claims["exp"]), UTC))


def metadata_url(resource: str) -> str:
    """Where the protected-resource metadata of ``resource`` is served (RFC 9728 §3.1):
    the well-known segment goes between the host and the resource's path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc,
                       "/.well-known/oauth-protected-resource" + path, parts.query, ""))


def protected_resource_metadata(resource: str, authorization_servers: Sequence[str] = (),
                                *, resource_name: str = "memory-ledger",
                                documentation: str | None = None) -> dict[str, Any]:
    """The RFC 9728 protected-resource metadata document of this server."""
    doc: dict[str, Any] = {
        "resource": _check_resource(resource, "resource"),
        "bearer_methods_supported": ["header"],
        "scopes_supported": list(ROLE_SCOPES),
        "resource_name": resource_name,
    }
    if authorization_servers:
        doc["authorization_servers"] = list(authorization_servers)
    if documentation is not None:
        doc["resource_documentation"] = documentation
    return doc


def resource_metadata(audience: str, issuer: str | None = None) -> dict[str, Any]:
    """The metadata document of ``ledger serve --audience URL [--issuer URL]``: the
    resource is the audience, the authorization server the pinned issuer, if any."""
    return protected_resource_metadata(audience, [issuer] if issuer else ())
