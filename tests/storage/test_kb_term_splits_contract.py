"""A query word the index does not know, split into words it does ("agentchat" → the
documents' "agent chat"), on every engine: which split the index's vocabulary picks, that
a word it knows well is never split, that a write is seen, and that the split's phrase
matches (and scores) only chunks holding its words in sequence, in every kind of scope.
"""

from __future__ import annotations

from typing import Any

import pytest

from knowledge.buckets import typed_values
from knowledge.query_terms import bm25_terms, split_candidates
from storage.interfaces import KBIndex
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope, KBTextTuning
from storage.kb_terms import SPLIT_MAX_DF

TUNING = KBTextTuning()

PAGES = {
    "overview": "The agent chat service is an asynchronous Python service.",
    "tools": "The agent picks a few tools for each turn of the model.",
    "stream": "Send a chat message and read the stream of events.",
    "apart": "The chat ends when the agent stops answering.",
    "drafts": "Workflows and tables are edited through drafts.",
}


def page(doc_id: str, text: str) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id,
        title=doc_id,
        source=f"{doc_id}.md",
        url=None,
        content_hash=f"h-{doc_id}",
        metadata={},
        chars=len(text),
        chunks=[KBChunkWrite(0, "", text)],
        vectors=None,
        embed_model=None,
        embed_dim=None,
    )


@pytest.fixture
async def kb(store_engine: Any) -> KBIndex:
    index: KBIndex = store_engine.kb_index
    await index.create_bucket("docs", {}, typed_row=typed_values)
    await index.write_documents("docs", {}, [page(k, v) for k, v in PAGES.items()])
    return index


async def scored_docs(kb: KBIndex, query: str, scope: KBScope) -> dict[str, float]:
    """``{document: BM25 score}`` of the text side's candidates for ``query``, best first."""
    terms = await bm25_terms(kb, query, 10, TUNING)
    ranked = await kb.text_candidates(terms, scope, 10, TUNING)
    rows = {r.chunk_id: r.doc_id for r in await kb.hydrate(ranked.ids)}
    assert ranked.total == len(ranked.ids)
    assert all(s > 0 for s in ranked.scores)
    return {rows[i]: s for i, s in zip(ranked.ids, ranked.scores, strict=True)}


async def ranked_docs(kb: KBIndex, query: str, scope: KBScope) -> list[str]:
    return list(await scored_docs(kb, query, scope))


async def test_an_unknown_joined_word_is_split_into_known_words(kb: KBIndex) -> None:
    splits = await kb.term_splits({"agentchat": split_candidates("agentchat")}, TUNING)
    assert splits == {"agentchat": ("agent", "chat")}
    # Parts the index does not hold, or a word with no cut offered: nothing.
    assert await kb.term_splits({"lockfile": split_candidates("lockfile"), "agent": []}, TUNING) == {}


async def test_the_split_phrase_finds_only_the_words_in_sequence(kb: KBIndex) -> None:
    """"agentchat" matches nothing as written; its split matches the overview, and not
    the page saying "chat" and "agent" apart, in the whole index, a bucket, a list of
    documents and one document."""
    everything = await ranked_docs(kb, "What is agentchat?", KBScope())
    assert everything == ["overview"]
    assert await ranked_docs(kb, "What is agentchat?", KBScope(bucket="docs")) == ["overview"]
    assert await ranked_docs(kb, "agentchat", KBScope(doc_ids=["overview", "apart", "tools"])) == ["overview"]
    assert await ranked_docs(kb, "agentchat", KBScope(doc_id="apart")) == []
    # Another term of the query still matches alone; the phrase's words score only
    # where the phrase is ("apart" holds "agent" and "chat" but is found by "ends").
    both = await scored_docs(kb, "agentchat ends", KBScope())
    assert sorted(both) == ["apart", "overview"]
    alone = await scored_docs(kb, "ends", KBScope())
    assert list(alone) == ["apart"] and both["apart"] == pytest.approx(alone["apart"])


async def test_a_write_is_seen_by_the_next_split(kb: KBIndex) -> None:
    assert await kb.term_splits({"lockfile": split_candidates("lockfile")}, TUNING) == {}
    await kb.write_documents(
        "docs", {}, [page("lock", "The lock file pins versions."), page("file", "Each lock is kept in a file.")]
    )
    assert await kb.term_splits({"lockfile": split_candidates("lockfile")}, TUNING) == {"lockfile": ("lock", "file")}
    assert await ranked_docs(kb, "lockfile", KBScope()) == ["lock"]


async def test_a_word_the_index_knows_is_not_split(kb: KBIndex) -> None:
    """"toolkit" written in ``SPLIT_MAX_DF`` chunks is the index's own word, however
    often "tool" and "kit" are written apart."""
    pages = [page(f"joined-{i}", f"The toolkit number {i}.") for i in range(SPLIT_MAX_DF)]
    pages += [page(f"apart-{i}", f"A tool kit, the tool and its kit {i}.") for i in range(4 * SPLIT_MAX_DF)]
    await kb.write_documents("docs", {}, pages)
    assert await kb.term_splits({"toolkit": split_candidates("toolkit")}, TUNING) == {}
    await kb.delete_documents([f"joined-{i}" for i in range(1, SPLIT_MAX_DF)])
    assert await kb.term_splits({"toolkit": split_candidates("toolkit")}, TUNING) == {"toolkit": ("tool", "kit")}


async def test_a_rare_word_keeps_its_own_matches_beside_the_split(kb: KBIndex) -> None:
    """The command is named ``agentchat`` in a few chunks and the overview says "agent
    chat": both are found, neither in place of the other."""
    await kb.write_documents("docs", {}, [page("cli", "Run agentchat serve to start it.")])
    splits = await kb.term_splits({"agentchat": split_candidates("agentchat")}, TUNING)
    assert splits == {"agentchat": ("agent", "chat")}
    assert sorted(await ranked_docs(kb, "What is agentchat?", KBScope())) == ["cli", "overview"]
    assert sorted(await ranked_docs(kb, "What is agentchat?", KBScope(bucket="docs"))) == ["cli", "overview"]
