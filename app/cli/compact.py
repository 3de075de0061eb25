"""``agentchat compact``: the retention pass by hand (``app/retention.py``) — the same
pass the server runs in the background, on the service's database.

Why a command as well: an operator who lowers ``AGENT_RUN_EVENTS_RETENTION_DAYS`` (or
turns on ``AGENT_CONVERSATION_RETENTION_DAYS``) wants the space now, and a deployment
may run it from cron with the background pass off. A conversation it deletes loses its
attachments too, as with the server's pass. Options override the settings for
this one run; ``0`` turns a part off.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from app.cli.counts import plural
from app.cli.ranges import number_in
from app.config_env import DAYS_BOUNDS

if TYPE_CHECKING:
    from app.config import Settings  # imported by the command that runs: not by its --help


def add_compact_command(sub: Any) -> None:
    p = sub.add_parser(
        "compact",
        help="compact old runs' event logs and delete idle conversations now (the retention pass)",
        description="Fold the text events of runs finished more than --run-events-days ago into one event "
        "per stretch (replay keeps its text) and, with --conversation-days, delete conversations idle longer. "
        "Defaults: AGENT_RUN_EVENTS_RETENTION_DAYS, AGENT_CONVERSATION_RETENTION_DAYS.",
    )
    p.add_argument(
        "--run-events-days",
        type=number_in(DAYS_BOUNDS),
        default=None,
        metavar="DAYS",
        help="compact runs finished more than DAYS ago (0: do not compact)",
    )
    p.add_argument(
        "--conversation-days",
        type=number_in(DAYS_BOUNDS),
        default=None,
        metavar="DAYS",
        help="delete conversations idle for more than DAYS (0: keep them)",
    )


async def run_compact(args: argparse.Namespace, settings: Settings) -> int:
    from app.cli.database import StorageUnavailable, cli_database, open_cli_storage

    events_days = settings.run_events_retention_days if args.run_events_days is None else args.run_events_days
    convo_days = settings.conversation_retention_days if args.conversation_days is None else args.conversation_days
    if events_days < 0 or convo_days < 0:
        print("agentchat compact: days must be 0 or more", file=sys.stderr)
        return 2
    try:  # the service's database (AGENT_DATABASE_URL, else AGENT_DB_PATH), never a local copy
        where = cli_database(settings)
        storage = await open_cli_storage(settings, create=False)  # nothing to compact in none
    except StorageUnavailable as exc:
        print(f"agentchat compact: {exc}", file=sys.stderr)
        return 1
    attachments = 0

    async def forget(user_id: str, conversation_id: str) -> None:
        # A deleted conversation's attachments are a private KB bucket, not rows of the
        # conversation: the server's pass removes them through its knowledge base; here
        # the bucket goes at the storage level (the same delete, without loading a KB
        # this command never searches).
        nonlocal attachments
        gone = await storage.kb_index.delete_bucket(attachment_bucket(user_id, conversation_id))
        attachments += len(gone or ())

    try:
        # Once the database is open: ``no database yet`` needs neither the retention pass
        # nor the knowledge base (numpy and the storage's records: most of the start-up).
        from app.retention import RetentionPolicy, retention_pass
        from knowledge.attachments import attachment_bucket

        done = await retention_pass(
            storage.retention,
            storage.history,
            RetentionPolicy(events_days, convo_days, settings.retention_interval_s),
            forget=forget,
        )
    finally:
        await storage.close()
    if not done.ran:
        print("agentchat compact: another process is compacting this database now; nothing done", file=sys.stderr)
        print(where.line())
        return 3
    print(
        f"compacted {plural(done.runs_compacted, 'run')} ({plural(done.events_removed, 'event')} removed); "
        f"deleted {plural(done.conversations_deleted, 'idle conversation')} "
        f"({plural(attachments, 'attachment')} removed)"
    )
    print(where.line())
    return 0


__all__ = ["add_compact_command", "run_compact"]
