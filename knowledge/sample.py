"""The sample knowledge base shipped with the package (``knowledge/sample_kb/*.md``).

It is our own writing about this service, so a fresh ``make run`` with the offline
extractive provider can answer real questions ("which events does a run stream?").
"""

from __future__ import annotations

from pathlib import Path

from knowledge.kb import DEFAULT_BUCKET, KnowledgeBase
from knowledge.types import IngestReport

SAMPLE_KB_DIR = Path(__file__).resolve().parent / "sample_kb"


async def ensure_sample_kb(kb: KnowledgeBase, *, bucket: str = DEFAULT_BUCKET) -> IngestReport | None:
    """Ingest the sample KB into ``bucket`` when the knowledge base holds no documents.

    Returns the report, or ``None`` when the KB already had content (it is never
    overwritten or mixed into a KB someone has filled).
    """
    stats = await kb.stats()
    if stats["documents"] > 0:
        return None
    return await kb.ingest_paths([SAMPLE_KB_DIR], bucket=bucket)
