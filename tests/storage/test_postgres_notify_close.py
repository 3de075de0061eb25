"""PostgreSQL's run feed after ``close()``: a follower that detaches after the storage
closed (a stream uvicorn cancelled at its shutdown timeout ends during the app's
shutdown, after the exit stack closed the pool) must not start a sender on the closed
pool (``RunEventsListener.announce_followers``)."""

from __future__ import annotations

import asyncio

from tests.support.postgres import TestPostgres


def senders() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "run-followers-send" and not t.done()]


async def test_a_closed_feed_ignores_followers_announced_after(pg_server: TestPostgres) -> None:
    from storage.postgres import open_postgres_storage

    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        feed = storage.run_feed
        assert feed is not None
        heard: list[str] = []
        feed.subscribe_followers(heard.append)
        await asyncio.wait_for(feed.connected.wait(), 10)
        feed.announce_followers("replica-a + r1")  # open: sent, and heard back
        async with asyncio.timeout(10):
            while heard != ["replica-a + r1"]:
                await asyncio.sleep(0.02)
        await storage.close()

        feed.announce_followers("replica-a - r1")  # a follower detaching after the close
        assert senders() == []
