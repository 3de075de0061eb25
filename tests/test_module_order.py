"""tests/support/module_order.py: the suite's modules dealt to xdist workers longest first,
each whole and in its own order, and the table it deals by written from a real run."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tests.support.module_order import TABLE, load_durations, longest_modules_first, module_of

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

THREE_MODULES = {
    "test_short": "def test_one(): pass\ndef test_two(): pass\n",
    "test_long": "def test_b(): pass\ndef test_a(): pass\ndef test_c(): pass\n",
    "test_unmeasured": "def test_only(): pass\n",
    "test_middle": "def test_x(): pass\n",
}


def test_modules_are_dealt_longest_first_each_whole_and_in_its_own_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**THREE_MODULES)
    items, _ = pytester.inline_genitems()
    # test_gone.py has no tests any more: its row only counts towards the median (20 s).
    durations = {"test_long.py": 90.0, "test_middle.py": 20.0, "test_short.py": 1.0, "test_gone.py": 20.0}

    ordered = [item.nodeid for item in longest_modules_first(items, durations)]

    assert sorted(ordered) == sorted(item.nodeid for item in items)  # nothing dropped or doubled
    # test_unmeasured.py counts as the median (20 s): after test_long, tied with test_middle
    # and so in its collection order (test_middle.py is collected before test_unmeasured.py).
    assert ordered == [
        "test_long.py::test_b",
        "test_long.py::test_a",
        "test_long.py::test_c",
        "test_middle.py::test_x",
        "test_unmeasured.py::test_only",
        "test_short.py::test_one",
        "test_short.py::test_two",
    ]


def test_without_a_table_the_collection_order_stands(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**THREE_MODULES)
    items, _ = pytester.inline_genitems()
    assert longest_modules_first(items, {}) == items


def test_the_checked_in_table_names_modules_that_exist() -> None:
    durations = load_durations()
    assert durations, f"{TABLE} is empty"
    missing = [module for module in durations if not (REPO / module).is_file()]
    # A removed module's row only goes unused; many would mean the table is stale.
    assert len(missing) <= len(durations) // 10, missing
    assert module_of("tests/storage/test_x.py::TestY::test_z[a::b]") == "tests/storage/test_x.py"


def test_a_run_under_xdist_writes_every_modules_seconds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh path: the workers' reports reach the controller, which writes the table."""
    pytester.makepyfile(**THREE_MODULES)
    table = pytester.path / "durations.json"
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.module_order", "-n", "2", "--dist", "loadfile", f"--module-durations={table}"
    )
    result.assert_outcomes(passed=7)
    seconds = orjson.loads(table.read_bytes())["seconds"]
    assert set(seconds) == {f"{name}.py" for name in THREE_MODULES}
    assert all(value >= 0 for value in seconds.values())
