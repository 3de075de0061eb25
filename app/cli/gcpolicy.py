"""Garbage-collector settings for a long-running server process.

Every open stream keeps a few hundred Python objects alive (connection, tasks, run
state). CPython's full collections walk all of them and stop the event loop while they
do: at a thousand open streams that is a pause of tens to hundreds of milliseconds,
which every stream feels as delay. Two standard remedies, applied once the server is
up: freeze what start-up allocated (modules, the app, its services) so collections
never walk it again, and raise the young-generation threshold so short-lived objects
(events, frames, buffers) die before a collection promotes them toward the old
generation, which makes full collections rarer.

Measured (issue 23, docs/scaling.md "Capacity, measured"; bench/gcprobe/): over bursts
and 100/300-run levels after start-up, CPython's defaults spent 0.57-1.41 s in the
collector with full collections of 124-371 ms; freezing alone 0.40-0.63 s (full
collections 23-63 ms, they walk only what serving allocated); freezing and this threshold
0.06-0.12 s with no middle or full collection at all (young ones up to 40-53 ms).
``/metrics`` shows it in force: ``agentchat_gc_frozen_objects``, ``agentchat_gc_threshold``.
"""

from __future__ import annotations

import gc

DEFAULT_YOUNG_THRESHOLD = 20_000


def tune_for_start(young_threshold: int = DEFAULT_YOUNG_THRESHOLD) -> None:
    """The serving young-generation threshold from the first line of every ``agentchat``
    process on, before its imports - not only once a server is up. A start creates some
    hundred thousand objects that live as long as the process (modules, classes, their
    functions), so CPython's default threshold (700) ran ~165 collections during a serve's
    start that freed almost nothing (~40 ms of its ~1 s of CPU); with this one, five.
    ``serve`` then applies the whole policy as before (``tune_for_serving``); the other
    commands keep this threshold for their run: fewer collections of what lives, and
    cyclic garbage is still collected."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(max(700, young_threshold), middle, old)


def tune_for_serving(young_threshold: int = DEFAULT_YOUNG_THRESHOLD) -> tuple[int, int, int]:
    """Apply the serving GC policy to this process; returns the new thresholds.

    Only the young generation is collected before the freeze (what the app's build left
    last): a full collection walked every object start-up made (~70,000, ~40 ms of a
    serve start's CPU) to free 25-175 of them (measured on this tree's serve, fresh and
    restarted). Those few cycles stay frozen - a fixed few kB; objects freed by their
    reference count are freed frozen or not - as gc.freeze()'s own documentation has it
    (no collection before the freeze at all)."""
    gc.collect(0)
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(max(700, young_threshold), middle, old)
    return gc.get_threshold()
