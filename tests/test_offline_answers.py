"""Issue 20, item 4: the offline default's answers read as answers.

Through the real service with its defaults (provider and embedder ``auto`` with no model
reachable, so the extractive answerer and the hashing embedder; a fresh database that
ingests the sample knowledge base itself), documents ingested by the real CLI
(``agentchat ingest``), questions asked in the ``knowledge`` context over SSE, the
``response`` event's answer judged as a reader would (tests/support/offline_answers.py):
the fact it must carry, no sentence said twice, no paragraph starting or ending
mid-sentence, copies of one page never cited twice.

The questions (tests/data/offline_questions.json) are over the sample KB and the npm
documentation installed with npm (``.md`` and ``.html`` copies of each page).

The issue's target is 90 % of facts carried. First measured (2026-11-26): the sample KB
10/12, the npm docs 9/14 (73 %). After the retrieval and answerer fixes (words written
apart that documents join, "log in" / ``npm-login``; a document named by the words of
its title no other page has; the named document's opening weighs more in ranking and
answer; what a "where" / "how many" question wants; link text and asides; a second
passage from another page): 12/12 and 13/14 (96 %). The held-out set
(``held_out``, written from the documents and never tuned on) is checked too: sample
7/7, npm 5/11 — its misses are the search not reaching the page ("list the installed
packages" drops "list" as a request word, so ``npm-ls`` is not found) and answers that
quote the right page without the asked phrase. The floors guard what is reached.

A third set (``fresh``, 8 + 8, written from the documents before the changes it measures)
measured before any change for it: sample 6/8, npm 2/8. After the next fixes (request
words kept when they are the action a how-question asks about, "how do I list …", and not
in "find out"; a how-to quoted from a page's opening shows the page's synopsis; a page's
own title is no section label): fresh sample 6/8, npm 5/8; held-out 7/7 and 5/11;
original 25/26. Ranking a named page's opening with its page's best evidence won one
held-out question (npm doctor) but cost corpus_quality nDCG@10, so it is not in.

Round 3: a fourth set (``final``, 8 + 8, written from documents not read for the earlier
sets and committed before any change) measured once at the end. "why" inside a question
("find out why a package is installed") is now a search term (``npm explain``, "alias:
why"): held-out npm 6/11. final: sample 5/8, npm 4/8. Indexing npm's front-matter
``description`` as each page's opening line raised held-out npm to 7/11 and fresh npm to
6/8 but lost an original question (package-lock.json), so it is not in.

Round 4 (general changes, none keyed to a question): a page the query names shows its
opening among its chunks (the per-document cap dropped it behind option sections repeated
on many pages; the page keeps its rank, so corpus_quality is unchanged); "what does <named
page> do / run / check" is answered by the page's opening, and a named page's (or
section's) opening weighs by the share of the question its title says; a Markdown page's
front-matter ``description`` heads its first chunk (searched, embedded; the text is
unchanged) and the answerer quotes it as the page's one-line summary; a how-to quoted from
a page's description shows the synopsis unless the quote names the command. original
25/26, held_out 13/18 -> 14/18 (npm 6/11 -> 7/11; "Where is the per-user config file?" now
answers "**Per-user config file.** `$HOME/.npmrc` …", right but not the literal
``~/.npmrc``), fresh 11/16 -> 13/16, final 9/16 -> 12/16. A fifth set (``unseen``, 8 + 8)
written after these changes and committed before it was first asked: sample 6/8, npm
6/8.

Round 5, after reading the ``unseen`` answers (so ``unseen`` is no longer untouched): one
row of a table answers under its header ("which event is always the last one?"), and a
question about a negated case ("… when there is no restart script?") is answered by the
sentence about that case. unseen 12/16 -> 14/16, the other sets unchanged. A sixth set
(``last``, 8 + 8) written after round 5 and committed before it was first asked: sample
7/8, npm 7/8 (88 %). The 90 % target holds on the original set and on held_out's sample
questions; held-out-style overall (held_out, fresh, final, unseen, last) is 67/82 = 82 %.

Round 6 (general changes, after reading every set's misses, ``last`` included): two pages
with one summary are pages of one thing, and the one whose opening only repeats it (an
alias page: ``npm-ll``'s "List installed packages") gives way to the page that explains it
(``npm-ls``); a page's summary may lead however short; "who" wants a party (the owner, a
user); "how many <things>" a number of them ("at most 3 chunks per document", not "800
characters"); "which <things>" a sentence naming them that lists several or introduces
their list; a page named by a title word defines only what it says (npm's "Folders" page
no longer answers "what is in the backend folder?"). held_out 14/18 -> 15/18, fresh 13/16
-> 15/16, final 12/16 -> 13/16, unseen and last unchanged (14/16 each), original 25/26.
Weighting the question's words by their rarity among the passages found won two answers
and lost three (two of the tuned set), so it is not in. A seventh set (``round6``, 8 + 8)
written after these changes and committed before it was first asked: sample 8/8, npm 5/8
(81 %); held-out-style overall (held_out … round6) 84/98 = 86 %, short of the 90 % target.
Its npm misses: a password change answered by a bare "Default: …" line of the registry
option (``npm profile`` not retrieved), the cache's ``verify`` item quoted without its
command, and "where does npm get its configuration" answered from the ``config`` page's
option notes instead of ``npm-config``'s opening. Misses the answerer cannot mend are the
search's: a page whose words the question does not use is never among the passages
(``npm ping`` "pings" and "verifies", the question "checks" that the registry is
"reachable"; ``npm pkg get`` "retrieves" where the question "reads"; ``/healthz`` is
"liveness", the question asks what is "alive"), and a page's fourth chunk is cut by the
three-chunks-per-document cap ("legacy init", ``npm-dist-tag``'s "Purpose").

Round 7, after reading ``round6``'s answers (so it is no longer untouched): a word before a
particle is a phrasal verb only where a verb stands ("how do I log in"), not a noun before
a preposition ("change my password on the registry" had dropped every "password" the
documents say without "on" after it). round6 npm 5/8 -> 6/8, unseen npm 7/8 -> 8/8;
held-out-style overall 86/98 = 88 %.

Round 8 (a search change, made after reading the earlier sets' misses): a word technical
English writes clipped or in full counts in its other form too ("configuration" finds
``npmrc``'s "npm gets its config settings from …"; ``knowledge.word_forms.clipped_terms``).
round6 npm 6/8 -> 7/8, nothing lost; corpus_quality nDCG@10 BM25 0.8612 -> 0.8675, fused
0.8548 -> 0.8641. Tried and left out, each measured on every set: the page's description
heading every chunk (lost three, gained none), and a bonus for a name the question writes
(``/metrics``) held by few candidates (moved the ``/metrics`` line up from ninth to fourth
but gained no answer). An eighth set (``round8``, 8 + 8) written after the change and
committed before it was first asked: sample 8/8, npm 5/8 (81 %); held-out-style overall
(held_out … round8) 100/114 = 88 %, still short of 90 %. Its npm misses: ``npm trust``'s
"OpenID Connect" sits in its description section, a chunk the search did not return;
"how do I uninstall npm itself?" answered by ``npm uninstall``'s page instead of the
"Removal" page (whose title says neither word); the alias sentence of "Package spec"
quoted without the ``<alias>@npm:<name>`` line above it.

Round 9 (answerer changes only, each replayed over every set's captured search results
before it was kept): a name the question writes as one (a path ``/metrics``, an
identifier ``perplexity_search``, a code span) counts twice in a unit's coverage ("what
does the /metrics endpoint return?" is the ``/metrics`` line); a how-to answered by an
item of a page's subcommand list ("verify: Verify the contents of the cache …") shows the
synopsis line that runs it (``npm cache verify``); a how-to answered by what a section says
first shows the form the section opens with (``<alias>@npm:<name>`` under "Aliases",
``npm shrinkwrap``); a quote never ends on a sentence introducing a list it does not show.
final sample 7/8 -> 8/8, round6 npm 7/8 -> 8/8, round8 npm 5/8 -> 6/8; held-out-style
(held_out … round8) 103/114 = 90 %, nothing lost. Tried and left out: derivational
suffixes (-ness, -ity, -ment, -able) in the answerer's stemmer (no answer changed); the
page's summary as context of every unit (lost "npm profile set password"); saying the
passage whose lead covers the question by its own words first (put the right passage
first for the stream resume question but the wrong one for "where do the core tools
appear"); a bonus for a command in a how-to's lead (lost an original answer). A ninth set
(``round9``, 10 + 10, from facts and pages no earlier set asked about) written after these
changes and committed before it was first asked: sample 9/10, npm 4/10 (65 %);
held-out-style overall (held_out … round9) 116/134 = 87 %, short of 90 %. Read after
the measurement (search results captured once more, nothing changed for them): five of
its seven misses are the search's, the sentence that answers is in none of the eight
passages: two pages whose three kept chunks are not the one that answers (``npx``'s
"passed directly to the executed command", dependency-selectors' ``.dev`` type
selector: the per-document cap), and three questions in other words than the page's
("never gets published" / "prevent it from being published at all", ``"private":
true``; "laid out in node_modules" / ``install-strategy``; "what can follow the # in a
git URL" / developers' "tag, sha, or branch"). Two are the answerer's: the passage held
``AGENT_CORS_ORIGINS`` ("allowed browser origins") and the registry page's "two
headers", and another sentence sharing more of the question's words was quoted.
Round 10 (after reading round9's misses): a second, page-scoped read — once the first
search has found the page, the answerer reads it again through ``search_text`` scoped to
that document (``llm.extractive_page_read``: the question's words less the page's title,
whose word every chunk of the page says), a tool call in the stream and the log like the
first, so the chunk the three-chunks-per-page cap left out can be quoted (``npx``'s
"passed directly to the executed command"); and a quote never opens with a sentence
referring back to text not shown ("This command removes …" now follows the page's
summary; "This resulted in some shifts in its functionality:" is not quoted) — the
checks count such dangling openings: 18 over every set before (all npm: original 4,
held_out 4, fresh 2, final 3, unseen 1, round6 1, round8 1, round9 2), 0 after.
round9 npm 4/10 -> 5/10, nothing lost; held-out-style (held_out … round9) 117/134. The
other round9 misses stay: dependency-selectors' ``.dev`` is on a page neither best nor
named by the question ("selectors" is not "select"); three are in other words than the
page's; ``AGENT_CORS_ORIGINS`` ("allowed browser origins", the question's "web page")
and the registry's "two headers" (a section split across chunks: the chunk holding the
sentence with its list has lost the heading the question names, and a later sentence
sharing more of the question's words is quoted) are left, their causes named, not
patched. A tenth set (``round10``, 10 + 10) written after these changes and committed
before it was first asked: sample 10/10, npm 6/10 (80 %); held-out-style overall
(held_out … round10) 133/154 = 86 %, short of 90 %. Its four npm misses are the
answerer's this time, each fact among the passages: ``npm stage``'s "Staged publishing
allows …" ranked second behind a row of its table; the Organizations page's "The super
admin is the only person who can add users" fifth; ``npm install-scripts``' "EGLOBAL"
sentence and ``npm set``'s synopsis behind passages of ``scripts`` and ``config`` that
share more of the question's words.

Round 11 (general changes, each replayed over every set's captured passages with
``bench/offline_answers.py --replay`` before it was kept): search results carry the
``section`` a chunk sits under (``knowledge_base_search`` and ``search_text``), and the
answerer reads a passage continuing a section under its heading; what a section says
first may open the next chunk (the registry's "two headers"), and a heading asking the
question itself in one word more names its section; a hyphenated name or an option the
question writes is a name (``install-scripts``, ``--global``: EGLOBAL); a glossary entry
answers "what is" about its term (``backend/``); a how-to is answered by the setting or
command named after what it asks (``AGENT_CORS_ORIGINS``, ``AGENT_LLM_PROVIDER``, ``npm
ping``). The ten earlier held-out-style sets 132/154 -> 138/154 (132: round10 sample's
``AGENT_LLM_PROVIDER`` had been lost to a search change made elsewhere), nothing lost.
Tried and left out (each on every set): weighting words by their rarity among the
pages found (lost two to five, the tuned set's among them, at every strength), a bonus
for a stronger or weaker search-rank prior (lost one or two, or changed nothing), a
page's summary in a named page's share (nothing gained). An eleventh set (``round11``, 10 + 10) written after these
changes and committed before it was first asked: sample 8/10, npm 3/10 (55 %).

Round 12, after reading ``round11``'s answers: a passage quoted from a section named by
an option or field keeps the name as its label (two round11 answers quoted the right
sentence without ``save-exact`` / ``peerDependencies``), and the question's adjacent
words said side by side count a little ("each document"). round11 11/20 -> 14/20,
nothing else changed. A twelfth set (``round12``, 10 + 10) written after these changes
and committed before it was first asked: sample 9/10, npm 3/10 (60 %); held-out-style
overall (held_out … round12) 164/194 = 85 %, short of 90 %. round12's npm misses: three
the search's (``main``, ``npm publish --dry-run``, ``npm pkg set`` not among the
passages), four the answerer's (``postversion`` quoted for ``preversion``; the license
section's first paragraph without the next one's "SPDX"; ``npm init``'s opening without
``--yes``; ``npm cache``'s summary without its ``clean`` line).

Round 13, after reading round12's misses (each change replayed over every set's captured
passages before it was kept): a how-to answered by a section's first paragraph that says
what to do gets the next paragraph when that one shows the form with its code block (the
license section's "add a current SPDX license identifier …, like this:"); a how-to asked
of a command's page is answered by the item of its subcommand list that does it
("clean: Delete … out of the cache folder", with ``npm cache clean``); and what a how-to
asks to do (the words right after "how do I", before "when …", "with …") counts 1.3
times its circumstances ("skip the questions" over "creating a package.json": ``-y`` /
``--yes``). round12 npm 3/10 -> 6/10, nothing else changed. Why the others stay: the
question "before npm version changes the version" never names ``preversion`` (so the
exact-name weight does not apply), and the chunk holding that step is not among the
passages: the first search keeps three chunks of the page, and the page-scoped read is
capped at three chunks too (the ranking's per-document cap applies within a ``doc_id``
scope); ``main``, ``npm publish --dry-run`` and ``npm pkg set`` are questions in other
words than their pages'. Tried and left out: ``knowledge_base_search`` with 12 passages
instead of 8 (the fact reached the passages of five more questions over all sets, but
round9 npm lost two answers and none was gained); reading the two best pages again (a
round6 question's run ended without a ``response``). A thirteenth set (``round13``,
10 + 10) written after these changes and committed before it was first asked: sample
9/10, npm 4/10 (65 %); held-out-style overall (held_out … round13) 180/214 = 84 %, short
of 90 %. Of its seven misses two are the search's (``--save-dev``, ``{prefix}/bin`` not
among the passages) and five the answerer's, each fact among the passages found
(``npm token list``, ``${VARIABLE_NAME}``, ``prepublishOnly``, ``--no-save``, the FTS
"triggers").
Round 14, after reading round14 (10 + 10, written from the documents after round 13 and
committed before it was first asked: sample 9/10, npm 4/10, one answer ending on an
item that promised a command it did not show): an item ending with a colon is quoted
with the code block or nested items it introduces and never without them (the checks
now count such dangling introductions: 0 in every set); an entry naming several
subcommands shows the synopsis line of the one asked; a paragraph after a section's
opening code block opens the section; a reader's verb meets the document's (remove /
delete …); the page-scoped read asks five chunks of the page, not three. round14 npm
4/10 -> 8/10, every other set unchanged; held-out-style overall (held_out … round14)
197/234 = 84 %.
Round 15: a fifteenth set (``round15``, 10 + 10, committed before it was first asked):
sample 9/10, npm 6/10 (75 %). After reading it: "turn on" / "switch on" reads as
"enable" and "turn off" / "switch off" as "disable", in the question and the text alike
(``npm profile enable-2fa`` over the ``disable-2fa`` item beside it); an identifier with
underscores (``search_text``) is one name, its words met only where a text writes it
whole. round15 npm 6/10 -> 7/10, every other set unchanged; held-out-style overall
(held_out … round15) 213/254 = 84 %.
Round 16: a sixteenth set (``round16``, 10 + 10, committed before it was first asked):
sample 8/10, npm 7/10 (75 %). After reading it: a table row is about what its first
cell names (the ``message_complete`` row, not the ``error`` row naming it among its
values); "which <kind> …" is answered by a unit calling a thing of that kind by its name
("An FTS5 full-text index"); "-ies" / "-ied" is "-y" again ("retries" meets "retry"); a
setting's paragraph after its "Default: … / Type: …" items opens its section for a
question naming the setting by two words or more (``fetch-retries``); "clear" and "rm"
are "remove"; a sentence opening "However, …" is quoted with what it turns from and counts
as a dangling opening otherwise. round16 15/20 -> 18/20, every other set unchanged; held-out-style overall
(held_out … round16) 231/274 = 84 %.
Round 17: a seventeenth set (``round17``, 10 + 10, committed before it was first asked):
sample 8/10, npm 6/10 (70 %). Round 17 looked at the search first: of the misses over all
sets whose passages lack the fact (17), one was a page the question names as written
(``npm ci``) read after a page named by scattered words; that page is now read first
(the passage reaches the answerer, the answer is still the answerer's miss). After
reading round17's answers: the examples a question gives (", like alpha or beta,") are
not words an answer must say (``preid``). round17 14/20 -> 15/20, every other set
unchanged; held-out-style overall (held_out … round17) 246/294 = 84 %.
Round 18: an eighteenth set (``round18``, 10 + 10, committed before it was first asked):
sample 8/10, npm 6/10 (70 %). After classifying round15-round18's misses (4 the search's,
13 the answerer's choice, 1 its formatting): the question's words weighed by how few of
the passages say them, a duration in words ("a day") as the amount "how long" asks for,
"turn on X" read as the action "enable X", and the name a one-item list gives the
paragraph under it (``npm pkg fix``) kept as its label. round18 14/20 -> 17/20, last
14/16 -> 15/16, every other set unchanged; held-out-style overall (held_out … round18)
262/314 = 83 %.
Round 19: a nineteenth set (``round19``, 10 + 10, committed before it was first asked):
sample 9/10, npm 4/10 (65 %). After classifying round15-round19's misses (7 the search's,
14 the answerer's choice, 1 its quoting): a number with its unit's symbol ("20 s", "5
MiB") is the amount "how much time / how big" asks for, and a number followed by a
function word ("HTTP 204 on reconnect") is none. round19 13/20 -> 14/20, every other set
unchanged; held-out-style overall (held_out … round19) 276/334 = 83 %.
Round 20: a twentieth set (``round20``, 10 + 10, committed before it was first asked):
sample 8/10, npm 5/10 (65 %). After classifying round15-round20's misses: "each" meets
"every"; a second passage may come from another part of the page already quoted (not
the chunk quoted nor the next or previous one) when it scores 0.85 of the best; a
sentence opening with the negated case a question asks about ("If the initializer is
omitted …") gains 0.25. round20 unchanged (13/20), seven answers gained elsewhere, none
lost; held-out-style overall (held_out … round20) 289/354 -> 296/354 = 84 %.
Round 21: a twenty-first set (``round21``: 10 sample questions, six of them a newcomer's
that got wrong or weak answers, and 2 over the project's docs/, asked by the bench only;
committed before it was first asked): sample 5/10, docs 0/2. After reading it: another
part of the page already quoted joins at 0.6 of the best (not 0.85) when it says every
word of the question the answer has not said yet (the configuration page's opening and
its ``AGENT_DB_PATH`` / ``AGENT_DATABASE_URL`` item). round21 5/12 -> 6/12, every other
set unchanged; held-out-style overall 296/354, with round21 301/366 -> 302/366.
Round 23: a twenty-third set (``round23``, 15 sample questions over pages the round's
changes were not worked on, written before any change of the round): 12/15 with the code
before the round, one of its misses no answer at all (the page-scoped read searched only
words the text search drops or the page lacks, and the run ended asking the user to
rephrase); 13/15 once such a read is not made. Every other set unchanged.
Round 26: a unit saying a run of the question's own words in a row (three content words or
more) says what the question says, and a yes/no question is answered by a sentence about
its subject: held_out npm 8/11 -> 9/11, round10 npm 8/10 -> 9/10, round11 npm 5/10 ->
6/10; every other set unchanged.
The floors below are the figures reached, so any lost answer fails.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from app.config import Settings
from tests.conftest import collect_sse, running_app
from tests.support.deadline import reap, within
from tests.support.offline_answers import (
    SETS,
    carries,
    dangling_introductions,
    dangling_openings,
    fragments,
    load_questions,
    npm_docs,
    repeated_sentences,
    response_of,
)
from tests.support.procs import REPO, AgentServer, child_env

#: Share of facts carried, per question set (original: tuned on; the others only measured).
FLOORS = {
    "original": {"sample": 0.91, "npm": 0.92},  # 11/12 here (12/12 in the bench, beside the npm docs), 13/14
    "held_out": {"sample": 1.0, "npm": 0.81},  # 7/7, 9/11 (8/11 before round 26, 7/11 before round 6)
    "fresh": {"sample": 1.0, "npm": 1.0},  # 8/8 (6/8 before round 6), 8/8 (7/8 before round 20)
    "final": {"sample": 1.0, "npm": 0.87},  # 8/8 (6/8 before round 6, 7/8 before round 9), 7/8 (6/8 before round 11)
    "unseen": {"sample": 1.0, "npm": 1.0},  # 8/8 (7/8 before round 11), 8/8 (6/8, 6/8 when first measured)
    "last": {"sample": 1.0, "npm": 1.0},  # 8/8 (7/8 before round 48), 8/8 (7/8 measured once; 8/8 since round 18)
    # round6 sample 7/8 from round 38 to 47: "What constant does the reciprocal rank fusion use?"
    # was carried by the sample KB's "k = 60", untrue since the search fuses min-max normalised
    # scores (knowledge/fusion.py); its fact is now that, carried since round 48's search
    # paragraph says it is no reciprocal rank fusion.
    "round6": {"sample": 1.0, "npm": 1.0},  # 8/8 (7/8 before round 48), 8/8 (5/8 measured once; 7/8 after round 8)
    "round8": {"sample": 1.0, "npm": 0.75},  # 8/8, 6/8 (5/8 when measured once after round 8)
    # npm 5/10 since the sample grew (issue 20's bigger sample KB): FTS5's bm25() takes its
    # statistics over every bucket, so the default bucket's new pages move the npm bucket's
    # ranking - npx's options lost a tie (0.541 / 0.541), engine-strict's chunk left the
    # first eight passages (docs/knowledge-base.md). Scoring a bucket by its own statistics
    # brings that chunk back but is no fix: simulated in round 25 (each corpus ingested
    # alone), npm keeps 163 facts of 193 in the first eight instead of 164, the sample 217
    # of 228 instead of 221.
    "round9": {"sample": 1.0, "npm": 0.5},  # 10/10, 5/10 (6/10 with the smaller sample; 9/10, 4/10 measured once)
    "round10": {"sample": 1.0, "npm": 0.9},  # 10/10, 9/10 (8/10 before round 26, 7/10 before round 20; 6/10 first)
    "round11": {"sample": 0.9, "npm": 0.6},  # 9/10 here (8/10 before round 20), 6/10 (5/10 before round 26; 3/10 first)
    "round12": {"sample": 0.9, "npm": 0.6},  # 10/10 here, 9/10 in the bench; 6/10 (3/10 measured once, after round 12)
    "round13": {"sample": 1.0, "npm": 0.5},  # 10/10 (9/10 before round 20), 5/10 (4/10 until round 27)
    "round14": {"sample": 1.0, "npm": 0.9},  # 10/10, 9/10 (9/10, 8/10 before round 20; 9/10, 4/10 first)
    "round15": {"sample": 0.8, "npm": 0.7},  # 8/10 here, 9/10 in the bench (before and after round 15); 7/10
    "round16": {"sample": 1.0, "npm": 0.7},  # 10/10, 7/10 (8/10 with the smaller sample, see round9; 7/10 first)
    "round17": {"sample": 1.0, "npm": 0.7},  # 10/10 (9/10 before round 48), 7/10 (8/10, 6/10 when first asked)
    "round18": {"sample": 0.9, "npm": 0.7},  # 9/10 here, 10/10 in the bench; 7/10 (8/10, 6/10 when first asked)
    "round19": {"sample": 0.9, "npm": 0.5},  # 9/10 here, 10/10 in the bench (9/10 first); 5/10 (4/10 until round 27)
    "round20": {"sample": 1.0, "npm": 0.5},  # 10/10 (9/10 before round 48, 8/10 first), 5/10 (5/10 first)
    "round21": {"sample": 0.5, "npm": 1.0},  # 5/10 here, 6/10 in the bench (4/10, 5/10 before round 21); no npm
    "round23": {"sample": 0.8, "npm": 1.0},  # 12/15 here, 13/15 in the bench (12/15 before round 23); no npm
    "walkthrough": {"sample": 0.66, "npm": 1.0},  # 4/6 here, 5/6 in the bench (3/6 first, then 4/6); no npm
    "followup": {"sample": 0.9, "npm": 1.0},  # 9/10 (5/10 before the answerer read the conversation); no npm
    "round35": {"sample": 0.97, "npm": 1.0},  # 41/42 (40/42 before round 36, 30/42 before round 35); no npm
    "round38": {"sample": 0.85, "npm": 1.0},  # 30/35 here, 31/35 in the bench (29/35, 30/35 before round 46)
    "round45": {"sample": 0.94, "npm": 1.0},  # 34/36 here, 35/36 in the bench (32/36, 33/36 before round 48); no npm
    # round46: 29/31 here, 30/31 in the bench (28/31, 29/31 before round 48; 20/31 held out in round 46)
    "round46": {"sample": 0.93, "npm": 1.0},
    "round47": {"sample": 0.8, "npm": 1.0},  # 21/26 here, 22/26 in the bench (18/26, 19/26 before round 48)
    "round48": {"sample": 0.76, "npm": 1.0},  # 19/25 here, 20/25 in the bench (14/25, 15/25 before round 48, held out)
    "round50": {"sample": 0.83, "npm": 0.5},  # 11/12, 6/12 in the bench (5/12 when first asked, held out)
    # walkthrough50: 27/30 here, 26/30 in the bench (26/30, 25/30 before round 53's causative "make
    # users log in"; 21/26 before round 53's sample-KB sentences, which came with four questions added -
    # stop, install, a web UI, OpenAI; 20/26 with "Which models are supported?", added later, before the
    # overview's "Supported models"; 18/25 before round 51's two sample-KB sentences, 15/25 before round
    # 50b); no npm
    "walkthrough50": {"sample": 0.89, "npm": 1.0},
    "round51": {"sample": 0.76, "npm": 0.58},  # 10/13 here and in the bench, 7/12 (held out, before round 51)
    "round52": {"sample": 0.91, "npm": 0.16},  # 11/12 here and in the bench, 2/12 (held out, before round 52)
    "round53": {"sample": 0.58, "npm": 1.0},  # 7/12 here and in the bench (5/12 held out, before round 53); no npm
}
#: One loop for the module: the sample questions' task runs across both tests.
pytestmark = pytest.mark.asyncio(loop_scope="module")

QUOTED_IN_THE_ISSUE = {
    "What does npm ci do differently from npm install?",
    "How do I resume a stream after a disconnect?",
}


def defaults(tmp_path: Path) -> dict[str, str]:
    """The default configuration on a fresh database, with no model reachable."""
    return {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "OLLAMA_HOST": "http://127.0.0.1:9"}


async def ingest(env: dict[str, str], path: Path, bucket: str) -> None:
    """``agentchat ingest PATH --bucket B`` as a user runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "ingest",
        str(path),
        "--bucket",
        bucket,
        "--quiet",
        "--keep-going",
        cwd=REPO,
        env=child_env(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await within(proc.communicate(), f"agentchat ingest {path}", 300)
    finally:
        await reap(proc, "agentchat ingest", grace=5)
    assert proc.returncode == 0, out.decode()[-2000:]


async def ask_each(
    client: httpx.AsyncClient, base: str, questions: list[dict[str, str]], context: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Each question asked over SSE in turn; the question with its ``response`` event. A
    question with ``before`` (earlier questions of its conversation: a follow-up) is asked
    after them in one conversation, as a person chatting asks it; only its answer is kept."""
    results: list[dict[str, Any]] = []
    for item in questions:
        conversation: str | None = None
        for asked in [*item.get("before", ()), item["question"]]:
            body: dict[str, Any] = {"message": asked, "context_type": "knowledge"}
            if context:
                body["context"] = context
            if conversation is not None:
                body["conversation_id"] = conversation
            events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
            assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"
            conversation = next(e.json()["conversation_id"] for e in events if e.event == "run_started")
        results.append({**item, **response_of(events)})
    return results


@asynccontextmanager
async def service(env: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[list[dict[str, Any]]]]]:
    """Serve the app on ``env`` until its knowledge base is ready; yield ``ask(questions,
    context)``, which asks each question over SSE and returns its ``response`` event."""
    async with running_app(Settings.from_env(env)) as (base, _), httpx.AsyncClient(timeout=120) as client:
        for _ in range(600):  # the sample KB is ingested at start-up
            if (await client.get(f"{base}/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.1)

        async def ask(questions: list[dict[str, str]], context: dict[str, Any] | None) -> list[dict[str, Any]]:
            return await ask_each(client, base, questions, context)

        yield ask


async def ask_all(
    env: dict[str, str], questions: list[dict[str, str]], context: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """``questions`` asked of a service of their own (the benches' way)."""
    async with service(env) as ask:
        return await ask(questions, context)


def judge(results: list[dict[str, Any]], floor: float) -> None:
    for r in results:
        print(f"\n=== {r['question']}  (must carry: {r['fact']})\n{r['answer']}")
    for r in results:
        assert repeated_sentences(r["answer"]) == [], (r["question"], r["answer"])
        assert fragments(r["answer"]) == [], (r["question"], r["answer"])
        assert dangling_openings(r["answer"]) == [], (r["question"], r["answer"])
        assert dangling_introductions(r["answer"]) == [], (r["question"], r["answer"])
        # One page is cited from one file: never as its .md and its .html copy.
        files = {s["location"] for s in r["sources"] if s.get("location")}
        assert len({f.rsplit(".", 1)[0].rsplit("/", 1)[-1] for f in files}) == len(files), r["sources"]
        if r["question"] in QUOTED_IN_THE_ISSUE:
            assert carries(r["answer"], r["fact"]), (r["question"], r["answer"])
    carried = sum(carries(r["answer"], r["fact"]) for r in results) / len(results)
    print(f"\ncarried {carried:.0%} of {len(results)}")
    assert carried >= floor, [r["question"] for r in results if not carries(r["answer"], r["fact"])]


#: Every set is asked of one service (a start and a stop per set were ~40 % of this file's
#: time). All the sets together are more than the default 60 requests a minute one user may
#: make, so that one limit is raised; the answers are the same as from a service per set
#: (the bench's way).
ONE_SERVICE = {"AGENT_REQUESTS_PER_MINUTE": "100000"}


async def _sample_answers(workdir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every question set's sample questions, asked of ``agentchat serve`` in a process of
    its own on a fresh database with the defaults (it ingests the sample KB at start-up)."""
    server = AgentServer(workdir, {**defaults(workdir), **ONE_SERVICE}, name="sample")
    server.start()
    try:
        await server.wait_ready(timeout=240)
        out: dict[str, list[dict[str, Any]]] = {}
        async with httpx.AsyncClient(timeout=120) as client:
            for name in SETS:
                questions = load_questions(name=name)["sample"]
                if questions:
                    out[name] = await ask_each(client, server.base, questions, None)
        return out
    finally:
        await asyncio.to_thread(server.close)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sample_answers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[asyncio.Task[Any]]:
    """The sample questions being answered, started once for the module so that their
    server answers on the other core while the npm test ingests and asks in this one
    (the two were ~35 % and ~65 % of this file's time one after the other). The npm test
    asks for it only to start it first; the sample test judges what it returns."""
    task = asyncio.create_task(_sample_answers(tmp_path_factory.mktemp("sample")), name="sample-answers")
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ~100-120 s on a quiet machine (an ingest of the npm docs, then every set's npm
# questions through a real service); at load 15-20 it ran past the suite's 300 s limit.
@pytest.mark.timeout(600)
async def test_npm_documentation_questions_are_answered_whole(
    tmp_path: Path, sample_answers: asyncio.Task[Any]
) -> None:
    docs = npm_docs()
    if docs is None:
        pytest.skip("npm is not installed: no $(npm root -g)/npm/docs to ask about")
    env = defaults(tmp_path)
    await ingest(env, docs, "npm")
    results: dict[str, list[dict[str, Any]]] = {}
    async with service({**env, **ONE_SERVICE}) as ask:
        for name in SETS:
            questions = load_questions(name=name)["npm"]
            if not questions:  # round21 has no npm questions
                continue
            results[name] = await ask(questions, {"bucket": "npm"})
            judge(results[name], FLOORS[name]["npm"])
    ci = next(r for r in results["original"] if r["question"].startswith("What does npm ci"))
    # The list the sentence introduces comes with it, as Markdown, from one copy of the page.
    assert ci["answer"].count("The main differences between using") == 1
    assert "\n* " in ci["answer"] or "\n- " in ci["answer"]
    assert len({s["location"] for s in ci["sources"]}) == 1, ci["sources"]  # one copy of the page


async def test_sample_kb_questions_are_answered_whole(sample_answers: asyncio.Task[Any]) -> None:
    results = await within(sample_answers, "the sample questions' answers", 600)
    assert set(results) == {name for name in SETS if load_questions(name=name)["sample"]}
    for name, answers in results.items():
        judge(answers, FLOORS[name]["sample"])


#: A citation closing a passage of the answer: ``[agentchat-durable-runs#1]``.
_CITATION = re.compile(r"\[([^\]\s]+)\]")


async def test_readme_example_leads_with_the_resume_section(sample_answers: asyncio.Task[Any]) -> None:
    """The README's and the playground's example question is answered first by the
    section the search ranks first and whose heading says the question ("Resuming a
    stream with Last-Event-ID"), not by the AI SDK's reload section, which says "resume"
    and "stream" only inside its code; carrying ``Last-Event-ID`` somewhere in the answer
    (through the troubleshooting page, second) is not enough."""
    results = await within(asyncio.shield(sample_answers), "the sample questions' answers", 600)
    answer = next(r for r in results["original"] if r["question"] == "How do I resume a stream after a disconnect?")
    first = _CITATION.search(answer["answer"])
    assert first is not None, answer["answer"]
    lead = answer["answer"][: first.start()]
    assert first.group(1).startswith("agentchat-durable-runs#"), answer["answer"]
    assert "Last-Event-ID" in lead and "/v1/agent/runs/{run_id}/events" in lead, answer["answer"]
    assert any(s["id"].startswith("agentchat-durable-runs#") for s in answer["sources"]), answer["sources"]
