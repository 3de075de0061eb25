"""``agentchat``, the command line: ``serve``, ``ingest``, ``backend``, ``migrate-db`` and more.

The commands and their parser (``commands``; the package exports its ``main``), the
knowledge-base commands (``kb``), the database move (``migrate``), the CLI's database
(``database``), a knowledge base on its own storage (``kb_file``), uvicorn with a drain on
SIGTERM (``serving``) and garbage-collector settings (``gcpolicy``). ``python -m app.cli``
runs it; ``main`` is the console script.
"""

from app.cli.commands import main

__all__ = ["main"]
