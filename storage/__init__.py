"""The one room that keeps data.

``storage.interfaces`` lists every kind of data the service keeps as small async
protocols; ``storage.records`` the plain records they exchange; ``storage.errors`` the
errors every engine raises alike. Engines live in subpackages — ``storage.sqlite`` (the
embedded default, one file) today — and only the app factory opens one.
"""

from storage.errors import ConversationBusy, ConversationOwnedByAnother, StorageError, StorageUnavailable

__all__ = ["ConversationBusy", "ConversationOwnedByAnother", "StorageError", "StorageUnavailable"]
