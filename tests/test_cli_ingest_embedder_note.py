"""The words ``agentchat ingest`` says about embedders (``app/cli/ingest_report.py``): the
note when documents hold vectors of another embedder than the ingest's, and the refusal
when the embedder ``AGENT_EMBEDDER`` names is not available. The command itself, with
real processes on both engines, is ``tests/storage/test_kb_kept_vectors.py``."""

from __future__ import annotations

from app.cli.ingest_report import other_vectors_line, refusal_text

OLLAMA = ("ollama:nomic-embed-text", 768)


def test_no_note_when_every_vector_is_the_ingests_embedders() -> None:
    assert other_vectors_line(OLLAMA, [("ollama:nomic-embed-text", 768, 40)]) is None
    assert other_vectors_line(OLLAMA, []) is None
    assert other_vectors_line((None, None), []) is None  # nothing embedded yet: nothing to keep


def test_the_note_names_both_embedders_and_what_happens() -> None:
    line = other_vectors_line((None, None), [("ollama:nomic-embed-text", 768, 1)])
    assert line == (
        "note: 1 document holds vectors of ollama:nomic-embed-text (768 dimensions), not of this ingest's "
        "embedder (none): unchanged documents keep their vectors; new and changed ones are stored for text "
        "search only, and a service embedding with ollama:nomic-embed-text gives them its vectors in the background"
    )
    line = other_vectors_line(
        ("hashing:hashing-v2", 384),
        [("ollama:nomic-embed-text", 768, 30), ("hashing:hashing-v2", 384, 9), ("gemini:x", 768, 2), ("o:y", 8, 1)],
    )
    assert line is not None
    assert line.startswith(
        "note: 30 documents hold vectors of ollama:nomic-embed-text (768 dimensions) (and 3 documents of other "
        "embedders), not of this ingest's embedder (hashing:hashing-v2, 384 dimensions): unchanged documents keep "
        "their vectors; new and changed ones get hashing:hashing-v2 vectors"
    ), line


def test_the_refusal_says_why_and_how_to_go_on() -> None:
    text = refusal_text(
        "ollama",
        "AGENT_EMBEDDER=ollama but ollama (nomic-embed-text) failed its start-up probe (connection refused): "
        "no vectors",
    )
    assert text.startswith(
        "agentchat ingest: AGENT_EMBEDDER=ollama is not available (AGENT_EMBEDDER=ollama but ollama failed its "
        "start-up probe: no vectors); nothing was ingested."
    ), text
    assert "--text-only" in text
