"""``BackendKeeper.serve_stopping`` runs in ``serve``'s signal handler, and Python runs a
second signal's handler between any two bytecodes of the first: the call must take no
lock. It set a ``threading.Event``, whose ``set`` holds the Event's non-reentrant lock,
so a second SIGTERM arriving while the first handler was inside it (systemd signals the
unit twice, close together, under ``KillMode=control-group``) hung ``serve``'s main
thread for ever.

The test makes that arrival certain instead of lucky: in a process of its own (a hang
there is a timeout here, not a stuck test run), a signal whose handler calls
``serve_stopping`` is raised at every bytecode of a first ``serve_stopping`` call and of
everything it calls."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from tests.support.procs import PYTHON, REPO, child_env

#: Guards against the hang only: the call takes microseconds, the process ~1 s to start.
HANG_GUARD_S = 30.0

SCRIPT = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path

    from app.cli.backend_keeper import BackendKeeper

    keeper = BackendKeeper([], "http://127.0.0.1:9", None, Path(sys.argv[1]))
    handled = 0
    in_handler = False

    def handler(signum, frame):
        global handled, in_handler
        in_handler = True
        try:
            keeper.serve_stopping()  # what serve's handler (and --workers' supervisor's) calls
            handled += 1
        finally:
            in_handler = False

    def every_opcode(frame, event, arg):
        frame.f_trace_opcodes = True
        if event in ("opcode", "line") and not in_handler:
            signal.raise_signal(signal.SIGUSR1)  # a second signal, here
        return every_opcode

    signal.signal(signal.SIGUSR1, handler)
    sys.settrace(every_opcode)
    keeper.serve_stopping()
    sys.settrace(None)
    assert handled > 0, "no signal came inside the call"
    assert keeper.serve_stopped
    print("returned", handled)
    """
)


def test_serve_stopping_returns_when_a_signal_reenters_it(tmp_path: Path) -> None:
    argv = [PYTHON, "-c", SCRIPT, str(tmp_path / "backend.state.json")]
    try:
        done = subprocess.run(argv, cwd=REPO, env=child_env({}), capture_output=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("serve_stopping hung when a signal's handler called it again inside it") from exc
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.startswith(b"returned "), done.stdout
