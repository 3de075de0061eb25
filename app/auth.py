"""Who is calling: ``none`` (one local user) or HS256 JWT bearer tokens; and signed
stream tokens so a browser ``EventSource`` (GET, no headers) can read its own run.

HS256 is implemented with ``hmac`` directly: it is a few lines, and it keeps the
dependency list short. Tokens never reach the logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

LOCAL_USER = "local"


class AuthError(Exception):
    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Identity:
    user_id: str
    authorization: str | None


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def sign_hs256(claims: dict[str, Any], secret: str) -> str:
    """Make an HS256 JWT (used by tests, the CLI and the playground in jwt mode)."""
    header = _b64url(orjson.dumps({"alg": "HS256", "typ": "JWT"}))
    payload = _b64url(orjson.dumps(claims))
    sig = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(sig)}"


def verify_hs256(token: str, secret: str, *, now: float | None = None, leeway: float = 30) -> dict[str, Any]:
    try:
        header_b64, payload_b64, sig_b64 = token.split(".")
        header = orjson.loads(_b64url_decode(header_b64))
        claims = orjson.loads(_b64url_decode(payload_b64))
        sig = _b64url_decode(sig_b64)
    except (ValueError, orjson.JSONDecodeError):
        raise AuthError("malformed token") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise AuthError("unsupported token algorithm")
    expected = hmac.new(secret.encode(), f"{header_b64}.{payload_b64}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(sig, expected):
        raise AuthError("invalid token signature")
    if not isinstance(claims, dict):
        raise AuthError("malformed token claims")
    now = time.time() if now is None else now
    exp = claims.get("exp")
    if exp is not None and (not isinstance(exp, (int, float)) or now > exp + leeway):
        raise AuthError("token expired")
    nbf = claims.get("nbf")
    if isinstance(nbf, (int, float)) and now + leeway < nbf:
        raise AuthError("token not yet valid")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > 200:
        raise AuthError("token has no subject")
    return claims


class Authenticator:
    def __init__(self, mode: str, secret: str | None, *, stream_ttl_s: int = 300) -> None:
        self.mode = mode
        self.secret = secret
        self.stream_ttl_s = stream_ttl_s
        # Stream tokens are signed with the JWT secret, or a per-process key in `none` mode.
        self._stream_key = (secret or secrets.token_urlsafe(32)).encode() + b":stream"

    def identify(self, authorization: str | None) -> Identity:
        if self.mode == "none":
            return Identity(LOCAL_USER, authorization)
        if not authorization:
            raise AuthError("missing Authorization header")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("Authorization must be 'Bearer <token>'")
        assert self.secret is not None
        claims = verify_hs256(token.strip(), self.secret)
        return Identity(str(claims["sub"]), authorization)

    def stream_token(self, run_id: str, user_id: str, *, now: float | None = None) -> str:
        exp = int((time.time() if now is None else now) + self.stream_ttl_s)
        body = _b64url(orjson.dumps({"r": run_id, "u": user_id, "e": exp}))
        sig = hmac.new(self._stream_key, body.encode(), hashlib.sha256).digest()[:18]
        return f"{body}.{_b64url(sig)}"

    def verify_stream_token(
        self, token: str, run_id: str, *, now: float | None = None, run_live: bool = False
    ) -> str:
        """Return the user the token was issued to, if it is valid for this run.

        The expiry bounds how long a leaked link can *start* reading; while the run is
        still live (running, or finished within its grace period) an expired token keeps
        working, so a browser that reconnects after a long network drop still resumes.
        """
        try:
            body, sig_b64 = token.split(".")
            sig = _b64url_decode(sig_b64)
            claims = orjson.loads(_b64url_decode(body))
        except (ValueError, orjson.JSONDecodeError):
            raise AuthError("malformed stream token") from None
        expected = hmac.new(self._stream_key, body.encode(), hashlib.sha256).digest()[:18]
        if not hmac.compare_digest(sig, expected):
            raise AuthError("invalid stream token")
        if claims.get("r") != run_id:
            raise AuthError("stream token is for another run")
        if not run_live and (time.time() if now is None else now) > float(claims.get("e", 0)):
            raise AuthError("stream token expired")
        return str(claims.get("u"))
