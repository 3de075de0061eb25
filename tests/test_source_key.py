"""One rule for which sources are one document (``events.source_key.document_key``).

It was written three times - the tool summary's count (``agenttools/core/result_shapes``),
the OpenAI face's numbers (``app/server/openai_citations.source_key``) and the
playground's cards (``docOf`` in ``playground.js``) - and they disagreed: the summary and
the cards merged a web answer with its first page and every link-less page of one web
answer into one source, the OpenAI face counted one page behind two web answers twice.
The Python two now call the one function; the browser keeps its copy
(``app/server/static/source_key.js``: the page cannot import Python, and the cards of a
conversation stored before any server-side key would still need one), and node runs
that file on the same sources as Python here: they must agree.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

import events
from agenttools.core.result_summary import summarize_result
from app.server.openai_citations import CitationNumbers
from events.source_key import document_key

ROOT = Path(__file__).resolve().parent.parent
SOURCE_KEY_JS = ROOT / "app" / "server" / "static" / "source_key.js"

ANSWER = "px_0123456789abcdef"
OTHER_ANSWER = "px_fedcba9876543210"
#: (id, url, doc_id) -> the document key.
CASES: list[tuple[tuple[str, str | None, str | None], str]] = [
    (("faq#4", None, None), "faq"),
    (("faq#6", None, "faq"), "faq"),
    (("faq", None, None), "faq"),
    (("notes#v2#3", None, "notes#v2"), "notes#v2"),  # the chunk's document, as its metadata says
    (("guide#2", "https://example.com/guide", "guide"), "https://example.com/guide"),
    ((ANSWER, "https://a.example/page-1", None), ANSWER),  # the answer's link is its first page's
    ((f"{ANSWER}#1", "https://a.example/page-1", None), "https://a.example/page-1"),
    ((f"{OTHER_ANSWER}#3", "https://a.example/page-1", None), "https://a.example/page-1"),  # the same page
    ((f"{ANSWER}#2", None, None), f"{ANSWER}#2"),  # a page without a link is still its own
    (("px_notanid#2", None, None), "px_notanid"),
    (("#4", None, None), ""),
    (("plain", None, None), "plain"),
]


def test_the_rule() -> None:
    assert [document_key(*args) for args, _ in CASES] == [key for _, key in CASES]


@pytest.mark.node
def test_the_browser_copy_agrees_with_the_rule() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("this test needs Node.js (Debian: apt-get install nodejs; .ci/run installs it)", pytrace=False)
    script = (
        "const fs = require('fs');"
        f"eval(fs.readFileSync({orjson.dumps(str(SOURCE_KEY_JS)).decode()}, 'utf8'));"
        "const cases = JSON.parse(fs.readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(cases.map(([id, url, doc]) =>"
        " globalThis.AgentSourceKey.documentKey(id, url, doc))));"
    )
    done = subprocess.run(
        [node, "-e", script], input=orjson.dumps([args for args, _ in CASES]), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert orjson.loads(done.stdout) == [document_key(*args) for args, _ in CASES]


def test_the_summary_and_the_openai_face_count_alike() -> None:
    """A web answer, its first page (the same link) and a page of another answer with
    that link: the summary says 2 sources, and the OpenAI face's list has 2 lines."""
    sources = [
        events.Source(id=ANSWER, title="Perplexity answer: q", kind="external", url="https://a.example/page-1"),
        events.Source(id=f"{ANSWER}#1", title="Page one", kind="external", url="https://a.example/page-1"),
        events.Source(id=f"{OTHER_ANSWER}#3", title="Page one again", kind="external", url="https://a.example/page-1"),
    ]
    cards = [{"id": s.id, "title": s.title, "kind": s.kind, "url": s.url} for s in sources]
    summary = summarize_result({"delivered": True, "source_count": 3, "sources": cards})
    assert summary is not None and "citing 2 sources" in summary, summary
    numbers = CitationNumbers()
    numbers.know(sources)  # text read once the sources are known (numbers streamed before stay as sent)
    text = numbers.feed(f"Said [{ANSWER}], shown [{ANSWER}#1] and [{OTHER_ANSWER}#3].") + numbers.finish()
    assert text == "Said [1], shown [2] and [2]."
    listed = numbers.mapping(sources)
    assert [(e["number"], e["ids"]) for e in listed] == [(1, [ANSWER]), (2, [f"{ANSWER}#1", f"{OTHER_ANSWER}#3"])]
