"""Name → UUID resolution for entities, trigger types, rules and action types.

The model speaks in names (``inventory.inventory_items``, ``on_create``, "Low stock
alert"); the backend wants UUIDs. Lookups fetch the backend's full lists, so they are
cached — but, unlike the original, the cache is

* **per caller** (what one token may see is never served to another),
* **bounded** (LRU over caller × kind) and **short-lived** (TTL, default 60 s),
* **lock-free across HTTP**: concurrent misses for the same key share one in-flight
  future instead of queueing behind a mutex, so a slow backend delays only the callers
  that need that list.

Hit / miss counters are kept for the benchmark and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agenttools.core.backend_client import BackendClient, BackendError, build_path, require_sequence
from agenttools.core.ids import parse_uuid

__all__ = [
    "ActionTypeInfo",
    "CacheStats",
    "ResolutionCache",
    "Resolver",
    "caller_key",
    "normalise_name",
]

T = TypeVar("T")
Clock = Callable[[], float]

_RULE_PAGE_ROWS = 1000
_RULE_MAX_PAGES = 20


def caller_key(user_id: str | None, authorization: str | None) -> str:
    """Cache partition for one caller: the user id plus a hash of the credentials.

    The raw token never becomes a key (keys may show up in logs or metrics).
    """
    digest = hashlib.sha256((authorization or "").encode()).hexdigest()[:16]
    return f"{user_id or 'anonymous'}:{digest}"


def normalise_name(value: str) -> str:
    """Case- and width-insensitive key for fuzzy name matching."""
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    refreshes: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses + self.coalesced
        return (self.hits + self.coalesced) / total if total else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "coalesced": self.coalesced,
            "refreshes": self.refreshes,
            "hit_rate": round(self.hit_rate, 4),
        }


@dataclass(slots=True)
class _Entry:
    value: Any
    fetched_at: float


@dataclass
class ResolutionCache:
    """TTL + LRU cache keyed by ``(caller, kind)`` with in-flight coalescing.

    Built once per app (the app factory owns it); nothing here is module-global.
    """

    ttl_s: float = 60.0
    max_entries: int = 2048
    clock: Clock = time.monotonic
    stats: CacheStats = field(default_factory=CacheStats)
    _entries: OrderedDict[tuple[str, str], _Entry] = field(default_factory=OrderedDict)
    _inflight: dict[tuple[str, str], asyncio.Future[Any]] = field(default_factory=dict)

    def age(self, caller: str, kind: str) -> float | None:
        entry = self._entries.get((caller, kind))
        return None if entry is None else self.clock() - entry.fetched_at

    def invalidate(self, caller: str, kind: str) -> None:
        self._entries.pop((caller, kind), None)

    async def get_or_fetch(
        self, caller: str, kind: str, fetch: Callable[[], Awaitable[T]]
    ) -> T:
        key = (caller, kind)
        entry = self._entries.get(key)
        if entry is not None:
            if self.clock() - entry.fetched_at < self.ttl_s:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return entry.value  # type: ignore[no-any-return]
            del self._entries[key]
        pending = self._inflight.get(key)
        if pending is not None:
            self.stats.coalesced += 1
            return await asyncio.shield(pending)  # type: ignore[no-any-return]
        self.stats.misses += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # Waiters that gave up must not leave "exception never retrieved" warnings.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._inflight[key] = future
        try:
            value = await fetch()
        except asyncio.CancelledError:
            future.set_exception(BackendError("the lookup was cancelled; try again"))
            raise
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            self._entries[key] = _Entry(value, self.clock())
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            future.set_result(value)
            return value
        finally:
            self._inflight.pop(key, None)


@dataclass(frozen=True, slots=True)
class ActionTypeInfo:
    """What the tools need to know about one action type."""

    type: str
    description: str
    ports: tuple[str, ...]
    default_port: str
    config_schema: dict[str, Any]

    @property
    def required_config_fields(self) -> tuple[str, ...]:
        required = self.config_schema.get("required") if isinstance(self.config_schema, dict) else None
        return tuple(str(r) for r in required) if isinstance(required, list) else ()


def _action_type_info(raw: dict[str, Any]) -> ActionTypeInfo | None:
    type_name = raw.get("type")
    if not isinstance(type_name, str) or not type_name:
        return None
    ports: list[str] = []
    default = ""
    for port in raw.get("output_ports") or []:
        if not isinstance(port, dict) or not isinstance(port.get("name"), str):
            continue
        ports.append(port["name"])
        if not default and port.get("is_default") is True:
            default = port["name"]
    if not default:
        default = ports[0] if len(ports) == 1 else "success"
    schema = raw.get("config_schema")
    return ActionTypeInfo(
        type=type_name,
        description=str(raw.get("description") or ""),
        ports=tuple(ports),
        default_port=default,
        config_schema=schema if isinstance(schema, dict) else {},
    )


@dataclass(slots=True)
class _NameIndex:
    """Exact names first, then a case/width-insensitive fallback (used only if unambiguous)."""

    exact: dict[str, str] = field(default_factory=dict)
    folded: dict[str, set[str]] = field(default_factory=dict)

    def add(self, name: str, ident: str) -> None:
        self.exact.setdefault(name, ident)
        self.folded.setdefault(normalise_name(name), set()).add(ident)

    def find(self, *candidates: str) -> str | None:
        for candidate in candidates:
            if candidate in self.exact:
                return self.exact[candidate]
        for candidate in candidates:
            ids = self.folded.get(normalise_name(candidate))
            if ids and len(ids) == 1:
                return next(iter(ids))
        return None


class Resolver:
    """Resolves names for one caller, through the shared per-caller cache."""

    #: A name that is missing from a cached list older than this triggers one refetch
    #: (it may have been created a moment ago).
    refetch_after_s: float = 5.0

    def __init__(self, client: BackendClient, cache: ResolutionCache, caller: str) -> None:
        self._client = client
        self._cache = cache
        self._caller = caller

    # -- cached lists -----------------------------------------------------------------

    async def _cached(self, kind: str, fetch: Callable[[], Awaitable[T]]) -> T:
        return await self._cache.get_or_fetch(self._caller, kind, fetch)

    async def _lookup(
        self, kind: str, fetch: Callable[[], Awaitable[_NameIndex]], *candidates: str
    ) -> str | None:
        index = await self._cached(kind, fetch)
        found = index.find(*candidates)
        if found is None:
            age = self._cache.age(self._caller, kind)
            if age is not None and age >= self.refetch_after_s:
                self._cache.invalidate(self._caller, kind)
                self._cache.stats.refreshes += 1
                index = await self._cached(kind, fetch)
                found = index.find(*candidates)
        return found

    async def _fetch_entities(self) -> _NameIndex:
        try:
            rows = require_sequence(
                await self._client.get(build_path("v1", "workflow", "entities")), "entities"
            )
        except BackendError as exc:
            raise BackendError(f"could not load entities to resolve the name: {exc}") from None
        index = _NameIndex()
        for row in rows:
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                schema, name = row.get("schema_name"), row.get("name")
                if isinstance(schema, str) and isinstance(name, str):
                    index.add(f"{schema}.{name}", row["id"])
        return index

    async def _fetch_trigger_types(self) -> _NameIndex:
        try:
            rows = require_sequence(
                await self._client.get(build_path("v1", "workflow", "trigger-types")),
                "trigger types",
            )
        except BackendError as exc:
            raise BackendError(f"could not load trigger types to resolve the name: {exc}") from None
        index = _NameIndex()
        for row in rows:
            if isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("name"), str):
                index.add(row["name"], row["id"])
        return index

    async def _fetch_rules(self) -> _NameIndex:
        """Every rule the caller can see, page by page (the original stopped at 500)."""
        index = _NameIndex()
        path = build_path("v1", "workflow", "rules")
        for page in range(1, _RULE_MAX_PAGES + 1):
            try:
                body = await self._client.get(path, {"page": page, "rows": _RULE_PAGE_ROWS})
            except BackendError as exc:
                raise BackendError(f"could not load workflow rules to resolve the name: {exc}") from None
            items = body.get("items") if isinstance(body, dict) else body
            if not isinstance(items, list):
                raise BackendError("unexpected backend response for workflow rules")
            for row in items:
                if isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("name"), str):
                    index.add(row["name"], row["id"])
            total = body.get("total") if isinstance(body, dict) else None
            if len(items) < _RULE_PAGE_ROWS or (isinstance(total, int) and page * _RULE_PAGE_ROWS >= total):
                break
        return index

    async def action_types(self) -> dict[str, ActionTypeInfo]:
        async def fetch() -> dict[str, ActionTypeInfo]:
            try:
                rows = require_sequence(
                    await self._client.get(build_path("v1", "workflow", "action-types")),
                    "action types",
                )
            except BackendError as exc:
                raise BackendError(f"could not load action types: {exc}") from None
            infos: dict[str, ActionTypeInfo] = {}
            for row in rows:
                if isinstance(row, dict) and (info := _action_type_info(row)) is not None:
                    infos.setdefault(info.type, info)
            return infos

        return await self._cached("action_types", fetch)

    # -- resolvers ----------------------------------------------------------------------

    async def entity_id(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise BackendError("entity is required: use 'schema.table' (e.g. 'inventory.inventory_items') or a UUID")
        text = value.strip()
        if (uid := parse_uuid(text)) is not None:
            return uid
        if "." not in text:
            raise BackendError(
                f"entity must be in 'schema.table' format (e.g. 'inventory.inventory_items') or a UUID, got {text!r}"
            )
        found = await self._lookup("entities", self._fetch_entities, text)
        if found is None:
            raise BackendError(
                f"entity {text!r} not found; call discover with category 'entities' to list the available ones"
            )
        return found

    async def trigger_type_id(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise BackendError("trigger_type is required: use a trigger type name (e.g. 'on_create') or a UUID")
        text = value.strip()
        if (uid := parse_uuid(text)) is not None:
            return uid
        found = await self._lookup("trigger_types", self._fetch_trigger_types, text)
        if found is None:
            raise BackendError(
                f"trigger type {text!r} not found; call discover with category 'trigger_types' to list them"
            )
        return found

    async def rule_id(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise BackendError("workflow_id is required: provide the rule's UUID or name, or open the workflow")
        text = value.strip()
        if (uid := parse_uuid(text)) is not None:
            return uid
        spaced = text.replace("_", " ").replace("-", " ")
        found = await self._lookup("rules", self._fetch_rules, text, spaced)
        if found is None:
            raise BackendError(
                f"workflow rule {text!r} not found; call list_workflow_rules to see the available rules"
            )
        return found

    async def default_port(self, action_type: str) -> str:
        info = (await self.action_types()).get(action_type)
        return info.default_port if info else "success"
