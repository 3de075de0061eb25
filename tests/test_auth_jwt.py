"""Bearer tokens through PyJWT: HS256, RS256/ES256 from a loopback JWKS server (cached,
rotated) or a PEM key; ``aud``/``iss``/expiry checks with clock skew. Keys are generated
by the tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agenttools.core.registry import ToolRegistry
from app.config import ConfigError, Settings
from app.server import jwks as app_jwks
from app.server.auth import Authenticator, AuthError, sign_hs256
from tests.conftest import running_app
from tests.fakes import running_fake

AUD, ISS = "agentchat", "https://idp.example.test/"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(private: Any, kid: str, alg: str) -> dict[str, Any]:
    algo = jwt.algorithms.RSAAlgorithm if alg.startswith(("RS", "PS")) else jwt.algorithms.ECAlgorithm
    jwk = algo.to_jwk(private.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


def token(private: Any, alg: str, kid: str | None, **claims: Any) -> str:
    now = time.time()
    body = {"sub": "alice", "aud": AUD, "iss": ISS, "iat": int(now), "exp": int(now + 300), **claims}
    return jwt.encode(body, private, algorithm=alg, headers={"kid": kid} if kid else None)


def hs256_by_hand(claims: dict[str, Any], secret: bytes) -> str:
    """An HS256 token keyed with anything (PyJWT itself refuses a PEM as HMAC secret)."""

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(orjson.dumps({"alg": "HS256", "typ": "JWT"})) + "." + b64(orjson.dumps(claims))
    return head + "." + b64(hmac.new(secret, head.encode(), hashlib.sha256).digest())


class JwksServer:
    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.hits = 0
        self.app = Starlette(routes=[Route("/.well-known/jwks.json", self._jwks)])

    async def _jwks(self, request: Request) -> JSONResponse:
        self.hits += 1
        return JSONResponse({"keys": self.keys})


@pytest.fixture
async def jwks() -> AsyncIterator[tuple[JwksServer, str]]:
    server = JwksServer()
    async with running_fake(server.app) as base:
        yield server, base + "/.well-known/jwks.json"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as client:
        yield client


def auth_for(url: str, http: httpx.AsyncClient, **kw: Any) -> Authenticator:
    kw.setdefault("audience", AUD)
    kw.setdefault("issuer", ISS)
    return Authenticator("jwt", None, jwks_url=url, http=http, **kw)


@pytest.mark.parametrize(("make", "alg"), [(rsa_key, "RS256"), (ec_key, "ES256")])
async def test_jwks_signed_tokens_are_accepted(jwks, http, make, alg: str) -> None:
    server, url = jwks
    key = make()
    server.keys = [public_jwk(key, "k1", alg)]
    auth = auth_for(url, http)

    ident = await auth.authenticate("Bearer " + token(key, alg, "k1", sub="bob"))

    assert ident.user_id == "bob"
    # Cached: the synchronous check works too and no second fetch happens.
    assert auth.identify("Bearer " + token(key, alg, "k1")).user_id == "alice"
    await auth.authenticate("Bearer " + token(key, alg, "k1"))
    assert server.hits == 1


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"aud": "someone-else"}, "audience"),
        ({"iss": "https://evil.example.test/"}, "issuer"),
        ({"exp": -120}, "expired"),  # seconds from the moment the token is made
        ({"nbf": 120}, "not yet valid"),
        ({"sub": ""}, "token has no subject"),
        # Too long is said as such, not as a missing subject.
        ({"sub": "u" * 201}, r"token subject is too long \(201 characters; at most 200\)"),
    ],
)
async def test_bad_claims_are_refused(jwks, http, claims: dict[str, Any], reason: str) -> None:
    server, url = jwks
    key = rsa_key()
    server.keys = [public_jwk(key, "k1", "RS256")]
    # Times are taken now, not when the parameters were collected: a long run would
    # otherwise make the "not yet valid" token valid before this test runs.
    now = int(time.time())
    claims = {k: now + v if k in ("exp", "nbf") else v for k, v in claims.items()}
    with pytest.raises(AuthError, match=reason) as err:
        await auth_for(url, http).authenticate("Bearer " + token(key, "RS256", "k1", **claims))
    assert err.value.status == 401


async def test_missing_aud_is_refused_when_configured_and_ignored_otherwise(jwks, http) -> None:
    server, url = jwks
    key = ec_key()
    server.keys = [public_jwk(key, "k1", "ES256")]
    now = int(time.time())
    bare = jwt.encode({"sub": "alice", "iss": ISS, "exp": now + 60}, key, algorithm="ES256", headers={"kid": "k1"})
    with pytest.raises(AuthError, match="aud"):
        await auth_for(url, http).authenticate("Bearer " + bare)
    relaxed = auth_for(url, http, audience=None, issuer=None)
    assert (await relaxed.authenticate("Bearer " + token(key, "ES256", "k1"))).user_id == "alice"


async def test_clock_skew_is_allowed(jwks, http) -> None:
    server, url = jwks
    key = rsa_key()
    server.keys = [public_jwk(key, "k1", "RS256")]
    late = "Bearer " + token(key, "RS256", "k1", exp=int(time.time()) - 10)
    assert (await auth_for(url, http, leeway_s=30).authenticate(late)).user_id == "alice"
    with pytest.raises(AuthError, match="expired"):
        await auth_for(url, http, leeway_s=0).authenticate(late)


async def test_unknown_kid_and_foreign_signature_are_refused(jwks, http) -> None:
    server, url = jwks
    key = rsa_key()
    server.keys = [public_jwk(key, "k1", "RS256")]
    auth = auth_for(url, http)
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("Bearer " + token(key, "RS256", "k-unknown"))
    with pytest.raises(AuthError, match="signature"):
        await auth.authenticate("Bearer " + token(rsa_key(), "RS256", "k1"))


async def test_algorithm_confusion_is_refused(jwks, http) -> None:
    server, url = jwks
    key = rsa_key()
    server.keys = [public_jwk(key, "k1", "RS256")]
    auth = auth_for(url, http)
    # HS256 is not configured here: a token "signed" with anything under HS256 is refused.
    with pytest.raises(AuthError, match="algorithm"):
        await auth.authenticate("Bearer " + sign_hs256({"sub": "mallory", "aud": AUD, "iss": ISS}, "x" * 32))
    with pytest.raises(AuthError, match="algorithm"):  # the JWK says RS256
        await auth.authenticate("Bearer " + token(key, "PS256", "k1"))
    with pytest.raises(AuthError, match="algorithm"):
        await auth.authenticate("Bearer " + jwt.encode({"sub": "m"}, None, algorithm="none"))


async def test_key_rotation_is_picked_up_with_a_minimum_interval(jwks, http, monkeypatch) -> None:
    server, url = jwks
    old, new = rsa_key(), ec_key()
    server.keys = [public_jwk(old, "old", "RS256")]
    # The interval is read on app.server.jwks's monotonic clock: the test moves that clock on
    # instead of sleeping (a time.sleep here would block the event loop serving the JWKS).
    clock = [1000.0]
    monkeypatch.setattr(app_jwks, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    auth = auth_for(url, http, jwks_min_refresh_s=0.2)
    assert (await auth.authenticate("Bearer " + token(old, "RS256", "old"))).user_id == "alice"
    assert server.hits == 1

    server.keys = [public_jwk(new, "new", "ES256")]  # the identity provider rotates
    clock[0] += 0.25  # past the minimum interval
    assert (await auth.authenticate("Bearer " + token(new, "ES256", "new"))).user_id == "alice"
    assert server.hits == 2
    with pytest.raises(AuthError):  # the old key is gone from the set
        await auth.authenticate("Bearer " + token(old, "RS256", "old"))
    # A burst of unknown kids within the interval costs no further fetch.
    for i in range(20):
        clock[0] += 0.005  # time passes, still within the 0.2 s interval
        with pytest.raises(AuthError, match="unknown key"):
            await auth.authenticate("Bearer " + token(new, "ES256", f"bogus-{i}"))
    assert server.hits == 2  # within the minimum interval: no refetch at all
    clock[0] += 0.25
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("Bearer " + token(new, "ES256", "bogus-late"))
    assert server.hits == 3  # the interval passed: one more fetch


async def test_unreachable_jwks_refuses_without_raising_other_errors(http) -> None:
    auth = auth_for("http://127.0.0.1:9/jwks.json", http)
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("Bearer " + token(rsa_key(), "RS256", "k1"))


async def test_pem_public_key_from_settings(tmp_path: Path) -> None:
    key = ec_key()
    pem = tmp_path / "idp.pem"
    pem.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    settings = Settings.from_env(
        {"AGENT_AUTH": "jwt", "AGENT_JWT_PUBLIC_KEY": str(pem), "AGENT_JWT_AUDIENCE": AUD, "AGENT_JWT_ISSUER": ISS}
    )
    auth = Authenticator.from_settings(settings)
    assert auth.identify("Bearer " + token(key, "ES256", None)).user_id == "alice"
    with pytest.raises(AuthError, match="signature"):
        auth.identify("Bearer " + token(ec_key(), "ES256", None))
    # The public key is no HMAC secret.
    with pytest.raises(AuthError, match="algorithm"):
        auth.identify("Bearer " + hs256_by_hand({"sub": "m"}, pem.read_bytes()))


def test_settings_need_a_key_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="AGENT_JWT_JWKS_URL"):
        Settings.from_env({"AGENT_AUTH": "jwt"})
    with pytest.raises(ConfigError, match="no such file"):
        Settings.from_env({"AGENT_AUTH": "jwt", "AGENT_JWT_PUBLIC_KEY": str(tmp_path / "missing.pem")})
    s = Settings.from_env(
        {"AGENT_AUTH": "jwt", "AGENT_JWT_JWKS_URL": "https://idp.test/jwks", "AGENT_JWT_LEEWAY_S": "5"}
    )
    assert s.jwt_jwks_url == "https://idp.test/jwks" and s.jwt_leeway_s == 5


def test_hs256_secret_still_works_with_audience() -> None:
    secret = "s" * 32
    auth = Authenticator("jwt", secret, audience=AUD)
    good = sign_hs256({"sub": "alice", "aud": AUD, "exp": time.time() + 60}, secret)
    assert auth.identify("Bearer " + good).user_id == "alice"
    with pytest.raises(AuthError, match="audience"):
        auth.identify("Bearer " + sign_hs256({"sub": "alice", "aud": "x", "exp": time.time() + 60}, secret))


async def test_app_fetches_rotated_keys_before_the_route_checks_them(jwks, tmp_path: Path) -> None:
    """Through the real app: the JWKS is fetched on the first request, and a rotated key
    works on the first request that uses it."""
    server, url = jwks
    first, second = rsa_key(), ec_key()
    server.keys = [public_jwk(first, "k1", "RS256")]
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_JWKS_URL": url,
            "AGENT_JWT_AUDIENCE": AUD,
            "AGENT_JWT_ISSUER": ISS,
        }
    )
    async with running_app(settings, registry=ToolRegistry(), embedder=None) as (base, app):
        app.state.services.auth.jwks._min_refresh_s = 0.0
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            path = "/v1/agent/conversations/no-such-conversation"
            r = await client.get(path, headers={"Authorization": "Bearer " + token(first, "RS256", "k1")})
            assert r.status_code == 404, r.text  # authenticated; the conversation is not there
            server.keys = [public_jwk(second, "k2", "ES256")]
            r = await client.get(path, headers={"Authorization": "Bearer " + token(second, "ES256", "k2")})
            assert r.status_code == 404, r.text
            r = await client.get(path, headers={"Authorization": "Bearer " + token(second, "ES256", "k2", aud="x")})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            r = await client.get(path, headers={"Authorization": "Bearer " + token(first, "RS256", "zzz")})
            assert r.status_code == 401


async def test_a_token_whose_alg_does_not_fit_the_key_type_is_401_not_500(jwks, tmp_path: Path) -> None:
    """Through the real app, unauthenticated: a token naming an ``alg`` of another key type
    than the configured key (ES256 against an RSA PEM, RS256 against an EC JWK published
    without ``alg``, ES384 against a P-256 key) is refused 401. Before, PyJWT's key
    preparation raised ``TypeError``/``InvalidKeyError`` and anyone could make the
    service answer 500 with a header alone."""
    server, url = jwks
    rsa_pem, ec_256 = rsa_key(), ec_key()
    pem = tmp_path / "idp.pem"
    pem.write_bytes(
        rsa_pem.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    jwk = public_jwk(ec_256, "k-ec", "ES256")
    del jwk["alg"]  # many identity providers publish keys without it
    server.keys = [jwk]
    base_env = {
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_AUDIENCE": AUD,
        "AGENT_JWT_ISSUER": ISS,
    }
    cases = [
        ({"AGENT_JWT_PUBLIC_KEY": str(pem)}, token(ec_key(), "ES256", None)),
        ({"AGENT_JWT_PUBLIC_KEY": str(pem)}, token(ec.generate_private_key(ec.SECP384R1()), "ES384", None)),
        ({"AGENT_JWT_JWKS_URL": url}, token(rsa_key(), "RS256", "k-ec")),
        ({"AGENT_JWT_JWKS_URL": url}, token(ec.generate_private_key(ec.SECP384R1()), "ES384", "k-ec")),
    ]
    for i, (key_env, bad) in enumerate(cases):
        settings = Settings.from_env({**base_env, **key_env, "AGENT_DB_PATH": str(tmp_path / f"agent{i}.sqlite3")})
        async with (
            running_app(settings, registry=ToolRegistry(), embedder=None) as (base, _app),
            httpx.AsyncClient(base_url=base, timeout=10) as client,
        ):
            r = await client.get("/v1/agent/conversations", headers={"Authorization": "Bearer " + bad})
            assert r.status_code == 401, (key_env, r.status_code, r.text)
            assert r.json()["error"] == "unauthenticated" and "algorithm" in r.json()["detail"], r.text
            good = token(ec_256, "ES256", "k-ec") if "AGENT_JWT_JWKS_URL" in key_env else token(rsa_pem, "RS256", None)
            r = await client.get("/v1/agent/conversations", headers={"Authorization": "Bearer " + good})
            assert r.status_code == 200, r.text


async def test_a_subject_no_row_can_be_keyed_by_is_401(tmp_path: Path) -> None:
    """Through the real app: a signed token whose ``sub`` holds a NUL, another control
    character or a lone surrogate (JSON's ``"\\ud800"``) is refused 401. Every stored row
    is keyed by the subject: before, the surrogate was a 500 on every route (no UTF-8 for
    SQLite), and the NUL one on PostgreSQL."""
    secret = "subject-secret-0123456789abcdef"
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_SECRET": secret,
        }
    )
    now = int(time.time())
    async with (
        running_app(settings, registry=ToolRegistry(), embedder=None) as (base, _app),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        for sub in ("a\ud800b", "a\x00b", "line\nbreak"):
            bad = sign_hs256({"sub": sub, "exp": now + 300}, secret)
            r = await client.get("/v1/agent/conversations", headers={"Authorization": "Bearer " + bad})
            assert r.status_code == 401, (sub, r.status_code, r.text)
            assert "subject" in r.json()["detail"], r.text
        for sub in ("alice", "ünïcødé 日本", "a.b@c|d"):
            good = sign_hs256({"sub": sub, "exp": now + 300}, secret)
            r = await client.get("/v1/agent/conversations", headers={"Authorization": "Bearer " + good})
            assert r.status_code == 200, (sub, r.text)
