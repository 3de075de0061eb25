"""Who is calling: ``none`` (one local user) or JWT bearer tokens; and signed stream
tokens so a browser ``EventSource`` (GET, no headers) can read its own run.

Bearer tokens are verified with PyJWT: HS256 with a shared secret
(``AGENT_JWT_SECRET``), or RS256/ES256 (and PS256/ES384/ES512/RS384/RS512) with the
identity provider's keys, from a JWKS URL (``AGENT_JWT_JWKS_URL``; cached, refetched on
an unknown ``kid`` at most every ``jwks_min_refresh_s`` and when older than
``jwks_max_age_s``: key rotation) or a PEM public key (``AGENT_JWT_PUBLIC_KEY``). The
``alg`` a token names must be one its configured key can verify (no HS256 with a public
key). ``aud`` and ``iss`` are checked when configured, ``exp``/``nbf`` with
``AGENT_JWT_LEEWAY_S`` of clock skew; a token without ``exp`` is refused (it would be
valid forever) unless ``AGENT_JWT_ALLOW_NO_EXP`` is set. The JWKS is fetched with the app's async httpx
client, never blocking the event loop (PyJWT's ``PyJWKClient`` is synchronous). Tokens
never reach the logs. The token checks are ``app/server/jwt_tokens.py``, the JWKS keys
``app/server/jwks.py``, who a caller is and the refusal ``app/server/identity.py``; this
module picks the key and signs and checks the stream tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from app.ops.log_context import note_user
from app.server.identity import LOCAL_USER, AuthError, Identity

if TYPE_CHECKING:
    from app.server.jwks import JwksKeys

# PyJWT (app/server/jwt_tokens.py, app/server/jwks.py; ~50 ms of CPU with cryptography's
# x509) is imported by the functions that check tokens, and by an Authenticator of a mode
# that does, at start-up; ``AGENT_AUTH=none``, the default, never loads it.


def sign_hs256(claims: dict[str, Any], secret: str) -> str:
    """Make an HS256 JWT (used by tests, the CLI and the playground in jwt mode)."""
    from app.server.jwt_tokens import sign_hs256 as sign

    return sign(claims, secret)


def verify_hs256(token: str, secret: str, *, now: float | None = None, leeway: float = 30) -> dict[str, Any]:
    """``app.server.jwt_tokens.verify_hs256``: an HS256 token's claims, or ``AuthError``."""
    from app.server.jwt_tokens import verify_hs256 as verify

    return verify(token, secret, now=now, leeway=leeway)


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _credential_or_none(authorization: str | None) -> str | None:
    """With ``AGENT_AUTH=none`` the caller's header is passed on to the backend, except
    one that carries no credential: ``Bearer`` alone (Open WebUI with its API key left
    empty sends it) is no token, so the tools fall back to the demo token as for a
    request without the header, instead of forwarding a header every backend refuses."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return None if not token.strip() and scheme.lower() in ("bearer", "") else authorization


class Authenticator:
    def __init__(
        self,
        mode: str,
        secret: str | None,
        *,
        stream_ttl_s: int = 300,
        public_key_pem: str | bytes | None = None,
        jwks_url: str | None = None,
        audience: str | None = None,
        issuer: str | None = None,
        leeway_s: float = 30.0,
        http: httpx.AsyncClient | None = None,
        jwks_min_refresh_s: float = 30.0,
        jwks_max_age_s: float = 3600.0,
        stream_secret: str | None = None,
        allow_no_exp: bool = False,
    ) -> None:
        self.mode = mode
        if mode != "none":  # the token checks' imports at start-up, not at the first request
            import app.server.jwt_tokens  # noqa: F401
        #: A token without ``exp`` would be valid forever: refused unless allowed.
        self.allow_no_exp = allow_no_exp
        self.secret = secret
        self.stream_ttl_s = stream_ttl_s
        self.audience = audience
        self.issuer = issuer
        self.leeway_s = leeway_s
        self._public_key: Any = None
        if public_key_pem:
            from cryptography.hazmat.primitives.serialization import load_pem_public_key

            pem = public_key_pem.encode() if isinstance(public_key_pem, str) else public_key_pem
            self._public_key = load_pem_public_key(pem)
        self.jwks: JwksKeys | None = None
        if jwks_url:
            from app.server.jwks import JwksKeys

            self.jwks = JwksKeys(jwks_url, http, min_refresh_s=jwks_min_refresh_s, max_age_s=jwks_max_age_s)
        # Stream tokens are signed with ``stream_secret`` — the app passes one every
        # replica shares (``app.keyring``); an Authenticator built without one
        # (a single process, tests) signs with the JWT secret or a key of its own.
        self._stream_key = (stream_secret or secret or secrets.token_urlsafe(32)).encode() + b":stream"

    @classmethod
    def from_settings(
        cls, settings: Any, http: httpx.AsyncClient | None = None, *, stream_secret: str | None = None
    ) -> Authenticator:
        pem_path: Path | None = settings.jwt_public_key
        return cls(
            settings.auth,
            settings.jwt_secret,
            stream_ttl_s=settings.stream_token_ttl_s,
            public_key_pem=pem_path.read_bytes() if pem_path is not None else None,
            jwks_url=settings.jwt_jwks_url,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            leeway_s=settings.jwt_leeway_s,
            http=http,
            stream_secret=stream_secret,
            allow_no_exp=settings.jwt_allow_no_exp,
        )

    def _bearer(self, authorization: str | None) -> str:
        if not authorization:
            raise AuthError("missing Authorization header")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("Authorization must be 'Bearer <token>'")
        return token.strip()

    async def authenticate(self, authorization: str | None) -> Identity:
        """The caller's identity; fetches JWKS keys when needed (rotation)."""
        if self.mode == "none":
            return Identity(LOCAL_USER, _credential_or_none(authorization))
        from app.server.jwt_tokens import ASYMMETRIC_ALGS, jwk_key, token_header

        token = self._bearer(authorization)
        header = token_header(token)
        alg = header.get("alg")
        if alg in ASYMMETRIC_ALGS and self._public_key is None and self.jwks is not None:
            jwk = await self.jwks.key(header.get("kid") if isinstance(header.get("kid"), str) else None)
            claims = self._claims(token, jwk_key(jwk, str(alg)), str(alg))
            note_user(str(claims["sub"]))
            return Identity(str(claims["sub"]), authorization)
        return self.identify(authorization)

    async def prefetch(self, authorization: str | None) -> None:
        """Make sure the JWKS key a token names is cached (fetching it if needed); never raises."""
        if self.mode == "none" or self.jwks is None or self._public_key is not None:
            return
        from app.server.jwt_tokens import ASYMMETRIC_ALGS, token_header

        try:
            header = token_header(self._bearer(authorization))
            if header.get("alg") in ASYMMETRIC_ALGS:
                kid = header.get("kid")
                await self.jwks.key(kid if isinstance(kid, str) else None)
        except AuthError:
            return  # identify() refuses the request with the reason

    def identify(self, authorization: str | None) -> Identity:
        """Synchronous check: the ``none`` mode, HS256, a PEM key, or JWKS keys already
        cached (an unknown ``kid`` needs ``authenticate``, which can fetch)."""
        if self.mode == "none":
            note_user(LOCAL_USER)
            return Identity(LOCAL_USER, _credential_or_none(authorization))
        from app.server.jwt_tokens import ASYMMETRIC_ALGS, jwk_key, token_header

        token = self._bearer(authorization)
        header = token_header(token)
        alg = header.get("alg")
        if alg == "HS256" and self.secret:
            key: Any = self.secret
        elif alg in ASYMMETRIC_ALGS and self._public_key is not None:
            key = self._public_key
        elif alg in ASYMMETRIC_ALGS and self.jwks is not None:
            kid = header.get("kid")
            jwk = self.jwks._lookup(kid if isinstance(kid, str) else None)
            if jwk is None:
                raise AuthError("token signed with an unknown key")
            key = jwk_key(jwk, str(alg))
        else:
            raise AuthError("unsupported token algorithm")
        claims = self._claims(token, key, str(alg))
        note_user(str(claims["sub"]))  # the logs say who; the token itself never reaches them
        return Identity(str(claims["sub"]), authorization)

    def _claims(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        from app.server.jwt_tokens import decode_token

        return decode_token(
            token, key, alg, audience=self.audience, issuer=self.issuer, leeway=self.leeway_s,
            require_exp=not self.allow_no_exp,
        )

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
        note_user(str(claims.get("u")))
        return str(claims.get("u"))


class JwksPrefetch:
    """ASGI middleware: before a request whose bearer token names a JWKS key not cached
    (or when the cached set is stale), fetch the JWKS asynchronously, so the synchronous
    ``Authenticator.identify`` the routes call finds a rotated key on the first request.
    A no-op unless ``AGENT_JWT_JWKS_URL`` is configured; verification stays in the routes.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            state = getattr(scope.get("app"), "state", None)
            auth = getattr(getattr(state, "services", None), "auth", None)
            if isinstance(auth, Authenticator) and auth.jwks is not None:
                for name, value in scope.get("headers") or ():
                    if name == b"authorization":
                        await auth.prefetch(value.decode("latin-1"))
                        break
        await self.app(scope, receive, send)


__all__ = [
    "LOCAL_USER",
    "AuthError",
    "Authenticator",
    "Identity",
    "JwksPrefetch",
    "sign_hs256",
    "verify_hs256",
]
