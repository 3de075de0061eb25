"""``python -m app.cli``: the ``agentchat`` command."""

from app.cli import main

raise SystemExit(main())
