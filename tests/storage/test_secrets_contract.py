"""The ``SecretStore`` contract: a named secret is generated once and every process on
the database reads the same value — also when several start at the same moment."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from storage.open import open_storage
from tests.storage.conftest import ENGINES
from tests.support.pg_table_lock import writes_held
from tests.support.postgres import TestPostgres


async def test_the_first_value_stored_is_the_one_every_caller_gets(store_engine: Any) -> None:
    store = store_engine.secrets
    first = await store.get_or_create("stream_token", "alpha")
    again = await store.get_or_create("stream_token", "beta")
    other = await store.get_or_create("another", "gamma")
    assert (first, again, other) == ("alpha", "alpha", "gamma")


@pytest.fixture(params=ENGINES)
async def three_processes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Any]]:
    """Three storage bundles opened on one database, as three replicas would."""
    async with AsyncExitStack() as stack:
        if request.param == "sqlite":
            target: str | Path = tmp_path / "shared.db"
        else:
            server: TestPostgres = request.getfixturevalue("pg_server")
            target = stack.enter_context(server.database())
        bundles = []
        for _ in range(3):
            bundle = await open_storage(target)
            stack.push_async_callback(bundle.close)
            bundles.append(bundle)
        yield bundles


async def test_processes_starting_together_agree_on_one_value(three_processes: list[Any]) -> None:
    candidates = [secrets.token_urlsafe(16) for _ in range(12)]
    got = await asyncio.gather(
        *(three_processes[i % 3].secrets.get_or_create("stream_token", value) for i, value in enumerate(candidates))
    )
    assert len(set(got)) == 1 and got[0] in candidates
    # A process that starts later reads it too.
    assert await three_processes[1].secrets.get_or_create("stream_token", "late") == got[0]


async def test_replace_stores_the_new_value_and_returns_the_one_it_replaced(store_engine: Any) -> None:
    store = store_engine.secrets
    assert await store.replace("key_check", "one") is None
    assert await store.replace("key_check", "two") == "one"
    assert await store.replace("key_check", "two") == "two"
    assert await store.get_or_create("key_check", "three") == "two"
    assert await store.get_or_create("other", "kept") == "kept"  # other names untouched


async def test_replacing_at_the_same_moment_each_reads_the_value_it_replaced(pg_server: TestPostgres) -> None:
    """Replicas starting together on a fresh database (``app/key_check.py``): each
    replace must read the value it replaces, as if they ran one after another - one
    reads nothing, every other value is replaced once. Before, on PostgreSQL each read
    without locking, so all read nothing and two replicas with different keys both
    missed the check. The table's writes are held until every replace waits on them:
    the reads (before the fix, each replace's first statement) all run first."""
    candidates = [f"fingerprint-{i}" for i in range(6)]
    with pg_server.database() as url:
        async with AsyncExitStack() as stack:
            bundles = []
            for _ in range(3):
                bundle = await open_storage(url)
                stack.push_async_callback(bundle.close)
                bundles.append(bundle)
            async with writes_held(url, "app_secrets") as held:
                replaces = asyncio.gather(
                    *(bundles[i % 3].secrets.replace("key_check", value) for i, value in enumerate(candidates))
                )
                await held.until_waiting(len(candidates), "every replace to wait on the table's writes")
                await held.release()
                got = await replaces
            last = await bundles[0].secrets.replace("key_check", "later")
    assert got.count(None) == 1, got
    replaced = [value for value in got if value is not None]
    assert len(set(replaced)) == len(replaced) and set(replaced) <= set(candidates), got
    assert set(candidates) - set(replaced) == {last}  # the one nobody replaced stayed
