"""The per-caller resolution cache: TTL, LRU bound, coalescing, no lock across fetches."""

from __future__ import annotations

import asyncio

import pytest

from agenttools.core.backend_client import BackendError
from agenttools.core.resolution import ResolutionCache, caller_key


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_caller_key_hides_the_token() -> None:
    key = caller_key("u1", "Bearer super-secret")
    assert "super-secret" not in key and key.startswith("u1:")
    assert key != caller_key("u1", "Bearer other") and key != caller_key("u2", "Bearer super-secret")


async def test_entries_are_per_caller_and_expire() -> None:
    clock = Clock()
    cache = ResolutionCache(ttl_s=60, clock=clock)
    fetches: list[str] = []

    def fetcher(who: str):
        async def fetch() -> str:
            fetches.append(who)
            return f"list-for-{who}"
        return fetch

    assert await cache.get_or_fetch("alice", "rules", fetcher("alice")) == "list-for-alice"
    assert await cache.get_or_fetch("bob", "rules", fetcher("bob")) == "list-for-bob"
    assert await cache.get_or_fetch("alice", "rules", fetcher("alice")) == "list-for-alice"
    assert fetches == ["alice", "bob"]
    clock.now += 61
    await cache.get_or_fetch("alice", "rules", fetcher("alice"))
    assert fetches == ["alice", "bob", "alice"]
    assert (cache.stats.hits, cache.stats.misses) == (1, 3)


async def test_lru_bound() -> None:
    cache = ResolutionCache(max_entries=2)

    async def fetch() -> int:
        return 1

    for caller in ("a", "b", "c"):
        await cache.get_or_fetch(caller, "k", fetch)
    assert cache.age("a", "k") is None and cache.age("c", "k") is not None


async def test_concurrent_misses_share_one_fetch() -> None:
    cache = ResolutionCache()
    release = asyncio.Event()
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "v"

    tasks = [asyncio.create_task(cache.get_or_fetch("a", "k", fetch)) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*tasks) == ["v"] * 5
    assert calls == 1 and cache.stats.coalesced == 4


async def test_a_slow_fetch_does_not_block_other_keys() -> None:
    cache = ResolutionCache()
    never = asyncio.Event()

    async def slow() -> str:
        await never.wait()
        return "slow"

    async def fast() -> str:
        return "fast"

    stuck = asyncio.create_task(cache.get_or_fetch("alice", "rules", slow))
    await asyncio.sleep(0)
    assert await asyncio.wait_for(cache.get_or_fetch("bob", "rules", fast), timeout=1) == "fast"
    assert await asyncio.wait_for(cache.get_or_fetch("alice", "entities", fast), timeout=1) == "fast"
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck


async def test_failures_reach_waiters_and_are_not_cached() -> None:
    cache = ResolutionCache()
    gate = asyncio.Event()

    async def failing() -> str:
        await gate.wait()
        raise BackendError("HTTP 500: boom")

    first = asyncio.create_task(cache.get_or_fetch("a", "k", failing))
    second = asyncio.create_task(cache.get_or_fetch("a", "k", failing))
    await asyncio.sleep(0)
    gate.set()
    for t in (first, second):
        with pytest.raises(BackendError, match="boom"):
            await t

    async def ok() -> str:
        return "ok"

    assert await cache.get_or_fetch("a", "k", ok) == "ok"


async def test_cancelled_fetch_gives_waiters_a_readable_error() -> None:
    cache = ResolutionCache()
    never = asyncio.Event()

    async def slow() -> str:
        await never.wait()
        return "x"

    owner = asyncio.create_task(cache.get_or_fetch("a", "k", slow))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(cache.get_or_fetch("a", "k", slow))
    await asyncio.sleep(0)
    owner.cancel()
    with pytest.raises(BackendError, match="cancelled"):
        await waiter
