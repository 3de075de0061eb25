"""How long the storage's close may wait, in a module that imports nothing.

Why apart: a serving process's close budget (``app/ops/close_budget.py``) adds these
bounds to the others, and ``serve --workers``' supervisor reads that budget; naming them
in the engines' modules made the supervisor load aiosqlite, the KB index and numpy
(about 20 MB) for two numbers. The engines import them from here.
"""

from __future__ import annotations

#: How long a cancelled ``close`` of the SQLite database still waits for its connections
#: to close: past the writer's own bound for committing what is queued
#: (``AGENT_DB_WRITE_RETRY_S`` + 5 s) (``storage/sqlite/database.py``).
DATABASE_CLOSE_S = 30.0
#: How long the sibling feed's ``close`` waits for the readers of siblings' connections
#: once it closed them (``storage/sqlite/worker_feed.py``).
FEED_CLOSE_S = 5.0

__all__ = ["DATABASE_CLOSE_S", "FEED_CLOSE_S"]
