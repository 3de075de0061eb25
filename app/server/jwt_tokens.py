"""Bearer JWTs checked with PyJWT: a token's unverified header, its signature with the
key its ``alg`` is allowed, and its registered claims (``exp``/``nbf`` with leeway, ``aud``,
``iss``, a subject); every failure is an ``AuthError`` with a reason a client can act on,
never a PyJWT exception. What key to use is the authenticator's business
(``app/server/auth.py``); this is the check itself.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.server.identity import AuthError

try:  # PyJWT >= 2.10 warns on every use of an HMAC key under 32 bytes; the config checks length once
    from jwt.warnings import InsecureKeyLengthWarning as _ShortKeyWarning
except ImportError:  # pragma: no cover - older PyJWT
    _ShortKeyWarning = UserWarning  # type: ignore[assignment,misc]

#: The longest ``sub`` taken: it is the user id every stored row is keyed by.
MAX_SUBJECT_CHARS = 200
#: What a subject may not hold: C0 control characters, DEL, and lone UTF-16 surrogates.
_UNSTORABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
ASYMMETRIC_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


def sign_hs256(claims: dict[str, Any], secret: str) -> str:
    """Make an HS256 JWT (used by tests, the CLI and the playground in jwt mode)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _ShortKeyWarning)
        return jwt.encode(claims, secret, algorithm="HS256")


def decode_token(
    token: str,
    key: Any,
    alg: str,
    *,
    audience: str | None,
    issuer: str | None,
    leeway: float,
    require_exp: bool = False,
) -> dict[str, Any]:
    """Verify signature and registered claims; every failure is an ``AuthError``.

    The ``alg`` comes from the token's unverified header: one of another key type than
    ``key`` (ES256 against an RSA key, RS256 against an EC key published without ``alg``)
    or another curve (ES384 against a P-256 key) is refused here, before PyJWT's key
    preparation raises ``TypeError``/``InvalidKeyError`` on it (a 500 anyone could cause
    with a header alone)."""
    if not _key_fits(key, alg):
        raise AuthError("token algorithm does not match its key")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _ShortKeyWarning)
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=audience,
                issuer=issuer,
                leeway=leeway,
                options={
                    "verify_aud": audience is not None,
                    "verify_iss": issuer is not None,
                    "require": ["exp"] if require_exp else [],
                },
            )
    except jwt.ExpiredSignatureError:
        raise AuthError("token expired") from None
    except jwt.ImmatureSignatureError:
        raise AuthError("token not yet valid") from None
    except jwt.InvalidAudienceError:
        raise AuthError("token audience not accepted") from None
    except jwt.InvalidIssuerError:
        raise AuthError("token issuer not accepted") from None
    except jwt.MissingRequiredClaimError as exc:
        if exc.claim == "exp":
            raise AuthError("token has no exp claim: tokens that never expire are not accepted") from None
        raise AuthError(f"token has no {exc.claim} claim") from None
    except jwt.InvalidSignatureError:
        raise AuthError("invalid token signature") from None
    except jwt.InvalidKeyError:  # an EC key of another curve than the alg's
        raise AuthError("token algorithm does not match its key") from None
    except jwt.InvalidTokenError:
        raise AuthError("invalid token") from None
    if not isinstance(claims, dict):
        raise AuthError("malformed token claims")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthError("token has no subject")
    if len(sub) > MAX_SUBJECT_CHARS:
        raise AuthError(f"token subject is too long ({len(sub)} characters; at most {MAX_SUBJECT_CHARS})")
    if _UNSTORABLE.search(sub):
        # Every stored row is keyed by it: PostgreSQL refuses a NUL in text, and a lone
        # surrogate (JSON's "\ud800") is no UTF-8 for either engine — each was a 500.
        raise AuthError("token subject holds a control character or is not valid Unicode text")
    return claims


def _key_fits(key: Any, alg: str) -> bool:
    """Whether an asymmetric ``alg`` can be checked with ``key`` at all (its key type)."""
    if alg.startswith(("RS", "PS")):
        return isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey)
    if alg.startswith("ES"):
        return isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey)
    return True


def verify_hs256(token: str, secret: str, *, now: float | None = None, leeway: float = 30) -> dict[str, Any]:
    """Verify an HS256 token (kept for callers of the earlier API; ``now`` is ignored
    unless given, then expiry is checked against it)."""
    alg = token_header(token).get("alg")
    if alg != "HS256":
        raise AuthError("unsupported token algorithm")
    if now is None:
        return decode_token(token, secret, "HS256", audience=None, issuer=None, leeway=leeway)
    claims = decode_token(token, secret, "HS256", audience=None, issuer=None, leeway=math.inf)
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and now > exp + leeway:
        raise AuthError("token expired")
    return claims


def token_header(token: str) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise AuthError("malformed token") from None
    if not isinstance(header, dict):
        raise AuthError("malformed token")
    return header


def jwk_key(jwk: jwt.PyJWK, alg: str) -> Any:
    """The key of a JWK, refused for a token whose ``alg`` differs from the one the JWK declares."""
    declared = jwk._jwk_data.get("alg")
    if declared and declared != alg:
        raise AuthError("token algorithm does not match its key")
    return jwk.key


__all__ = [
    "ASYMMETRIC_ALGS",
    "MAX_SUBJECT_CHARS",
    "decode_token",
    "jwk_key",
    "sign_hs256",
    "token_header",
    "verify_hs256",
]
