"""Every kind of data the service keeps, as small async interfaces.

A newcomer opens this package and sees what is stored; each engine (``storage/sqlite``,
later ``storage/postgres``) implements all of them and passes one contract suite
(``tests/storage``). Callers receive these from the app factory and never open a
connection themselves.

One module a store, or a few stores of one subject: ``conversations``, ``runs``,
``limits_and_secrets``, ``drafts``, ``web_answers`` (saved external answers and
keywords), ``knowledge_base``, and ``bundle`` (every store of one engine). The other
rooms import the protocols from the package (``from storage.interfaces import
RunStore``), as they did when it was one file: about forty modules in six rooms do, so
which module holds a protocol stays this package's own business.
"""

from storage.interfaces.bundle import Health, StorageBundle, WriterHealth
from storage.interfaces.conversations import ConversationStore, HistoryStore
from storage.interfaces.drafts import DraftStore
from storage.interfaces.knowledge_base import KBGenerations, KBIndex, KBVectorSearch
from storage.interfaces.limits_and_secrets import LimitStore, SecretStore
from storage.interfaces.runs import RetentionStore, RunStore, ToolCallLog
from storage.interfaces.web_answers import ExternalResultStore, ExternalVectorStore, KeywordStore

__all__ = [
    "ConversationStore",
    "DraftStore",
    "ExternalResultStore",
    "ExternalVectorStore",
    "Health",
    "HistoryStore",
    "KBGenerations",
    "KBIndex",
    "KBVectorSearch",
    "KeywordStore",
    "LimitStore",
    "RetentionStore",
    "RunStore",
    "SecretStore",
    "StorageBundle",
    "ToolCallLog",
    "WriterHealth",
]
