"""SIGTERM ends a one-off command as Ctrl-C does (``app/cli/interrupts.py``), through a
real process and real signals. The whole ``agentchat ingest`` case is in
``tests/test_cli_kb_process.py``; here, what the second SIGTERM does."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from storage.open import open_storage
from tests.support.deadline import reap, within
from tests.support.procs import REPO, answers_ctrl_c, child_env

COMMAND = textwrap.dedent(
    """
    import asyncio, sys, threading
    from app.cli.interrupts import EXIT_TERMINATED, Termination, cancelled_by_sigterm

    async def work() -> int:
        try:
            print("running", flush=True)  # the SIGTERM handler is in place by now
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            # The close the first SIGTERM starts: while it runs, a thread the interpreter
            # waits for at exit is open (aiosqlite's connection threads are such), and
            # only the close's end lets it go.
            release = threading.Event()
            threading.Thread(target=release.wait, daemon=False).start()
            print("closing", flush=True)
            await asyncio.sleep(600)
            release.set()
            raise
        return 0

    termination = Termination()
    try:
        sys.exit(asyncio.run(cancelled_by_sigterm(work(), termination)))
    except asyncio.CancelledError:
        sys.exit(EXIT_TERMINATED if termination.received else 1)
    """
)


async def test_a_second_sigterm_during_the_close_ends_the_process_at_once(tmp_path: Path) -> None:
    """The first SIGTERM starts the command's close; a second one ends the process then
    and there (the default action). It used to cancel the close too, leaving a thread
    the interpreter waited for at exit: a process that never ended."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COMMAND, cwd=REPO, env=child_env({}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await within(proc.stdout.readline(), "the command running", 60)
        assert line.strip() == b"running", line
        proc.send_signal(signal.SIGTERM)
        line = await within(proc.stdout.readline(), "the close under way", 60)
        assert line.strip() == b"closing", line
        proc.send_signal(signal.SIGTERM)
        code = await within(proc.wait(), "the process after its second SIGTERM", 30)
        assert code == -signal.SIGTERM, code
    finally:
        await reap(proc, "the command", grace=5)


#: A ``sitecustomize`` that holds the import of ``app.cli.commands`` (or ``CLI_GATE_MODULE``; seconds of imports
#: on a loaded machine: the window before any handler of the command is in place) until
#: the file ``CLI_IMPORT_GATE`` names exists, saying on stderr when it holds it.
IMPORT_GATE = textwrap.dedent(
    """
    import os, sys, time

    class Gate:
        def find_spec(self, name, path, target=None):
            if name == os.environ.get("CLI_GATE_MODULE", "app.cli.commands"):
                sys.meta_path.remove(self)
                sys.stderr.write(f"gate: importing {name}\\n")
                sys.stderr.flush()
                deadline = time.monotonic() + 120
                while not os.path.exists(os.environ["CLI_IMPORT_GATE"]) and time.monotonic() < deadline:
                    time.sleep(0.01)
            return None

    sys.meta_path.insert(0, Gate())
    """
)


@pytest.mark.parametrize(
    ("sig", "code_expected", "line"),
    [
        (signal.SIGTERM, 143, "agentchat ingest: terminated (SIGTERM)"),
        (signal.SIGINT, 130, "agentchat ingest: interrupted"),
    ],
    ids=["sigterm", "ctrl-c"],
)
async def test_a_signal_while_the_command_is_still_importing_ends_it_with_one_line(
    tmp_path: Path, sig: signal.Signals, code_expected: int, line: str
) -> None:
    """``agentchat ingest`` signalled while it imports the service (before the command's
    own handler is in place): exit 143 (130) and one line, no traceback. It used to die
    of the SIGTERM without a word (-15), and Ctrl-C printed a traceback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMPORT_GATE)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nA page.\n")
    env = child_env({
        "PYTHONPATH": str(site), "CLI_IMPORT_GATE": str(tmp_path / "gate"),
        "AGENT_DB_PATH": str(tmp_path / "agent.db"), "AGENT_EMBEDDER": "hashing",
    })  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "ingest", str(tmp_path / "docs"), "--quiet", cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=answers_ctrl_c,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        held = await within(proc.stderr.readline(), "the import of the commands held", 60)
        assert held.strip() == b"gate: importing app.cli.commands", held
        proc.send_signal(sig)
        out, err = await within(proc.communicate(), "the command after the signal", 60)
        text = err.decode()
        assert proc.returncode == code_expected, (proc.returncode, text)
        assert text.splitlines() == [line], text
        assert "Traceback" not in text and out == b""
        assert not (tmp_path / "agent.db").exists()  # no work had started
    finally:
        (tmp_path / "gate").touch()
        await reap(proc, "the command", grace=5)


#: A ``sitecustomize`` that sends the process SIGTERM from inside aiosqlite's N-th result
#: callback (``SIGTERM_AT_RESULT``): the signal lands while the event loop runs one of its
#: ordinary callbacks, the instant that once lost it.
SIGTERM_IN_CALLBACK = textwrap.dedent(
    """
    import importlib.abc, importlib.util, os, signal, sys

    N = int(os.environ["SIGTERM_AT_RESULT"])

    def patch(core):
        original, count = core.set_result, [0]

        def set_result(fut, result):
            count[0] += 1
            if count[0] == N:
                sys.stderr.write("site: SIGTERM now\\n")
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGTERM)
            original(fut, result)

        core.set_result = set_result

    class After(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "aiosqlite.core":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, After())
    """
)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["keywords", "prune", "--min-usage", "1", "--older-than", "1"], "agentchat keywords: terminated (SIGTERM)"),
        (["compact", "--run-events-days", "1"], "agentchat compact: terminated (SIGTERM)"),
    ],
    ids=["keywords-prune", "compact"],
)
async def test_a_sigterm_while_the_loop_runs_a_callback_ends_a_one_off_command(
    tmp_path: Path, argv: list[str], line: str
) -> None:
    """The first SIGTERM cancels the command wherever the loop is, which then closes its
    storage and exits 143 with one line. The early handler (for the import) stayed for
    the whole run of these commands: raised inside one of the loop's callbacks, it was
    logged ("Exception in callback"), the future that callback was to resolve never was,
    and the command waited for ever (the review of 43e264c)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SIGTERM_IN_CALLBACK)
    storage = await open_storage(tmp_path / "agent.db")  # these commands create no database
    await storage.close()
    env = child_env({
        "PYTHONPATH": str(site), "SIGTERM_AT_RESULT": "12",
        "AGENT_DB_PATH": str(tmp_path / "agent.db"),
    })  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *argv, cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _, err = await within(proc.communicate(), "the command after its SIGTERM", 60)
        text = err.decode()
        assert "site: SIGTERM now" in text, text
        assert "Exception in callback" not in text and "Traceback" not in text, text
        assert proc.returncode == 143, (proc.returncode, text)
        assert text.splitlines()[-1] == line, text
    finally:
        await reap(proc, "the command", grace=5)


