"""Records of the draft store: a workflow built one action at a time.

Plain dataclasses with their JSON encoding only; the rules (who may see a draft, when
it expires, how actions link) live with the draft tools in ``agenttools.drafts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class DraftAction:
    name: str
    action_type: str
    action_config: dict[str, Any]
    is_active: bool = True
    description: str = ""
    after: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action_type": self.action_type,
            "action_config": self.action_config,
            "is_active": self.is_active,
            "description": self.description,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DraftAction:
        return cls(
            name=str(d["name"]),
            action_type=str(d["action_type"]),
            action_config=dict(d.get("action_config") or {}),
            is_active=bool(d.get("is_active", True)),
            description=str(d.get("description") or ""),
            after=str(d.get("after") or ""),
        )


@dataclass(slots=True)
class Draft:
    """A draft as stored. Mutable: the draft tools change ``actions`` in place under the
    draft's lock, then the store saves it (``last_access`` is the time of last use)."""

    id: str
    owner: str
    name: str
    entity: str
    trigger_type: str
    description: str = ""
    trigger_conditions: dict[str, Any] | None = None
    actions: list[DraftAction] = field(default_factory=list)
    created_at: float = 0.0
    last_access: float = 0.0

    def action(self, name: str) -> DraftAction | None:
        return next((a for a in self.actions if a.name == name), None)
