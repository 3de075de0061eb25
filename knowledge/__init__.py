"""The knowledge base: documents, chunks, full-text + vector search over the storage KB index, typed buckets,
filters, hybrid search with re-ranking, ingestion, and the shipped sample KB."""

from knowledge.filters import FilterError, compile_filters
from knowledge.kb import DEFAULT_BUCKET, KBConfig, KnowledgeBase, UnknownBucketError
from knowledge.sample import SAMPLE_KB_DIR, SampleLeft, ensure_sample_kb
from knowledge.types import (
    BucketInfo,
    ChunkHit,
    DocumentIn,
    FieldType,
    IngestReport,
    OverloadRule,
    Rejection,
    SearchMode,
    SearchResponse,
)

__all__ = [
    "DEFAULT_BUCKET",
    "SAMPLE_KB_DIR",
    "BucketInfo",
    "ChunkHit",
    "DocumentIn",
    "FieldType",
    "FilterError",
    "IngestReport",
    "KBConfig",
    "KnowledgeBase",
    "OverloadRule",
    "Rejection",
    "SampleLeft",
    "SearchMode",
    "SearchResponse",
    "UnknownBucketError",
    "compile_filters",
    "ensure_sample_kb",
]
