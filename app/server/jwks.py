"""The signing keys an identity provider publishes at a JWKS URL, fetched with the app's
async httpx client (PyJWT's ``PyJWKClient`` is synchronous and would block the event
loop), cached, and refetched for key rotation: on an unknown ``kid`` at most every
``min_refresh_s``, and when older than ``max_age_s``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import httpx
import jwt
import orjson

from app.server.identity import AuthError

log = logging.getLogger("agentchat.auth")


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


__all__ = ["JwksKeys"]
