"""``tests/browser/cdp.launch`` leaves nothing behind in the temporary directory: the
browser tests left ``cdp-profile-*`` directories (a helper process of Chromium's still
writing into the profile while it was removed) and Chromium's own
``org.chromium.Chromium.*`` directories (its singleton socket, left when the browser is
stopped before its shutdown ends) in ``/tmp`` after every run."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.cdp import find_chromium, launch

pytestmark = pytest.mark.slow


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A temporary directory of the test's own, with a short path: Chromium refuses to
    start when its singleton socket's path is longer than a socket address holds, as it
    is under pytest's ``tmp_path``."""
    made = Path(tempfile.mkdtemp(prefix="cdpt-", dir="/tmp"))
    yield made
    shutil.rmtree(made)


async def test_each_launch_leaves_the_temporary_directory_as_it_found_it(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    monkeypatch.setenv("TMPDIR", str(scratch))  # Chromium's own temporary files
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the profile's mkdtemp
    for launched in range(1, 4):
        async with launch(binary) as browser:
            page = await browser.new_page()
            await page.navigate("data:text/html,<p id=here>here</p>")
            assert await page.evaluate("document.getElementById('here').textContent") == "here"
            assert [p.name for p in scratch.iterdir()] != [], "the profile is not where the test looks"
        assert sorted(os.listdir(scratch)) == [], f"left after launch {launched}"
