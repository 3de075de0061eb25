"""Range checks for ``agentchat``'s number options, as argparse types.

A number out of range is argparse's one line and exit 2 (``agentchat serve: error:
argument --port: must be between 0 and 65535``), before anything starts: ``--port
99999`` served on 34463 (the socket layer takes the port modulo 65536), ``--backend-port
70000`` ended in a traceback, ``--grace -5`` was taken. An option that sets a setting
checks that setting's own range (``app.config_env``'s bounds, which ``Settings.from_env``
checks the variable against), never a copy of it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from app.config_env import Bounds


def integer_in(bounds: Bounds[int]) -> Callable[[str], int]:
    """An argparse ``type``: an integer within ``bounds``."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {raw!r}") from None
        if not bounds.lo <= value <= bounds.hi:
            raise argparse.ArgumentTypeError(f"must be between {bounds.lo} and {bounds.hi}")
        return value

    return parse


def number_in(bounds: Bounds[int] | Bounds[float]) -> Callable[[str], float]:
    """An argparse ``type``: a finite number within ``bounds``."""

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
        if not math.isfinite(value) or not bounds.lo <= value <= bounds.hi:
            raise argparse.ArgumentTypeError(f"must be between {bounds.lo} and {bounds.hi}")
        return value

    return parse


__all__ = ["integer_in", "number_in"]