async def test_a_sigterm_while_serve_is_still_starting_ends_it_with_one_line(tmp_path: Path) -> None:
    """``agentchat serve`` signalled after the commands are imported but before its drain
    is in place (while it imports uvicorn): exit 143 and one line. 0811f34 dropped the
    early handler right after parsing, and such a SIGTERM ended it without a word again
    (the review's reproduction: -15, nothing on stderr)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMPORT_GATE)
    env = child_env({
        "PYTHONPATH": str(site), "CLI_IMPORT_GATE": str(tmp_path / "gate"), "CLI_GATE_MODULE": "app.cli.serving",
        "AGENT_DB_PATH": str(tmp_path / "agent.db"),
    })  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--port", "0", "--no-backend", cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        held = await within(proc.stderr.readline(), "the import of app.cli.serving held", 60)
        assert held.strip() == b"gate: importing app.cli.serving", held
        proc.send_signal(signal.SIGTERM)
        _, err = await within(proc.communicate(), "serve after the signal", 60)
        text = err.decode()
        assert proc.returncode == 143, (proc.returncode, text)
        assert text.splitlines() == ["agentchat serve: terminated (SIGTERM)"], text
    finally:
        (tmp_path / "gate").touch()
        await reap(proc, "agentchat serve", grace=5)


@pytest.mark.parametrize(
    ("sig", "code_expected", "line"),
    [
        (signal.SIGTERM, 143, "agentchat serve: terminated (SIGTERM)"),
        (signal.SIGINT, 130, "agentchat serve: interrupted"),
    ],
    ids=["sigterm", "ctrl-c"],
)
async def test_a_signal_while_serve_imports_the_app_ends_it_with_one_line(
    tmp_path: Path, sig: signal.Signals, code_expected: int, line: str
) -> None:
    """``agentchat serve`` signalled inside its event loop before uvicorn answers signals
    (while it imports ``app.factory``): exit 143 (130) and that line last. Ctrl-C there
    ended in a traceback (``UnboundLocalError``: the interrupted start left no result to
    return), SIGTERM in exit 143 without a word."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMPORT_GATE)
    env = child_env({
        "PYTHONPATH": str(site), "CLI_IMPORT_GATE": str(tmp_path / "gate"), "CLI_GATE_MODULE": "app.factory",
        "AGENT_DB_PATH": str(tmp_path / "agent.db"),
    })  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--port", "0", "--no-backend", cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=answers_ctrl_c,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        held = await within(proc.stderr.readline(), "the import of app.factory held", 60)
        assert held.strip() == b"gate: importing app.factory", held
        proc.send_signal(sig)
        # Ctrl-C cancels the loop's main task (``asyncio.Runner``), which takes effect once
        # the import is over, as it would be on its own a moment later.
        (tmp_path / "gate").touch()
        _, err = await within(proc.communicate(), "serve after the signal", 60)
        text = err.decode()
        assert proc.returncode == code_expected, (proc.returncode, text)
        assert "Traceback" not in text, text
        assert text.splitlines()[-1] == line, text
    finally:
        (tmp_path / "gate").touch()
        await reap(proc, "agentchat serve", grace=5)
