"""A table configuration checked by the backend's own rules, reported as the tools report.

``preview_table_config``, the write tools and every ``apply_*`` result are judged before
the backend is called, so the model learns what is wrong before the user sees anything.
The rules are the backend's (``backend.table_rules``, the one part of ``backend`` the agent
imports): the tools kept a copy of them until it disagreed with the backend's save about
13 of 7,777 configs and crashed on six. Here the report becomes plain dicts
``{"field", "message", "code"}`` (warnings without ``code``), which the tool results carry
and the preview event turns into ``"<field>: <message>"`` strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.table_rules import COLUMN_TYPES
from backend.table_rules import validate_table_config as backend_rules

__all__ = ["COLUMN_TYPES", "ConfigReport", "validate_table_config"]


@dataclass(slots=True)
class ConfigReport:
    errors: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def validate_table_config(config: Any) -> ConfigReport:
    """Every error and warning of ``config`` under the backend's rules."""
    report = backend_rules(config)
    return ConfigReport([e.as_dict() for e in report.errors], [w.as_dict() for w in report.warnings])
