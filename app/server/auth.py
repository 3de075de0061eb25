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
never reach the logs.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import math
import secrets
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson

from app.ops.log_context import note_user

try:  # PyJWT >= 2.10 warns on every use of an HMAC key under 32 bytes; the config checks length once
    from jwt.warnings import InsecureKeyLengthWarning as _ShortKeyWarning
except ImportError:  # pragma: no cover - older PyJWT
    _ShortKeyWarning = UserWarning  # type: ignore[assignment,misc]

log = logging.getLogger("agentchat.auth")

LOCAL_USER = "local"
ASYMMETRIC_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _ShortKeyWarning)
        return jwt.encode(claims, secret, algorithm="HS256")


def _decode(
    token: str,
    key: Any,
    alg: str,
    *,
    audience: str | None,
    issuer: str | None,
    leeway: float,
    require_exp: bool = False,
) -> dict[str, Any]:
    """Verify signature and registered claims; every failure is an ``AuthError``."""
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
    except jwt.InvalidTokenError:
        raise AuthError("invalid token") from None
    if not isinstance(claims, dict):
        raise AuthError("malformed token claims")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > 200:
        raise AuthError("token has no subject")
    return claims


def verify_hs256(token: str, secret: str, *, now: float | None = None, leeway: float = 30) -> dict[str, Any]:
    """Verify an HS256 token (kept for callers of the earlier API; ``now`` is ignored
    unless given, then expiry is checked against it)."""
    alg = _header(token).get("alg")
    if alg != "HS256":
        raise AuthError("unsupported token algorithm")
    if now is None:
        return _decode(token, secret, "HS256", audience=None, issuer=None, leeway=leeway)
    claims = _decode(token, secret, "HS256", audience=None, issuer=None, leeway=math.inf)
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and now > exp + leeway:
        raise AuthError("token expired")
    return claims


def _header(token: str) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise AuthError("malformed token") from None
    if not isinstance(header, dict):
        raise AuthError("malformed token")
    return header


def _jwk_key(jwk: jwt.PyJWK, alg: str) -> Any:
    """The key of a JWK, refused for a token whose ``alg`` differs from the one the JWK declares."""
    declared = jwk._jwk_data.get("alg")
    if declared and declared != alg:
        raise AuthError("token algorithm does not match its key")
    return jwk.key


class JwksKeys:
    """The signing keys published at a JWKS URL, fetched with an async httpx client.

    Keys are looked up by ``kid``. An unknown ``kid`` triggers a refetch (the provider
    rotated its keys), at most once per ``min_refresh_s`` however many requests carry
    it; a set older than ``max_age_s`` is refetched on next use (a failed refetch keeps
    the old keys). Concurrent callers share one fetch.
    """

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient | None = None,
        *,
        min_refresh_s: float = 30.0,
        max_age_s: float = 3600.0,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self._http = http
        self._min_refresh_s = min_refresh_s
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at = -math.inf
        self._attempted_at = -math.inf
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def key(self, kid: str | None) -> jwt.PyJWK:
        if time.monotonic() - self._fetched_at > self._max_age_s:
            await self._refresh(force_interval=False)
        found = self._lookup(kid)
        if found is None:
            await self._refresh(force_interval=True)
            found = self._lookup(kid)
        if found is None:
            raise AuthError("token signed with an unknown key")
        return found

    def _lookup(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self, *, force_interval: bool) -> None:
        started = time.monotonic()
        async with self._lock:
            # Another caller fetched while we waited: use its result.
            if self._attempted_at >= started:
                return
            if force_interval and time.monotonic() - self._attempted_at < self._min_refresh_s:
                return
            self._attempted_at = time.monotonic()
            try:
                keys = await self._fetch()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("fetching the JWKS failed", extra={"url": self.url, "error": str(exc)[:200]})
                return
            self._keys, self._fetched_at = keys, time.monotonic()
            self.fetches += 1

    async def _fetch(self) -> dict[str | None, jwt.PyJWK]:
        if self._http is not None:
            response = await self._http.get(self.url, timeout=self._timeout_s)
        else:
            async with httpx.AsyncClient(timeout=self._timeout_s) as client:
                response = await client.get(self.url)
        response.raise_for_status()
        data = orjson.loads(response.content)
        entries = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError("JWKS has no 'keys' list")
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                keys[entry.get("kid")] = jwt.PyJWK(entry)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
                continue  # a key type or algorithm this build cannot use: skip it
        return keys


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
        self.jwks = (
            JwksKeys(jwks_url, http, min_refresh_s=jwks_min_refresh_s, max_age_s=jwks_max_age_s) if jwks_url else None
        )
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
            return Identity(LOCAL_USER, authorization)
        token = self._bearer(authorization)
        header = _header(token)
        alg = header.get("alg")
        if alg in ASYMMETRIC_ALGS and self._public_key is None and self.jwks is not None:
            jwk = await self.jwks.key(header.get("kid") if isinstance(header.get("kid"), str) else None)
            claims = self._claims(token, _jwk_key(jwk, str(alg)), str(alg))
            note_user(str(claims["sub"]))
            return Identity(str(claims["sub"]), authorization)
        return self.identify(authorization)

    async def prefetch(self, authorization: str | None) -> None:
        """Make sure the JWKS key a token names is cached (fetching it if needed); never raises."""
        if self.mode == "none" or self.jwks is None or self._public_key is not None:
            return
        try:
            header = _header(self._bearer(authorization))
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
            return Identity(LOCAL_USER, authorization)
        token = self._bearer(authorization)
        header = _header(token)
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
            key = _jwk_key(jwk, str(alg))
        else:
            raise AuthError("unsupported token algorithm")
        claims = self._claims(token, key, str(alg))
        note_user(str(claims["sub"]))  # the logs say who; the token itself never reaches them
        return Identity(str(claims["sub"]), authorization)

    def _claims(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        return _decode(
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
