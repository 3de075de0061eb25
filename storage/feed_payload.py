"""The payload of a run's notification — PostgreSQL's ``NOTIFY`` and the sibling
workers' socket (``storage.sqlite.worker_feed``): which run, up to which event, and the
events themselves when they fit.

``<run_id>:<last_seq>`` alone, or followed by ``\\n`` and one line per event,
``<seq>\\t<event>\\t<data>``. ``data`` is compact one-line JSON (orjson escapes control
characters, so no newline, tab or NUL can appear raw), and event names are plain words.
PostgreSQL refuses payloads of 8000 bytes or more; a step whose events do not fit under
``MAX_PAYLOAD_BYTES`` sends the short form and its followers read the log.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.records import RunEvent

#: Below PostgreSQL's 8000-byte limit, with room for the channel and quoting.
MAX_PAYLOAD_BYTES = 7600


def encode_payload(run_id: str, events: Sequence[RunEvent], max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    head = f"{run_id}:{events[-1].seq}"
    body = "\n".join(f"{e.seq}\t{e.event}\t{e.data}" for e in events)
    full = f"{head}\n{body}"
    # Cheap bound first: UTF-8 takes at most 3 bytes per code point of the BMP, 4 above.
    if len(full) * 4 < max_bytes or len(full.encode()) < max_bytes:
        return full
    return head


def decode_payload(payload: str) -> tuple[str, list[RunEvent] | None]:
    """The run id and the carried events (``None``: not carried, read the log). A line
    that does not parse makes the whole payload "not carried" — never a wrong event."""
    head, sep, body = payload.partition("\n")
    run_id, _, _last = head.rpartition(":")
    if not run_id:
        return head, None
    if not sep:
        return run_id, None
    events: list[RunEvent] = []
    for line in body.split("\n"):
        seq, t1, rest = line.partition("\t")
        event, t2, data = rest.partition("\t")
        if not (t1 and t2 and seq.isdigit() and event):
            return run_id, None
        events.append(RunEvent(int(seq), event, data))
    return run_id, events
