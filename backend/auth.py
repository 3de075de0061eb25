"""Who is calling: demo tokens and unverified JWTs mapped to seeded users.

This is a *reference* backend for development and tests. It accepts the seeded demo
tokens (``Bearer demo-alice``) and any JWT whose ``sub`` names a known user id or
username, **without checking the signature**. An expired ``exp`` is still refused so
expiry paths can be exercised. Production deployments point ``AGENT_BACKEND_URL`` at
the real Ichor service, which verifies tokens properly.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass

import orjson
from starlette.requests import Request

from backend.db import Database, request_db
from backend.responses import ApiError

ADMIN_ROLE = "admin"


@dataclass(frozen=True, slots=True)
class AuthUser:
    id: str
    username: str
    role_ids: frozenset[str]
    role_names: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return ADMIN_ROLE in self.role_names


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message)


def _jwt_subject(token: str) -> str:
    """The ``sub`` claim of a JWT, read without verifying the signature."""
    parts = token.split(".")
    if len(parts) != 3:
        raise _unauthenticated("unknown token")
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _unauthenticated("malformed JWT payload") from None
    if not isinstance(claims, dict):
        raise _unauthenticated("malformed JWT payload")
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp < time.time():
        raise _unauthenticated("token expired")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise _unauthenticated("JWT has no subject")
    return sub


async def authenticate(db: Database, authorization: str | None) -> AuthUser:
    """Resolve an ``Authorization`` header to a user or raise a 401 ``ApiError``."""
    if not authorization:
        raise _unauthenticated("authorization header required: Bearer <token>")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthenticated("expected authorization format: Bearer <token>")
    row = await db.fetch_one(
        "SELECT u.id, u.username FROM api_tokens t JOIN users u ON u.id = t.user_id "
        "WHERE t.token = ? AND u.is_active = 1",
        (token,),
    )
    if row is None:
        subject = _jwt_subject(token)
        row = await db.fetch_one(
            "SELECT id, username FROM users WHERE (id = ? OR username = ?) AND is_active = 1",
            (subject.lower(), subject),
        )
        if row is None:
            raise _unauthenticated("token subject is not a known user")
    roles = await db.fetch_all(
        "SELECT r.id, r.name FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = ?",
        (row["id"],),
    )
    return AuthUser(
        id=row["id"],
        username=row["username"],
        role_ids=frozenset(r["id"] for r in roles),
        role_names=frozenset(r["name"] for r in roles),
    )


async def require_user(request: Request) -> AuthUser:
    return await authenticate(request_db(request), request.headers.get("authorization"))
