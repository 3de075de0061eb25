"""``agentchat keywords prune``: delete rarely used, stale keywords from the keyword index
(``agenttools/rag/keywords.py``) in the service's database.

Its own module, like the other commands' (``kb``, ``migrate``, ``compact``): its options
beside what it does, and nothing of it imported until it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from app.cli.counts import noun_for, plural
from app.cli.groups import command_group
from app.cli.ranges import integer_in, number_in
from app.config_env import DAYS_BOUNDS, KEYWORD_MIN_USAGE_BOUNDS

if TYPE_CHECKING:
    from app.config import Settings  # imported by the command that runs: not by its --help


def add_keywords_command(sub: Any) -> None:
    kw = sub.add_parser(
        "keywords", help="keyword index maintenance",
        description="The keyword index the knowledge-base tools learn from searches (which words found what). "
        "`prune` deletes the keywords rarely used and not used for a while.",
    )
    kw_sub = command_group(kw, dest="kw_command")
    prune = kw_sub.add_parser("prune", help="delete rarely used, stale keywords")
    prune.add_argument("--min-usage", type=integer_in(KEYWORD_MIN_USAGE_BOUNDS), required=True,
                       help=f"delete keywords used fewer times than this ({KEYWORD_MIN_USAGE_BOUNDS.lo:,}"
                       f"-{KEYWORD_MIN_USAGE_BOUNDS.hi:,}; the service's own pruning uses "
                       "AGENT_KEYWORD_MIN_USAGE)")
    prune.add_argument("--older-than", type=number_in(DAYS_BOUNDS), required=True,
                       help="…and unused for more than this many days (0 or more)")


async def run_prune_keywords(args: argparse.Namespace, settings: Settings) -> int:
    from app.cli.database import StorageUnavailable, cli_database, open_cli_storage

    try:  # the service's database (AGENT_DATABASE_URL, else AGENT_DB_PATH), never a local copy
        where = cli_database(settings)
        storage = await open_cli_storage(settings, create=False)  # nothing to prune in none
    except StorageUnavailable as exc:
        print(f"agentchat keywords prune: {exc}", file=sys.stderr)
        return 1
    try:
        from agenttools.rag.keywords import KeywordIndex  # once there is a database to prune

        index = KeywordIndex(storage.keywords, storage.external_results)
        removed = await index.prune(min_usage=args.min_usage, older_than_days=args.older_than)
    finally:
        await storage.close()
    print(f"pruned {plural(removed, 'keyword')} (usage < {args.min_usage}, unused for more than "
          f"{args.older_than:g} {noun_for(args.older_than, 'day')})")
    print(where.line())
    return 0


__all__ = ["add_keywords_command", "run_prune_keywords"]
