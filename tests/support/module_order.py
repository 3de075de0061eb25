"""A pytest plugin: under pytest-xdist, the suite's longest modules are dealt out first.

``make test`` runs ``--dist loadfile``: each module runs whole on one worker, handed out
in the order the workers collected them (``--no-loadscope-reorder``; xdist's default order
is by number of tests, which put a module of one 97 s test near the end). A long module
dealt last ran on one worker while the other three had finished and idled, so the run
took as long as its tail. Dealt longest first (from the checked-in table of each module's
last measured seconds, ``tests/data/module_durations.json``), the short modules come last
and fill the workers' ends evenly.

Only the order changes: every module still runs whole, on one worker, in its own order.
Outside xdist (a plain ``pytest``) the collection order is left as it is.

Refreshing the table (after adding or changing a long module): one full run that writes
it, ``make test PYTEST_ARGS=--module-durations=tests/data/module_durations.json``, on an
otherwise idle machine. A module missing from the table is dealt as if it took the
table's median; one that is in the table but gone is ignored.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

TABLE = Path(__file__).resolve().parents[1] / "data" / "module_durations.json"


def module_of(nodeid: str) -> str:
    """The module part of a test id: ``tests/test_x.py::test_y[a]`` -> ``tests/test_x.py``."""
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = TABLE) -> dict[str, float]:
    """The table's seconds per module; empty when there is no table."""
    try:
        table = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    return {str(module): float(seconds) for module, seconds in table["seconds"].items()}


def longest_modules_first(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """``items`` with whole modules ordered by their seconds in ``durations``, longest first;
    ties and the order inside each module as collected. A module missing from the table
    counts as the table's median (a new module is seldom the longest)."""
    unknown = statistics.median(durations.values()) if durations else 0.0
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(module_of(item.nodeid), index)

    def key(indexed: tuple[int, pytest.Item]) -> tuple[float, int, int]:
        index, item = indexed
        module = module_of(item.nodeid)
        return (-durations.get(module, unknown), first_seen[module], index)

    return [item for _, item in sorted(enumerate(items), key=key)]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("agentchat").addoption(
        "--module-durations",
        metavar="PATH",
        default=None,
        help="write each module's total seconds (setup, call and teardown of its tests) to PATH "
        "as the table tests/support/module_order.py deals modules out by",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # not an xdist worker: nothing is dealt out, keep the collection order
    items[:] = longest_modules_first(items, load_durations())


class ModuleDurationRecorder:
    """Sums each module's report durations where every report arrives (the controller under
    xdist, else the one process) and writes the table at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.totals: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.totals[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        table = {
            "about": "Each test module's seconds (setup, call and teardown of its tests) in one full run; "
            "tests/support/module_order.py deals the longest out first. Refresh: "
            "make test PYTEST_ARGS=--module-durations=tests/data/module_durations.json",
            "seconds": {module: round(seconds, 1) for module, seconds in sorted(self.totals.items())},
        }
        self.path.write_bytes(orjson.dumps(table, option=orjson.OPT_INDENT_2) + b"\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("module_durations")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ModuleDurationRecorder(Path(path)), "module-duration-recorder")
