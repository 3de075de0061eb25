"""One paced tool stack per test module, paced again before each test.

Several process tests (signals, storage faults, replicas) stop or break a server while its
runs are mid-flight: the paced model fake keeps them mid-turn until then, and a test then
speeds the fake up so the process carrying the runs on need not crawl. The fake, the
counting proxy and the reference backend are the module's (one start each, not one per
test); each test has servers, a database and run tags of its own. ``stack`` hands a test
the module's stack and puts the pacing back afterwards, so the next test starts paced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support.procs import ToolStack, tool_stack


def paced_stack_fixtures(*, tokens: int, pause_s: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``module_stack, stack = paced_stack_fixtures(tokens=…, pause_s=…)`` in a test module:
    the module-scoped stack and the per-test fixture that re-paces it."""

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def module_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
        async with tool_stack(tmp_path_factory.mktemp("tools"), tokens=tokens, pause_s=pause_s) as tools:
            yield tools

    @pytest.fixture
    def stack(module_stack: ToolStack) -> Iterator[ToolStack]:
        yield module_stack
        module_stack.fake.pause_s = pause_s

    return module_stack, stack


__all__ = ["paced_stack_fixtures"]
