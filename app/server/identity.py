"""Who a request is, and why it was refused: ``Identity`` and ``AuthError``, shared by
the token checks (``app/server/jwt_tokens.py``), the JWKS keys (``app/server/jwks.py``)
and the authenticator (``app/server/auth.py``). Their own module so those three import
it and never each other in a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The one user of ``AGENT_AUTH=none``.
LOCAL_USER = "local"


class AuthError(Exception):
    """A request refused because its caller could not be identified; ``status`` is the HTTP answer (401)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller: the token's subject, and the header it came with (the tools pass it on to the backend)."""

    user_id: str
    authorization: str | None


__all__ = ["LOCAL_USER", "AuthError", "Identity"]
