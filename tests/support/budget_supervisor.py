"""``serve --workers``' supervisor (``app/cli/workers.py``) over workers whose close the
test controls, with a close budget the test gives: what the supervisor does with a
worker still closing, within its budget and past it, in seconds instead of the real
budget's minutes.

    python -m tests.support.budget_supervisor --dir D --grace G --budget B

The supervisor is the real one (its signal handling, deadline and SIGKILL); each worker
is a real process that, on SIGTERM, writes ``closing`` to ``D/worker<i>.log`` and then
waits for ``D/release`` before it writes ``closed`` and exits 0 (without it, it waits
for ever: a close that never ends). Each worker writes ``ready`` once its handler is in
place. At the end the supervisor's exit code and the pids it SIGKILLed go to stdout as
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

from app.cli.children import die_with_parent
from app.cli.serving import bind_socket
from app.cli.workers import Supervisor, stop_deadline_s

WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    log, release = sys.argv[1], sys.argv[2]

    def say(word):
        with open(log, "a") as f:
            f.write(word + "\\n")

    def closing(signum, frame):
        say("closing")
        while not os.path.exists(release):  # the test's release; SIGKILL otherwise
            time.sleep(0.01)
        say("closed")
        sys.exit(0)

    signal.signal(signal.SIGTERM, closing)
    say("ready")
    while True:
        signal.pause()
    """
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("--budget", type=float, required=True)
    args = parser.parse_args(argv)

    def spawn(self: Supervisor, index: int) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", WORKER, f"{args.dir}/worker{index}.log", f"{args.dir}/release"]
        return subprocess.Popen(argv, env=self.env, preexec_fn=die_with_parent(), start_new_session=True)

    Supervisor.spawn = spawn  # type: ignore[method-assign]  # this process only
    with bind_socket("127.0.0.1", 0) as sock:
        supervisor = Supervisor([sock], args.workers, {}, grace=args.grace,
                                stop_after_s=stop_deadline_s(args.grace, args.budget))
        code = supervisor.run()
    print(json.dumps({"code": code, "killed": supervisor.killed}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
