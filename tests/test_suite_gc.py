"""The test process freezes what collection left alive (``tests/conftest.py``,
``pytest_collection_finish``), and still collects what the tests make.

An xdist worker collects the whole suite and keeps its modules, items and fixture
definitions until it ends; unfrozen, every full collection during every later test walked
them again (~400,000 tracked objects, ~0.3 s a pass under load).
"""

from __future__ import annotations

import gc
import weakref


class _Cycle:
    me: object


def test_what_collection_made_is_frozen() -> None:
    assert gc.get_freeze_count() > 10_000


def test_a_cycle_a_test_makes_is_still_collected() -> None:
    cycle = _Cycle()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert gone() is None
