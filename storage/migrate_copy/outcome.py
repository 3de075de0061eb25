"""What ``agentchat migrate-db``'s copy returns (``CopyReport``: each table's counts on both
sides) or raises (``MigrateError`` and its kinds, each with a message for a human).

Why apart: the CLI reads only these, and maps each error to its exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class MigrateError(RuntimeError):
    """The copy cannot start or did not end well; the message says why."""


class SourceInUse(MigrateError):
    pass


class TargetNotEmpty(MigrateError):
    pass


class SourceChanged(TargetNotEmpty):
    """This file's copy into the target completed before, and the file has changed since
    (rows written to SQLite after the move): the target serves already, so copying the
    difference would merge two diverged databases. Refused before anything is copied."""


class TargetUnusable(MigrateError):
    """The target could not be opened or migrated (unreachable, no such database, no
    right to create the ``vector`` extension): refused before anything was copied."""

    @classmethod
    def from_error(cls, exc: BaseException, target: str) -> TargetUnusable:
        """The one line for a driver error ``exc`` met while opening ``target`` (shown
        without its password)."""
        said = " ".join(str(exc).split())[:300] or type(exc).__name__
        if "extension" in said and "permission denied" in said:
            return cls(
                f"PostgreSQL {target} does not let this user create the vector extension (pgvector): {said}; "
                "have a superuser run CREATE EXTENSION vector in that database once, then run migrate-db again"
            )
        return cls(f"cannot open the PostgreSQL {target}: {said}")


class CountMismatch(MigrateError):
    def __init__(self, mismatches: list[tuple[str, int, int]]) -> None:
        self.mismatches = mismatches
        lines = ", ".join(f"{t}: {s} in SQLite, {p} in PostgreSQL" for t, s, p in mismatches)
        super().__init__(f"row counts differ after the copy ({lines})")


@dataclass(slots=True)
class TableCount:
    table: str
    source: int
    target: int
    copied: int = 0


@dataclass(slots=True)
class CopyReport:
    schema_version: int
    resumed: bool
    tables: list[TableCount] = field(default_factory=list)
    #: When this file's copy into the target had completed already (``time.time()``):
    #: nothing was copied now, ``tables`` holds each table's count at that completion
    #: (``source``) and in the target now (``target``). ``None``: the copy ran now.
    completed_at: float | None = None

    def moved_on(self) -> list[tuple[str, int]]:
        """Each table whose target count differs from the completed copy's, and by how
        much (the replicas served on it since)."""
        return [(t.table, t.target - t.source) for t in self.tables if t.target != t.source]
