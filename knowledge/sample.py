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
    """Ingest the sample KB into ``bucket`` when that bucket holds no documents.

    Returns the report, or ``None`` when the bucket already had content (it is never
    overwritten or mixed into a bucket someone has filled). Other buckets do not
    matter: a corpus ingested into its own bucket leaves the sample KB's answers alone
    (``knowledge_base_search`` covers ``AGENT_KB_DEFAULT_BUCKETS``, the sample's bucket).
    """
    if any(b.name == bucket and b.documents > 0 for b in await kb.list_buckets()):
        return None
    return await kb.ingest_paths([SAMPLE_KB_DIR], bucket=bucket)
