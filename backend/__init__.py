"""Reference implementation of the Ichor-compatible REST API the workflow/table tools call.

Standalone: imports nothing from the rest of the project. See backend/README.md.

The agent imports one package of it, ``backend.table_rules`` (the table-configuration
rules both faces run), so importing this package loads nothing: the app's two names below are
imported on first use, and an agent process never loads the backend's routes and seed data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.app import create_backend_app, serve_backend

__all__ = ["create_backend_app", "serve_backend"]


def __getattr__(name: str) -> Any:
    """``create_backend_app`` and ``serve_backend``, from ``backend.app`` on first use."""
    if name in __all__:
        from backend import app

        return getattr(app, name)
    raise AttributeError(f"module 'backend' has no attribute {name!r}")
