"""Chunking and headings: a heading goes into the chunk of the text under it, never ends
one (review of 032378b: "## Runs and feedback" ended a sample-KB chunk, and the feedback
question was answered from the unrelated paragraph that then opened the next one)."""

from __future__ import annotations

import re

import pytest

from knowledge.chunking import Chunk, chunk_text
from knowledge.sample import SAMPLE_KB_DIR

_HEADING_LINE = re.compile(r"^#{1,6}\s+\S")


def _last_line(chunk: Chunk) -> str:
    return chunk.text.rstrip().rsplit("\n", 1)[-1]


def _sentences(tag: str, n: int) -> str:
    return " ".join(f"Sentence {tag}{k} says something about {tag} here." for k in range(n))


def _synthetic() -> str:
    """Sections of all sizes: short ones that pack together, a section whose heading comes
    when the chunk is not yet half full and whose text does not fit after it, a heading
    with nothing under it before a deeper one, and a paragraph about a target long."""
    return "\n\n".join(
        [
            "# Guide",
            _sentences("intro", 3),
            "## Small",
            _sentences("small", 2),
            "## Does not fit",
            _sentences("big", 14),
            "## Empty",
            "### Nested",
            _sentences("nested", 5),
            "## Long",
            _sentences("long", 17),
            "## Last",
            _sentences("last", 4),
        ]
    )


def test_the_feedback_section_starts_its_chunk_in_the_sample_kb() -> None:
    text = (SAMPLE_KB_DIR / "19-conversations.md").read_text(encoding="utf-8")
    chunks = chunk_text(text)
    assert [c.position for c in chunks if _HEADING_LINE.match(_last_line(c))] == []
    feedback = next(c for c in chunks if "## Runs and feedback" in c.text)
    assert feedback.text.startswith("## Runs and feedback\n\n`GET /v1/agent/runs?conversation_id=`")
    assert feedback.heading.endswith("Runs and feedback")
    assert "A conversation that already has a title keeps it" not in feedback.text  # no carry across


@pytest.mark.parametrize(("target", "overlap"), [(800, 120), (400, 80), (300, 0), (200, 50)])
def test_no_chunk_ends_with_a_heading_and_each_heading_opens_its_text(target: int, overlap: int) -> None:
    text = _synthetic()
    chunks = chunk_text(text, target=target, overlap=overlap)
    assert len(chunks) > 2
    assert [c.text for c in chunks if _HEADING_LINE.match(_last_line(c))] == []
    for c in chunks:
        assert len(c.text) <= target + overlap, (len(c.text), c.text)
    for title, first in [("Small", "small0"), ("Does not fit", "big0"), ("Nested", "nested0"), ("Long", "long0")]:
        owner = next(c for c in chunks if f"# {title}\n" in c.text)
        assert f"Sentence {first} " in owner.text, (title, owner.text)
        assert owner.text.index(f"# {title}\n") < owner.text.index(f"Sentence {first} ")
    nested = next(c for c in chunks if "### Nested" in c.text)
    assert "## Empty\n\n### Nested" in nested.text  # the empty heading stays with the next one
    body = [line for c in chunks for line in c.text.split("\n") if _HEADING_LINE.match(line)]
    assert sorted(set(body)) == sorted(line for line in text.split("\n") if _HEADING_LINE.match(line))


def test_a_heading_opening_a_chunk_takes_no_overlap_from_the_section_before() -> None:
    text = "# A\n\n" + _sentences("a", 12) + "\n\n## B\n\n" + _sentences("b", 14)
    chunks = chunk_text(text, target=800, overlap=120)
    b = next(c for c in chunks if "## B" in c.text)
    assert b.text.startswith("## B\n\nSentence b0 ")
    assert b.heading == "A › B"


def test_headings_at_the_very_end_stay_with_the_last_chunk() -> None:
    chunks = chunk_text("# A\n\n" + _sentences("a", 3) + "\n\n## Coming soon\n")
    assert len(chunks) == 1
    assert chunks[0].text.endswith("## Coming soon")


def test_text_too_long_to_open_with_its_heading_is_cut_to_fit_behind_it() -> None:
    """A paragraph that fits a chunk alone but not behind its heading (overlap 0: no
    slack) is cut between sentences, the first part with the heading, the rest after."""
    paragraph = _sentences("p", 8)[:295].rsplit(" ", 1)[0] + "."
    fenced = "```\n" + "\n".join(f"echo {i} of the script" for i in range(13)) + "\n```"
    for under in (paragraph, fenced):
        assert len(under) <= 300
        chunks = chunk_text(f"# Intro\n\n{_sentences('i', 5)}\n\n## Under a heading\n\n{under}", target=300, overlap=0)
        assert all(len(c.text) <= 300 for c in chunks), [len(c.text) for c in chunks]
        assert [c.text for c in chunks if _HEADING_LINE.match(_last_line(c))] == []
        opened = next(c for c in chunks if "## Under a heading" in c.text)
        assert opened.text.startswith("## Under a heading\n\n")
        assert len(opened.text) > len("## Under a heading") + 40
        assert all(c.text.count("```") % 2 == 0 for c in chunks)
