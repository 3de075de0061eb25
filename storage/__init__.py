"""The one room that keeps data.

``storage.interfaces`` lists every kind of data the service keeps as small async
protocols; ``storage.records`` the plain records they exchange; ``storage.errors`` the
errors every engine raises alike. Engines live in subpackages — ``storage.sqlite`` (the
embedded default, one file) and ``storage.postgres`` (scale-out: PostgreSQL with
pgvector) — and only the app factory opens one, through ``open_storage`` (a
``postgresql://`` URL or a SQLite path).
"""

from storage.errors import ConversationBusy, StorageError, StorageUnavailable
from storage.open import is_postgres_url, open_storage

__all__ = [
    "ConversationBusy",
    "StorageError",
    "StorageUnavailable",
    "is_postgres_url",
    "open_storage",
]
