"""Summarise ``bench/gcprobe/sitecustomize.py``'s files: per server process (argv with
``serve``), collections and their pause time by generation, after ``--after-s`` seconds
of the process's life (start-up's import-time collections left out).

    python bench/gcprobe/summary.py DIR [--after-s 20]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--after-s", type=float, default=5.0)
    args = parser.parse_args()
    for path in sorted(args.dir.glob("*.json")):
        body = json.loads(path.read_text())
        argv = body["argv"]
        if "serve" not in argv:
            continue
        where = next((a for a in argv if a.startswith("/work/")), argv[0])
        events = [e for e in body["events"] if e[0] >= args.after_s]
        print(f"{path.stem} {where} threshold {body['threshold']} frozen {body['frozen']}")
        for gen in (0, 1, 2):
            pauses = sorted(e[2] for e in events if e[1] == gen)
            if pauses:
                p99 = pauses[min(len(pauses) - 1, int(len(pauses) * 0.99))]
                print(
                    f"  gen{gen}: {len(pauses):5d} collections, {sum(pauses):8.1f} ms total, "
                    f"p99 {p99:6.2f} ms, max {pauses[-1]:6.2f} ms"
                )
            else:
                print(f"  gen{gen}:     0 collections")


if __name__ == "__main__":
    main()
