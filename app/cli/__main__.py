"""``python -m app.cli``: the ``agentchat`` command."""

from app.cli.commands import main

raise SystemExit(main())
