"""``python -m events.typescript``: print the schema document the TypeScript types are
generated from (``clients/typescript/generate.mjs`` reads it on stdin).

Kept out of ``events/__init__`` so ``-m`` runs it as a fresh module. Keys are sorted and
the output is stable, so the checked-in ``events.d.ts`` changes only when an event does.
"""

from __future__ import annotations

import sys

import orjson

from events.schema import event_stream_schema


def main() -> None:
    sys.stdout.buffer.write(orjson.dumps(event_stream_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))


if __name__ == "__main__":
    main()
