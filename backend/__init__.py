"""Reference implementation of the Ichor-compatible REST API the workflow/table tools call.

Standalone: imports nothing from the rest of the project. See backend/README.md.
"""

from backend.app import create_backend_app, serve_backend

__all__ = ["create_backend_app", "serve_backend"]
