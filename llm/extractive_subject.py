"""What the question is about by name, and whether the passages found mention it at all.

A question naming a tool, product or identifier the knowledge base never mentions ("How
do I restart a Kubernetes pod?", "What does npm ci do differently from npm install?"
over a knowledge base about this service) still shares common words with some passage
("restart", "install"), and the best of those scored as an answer: the list of HTTP
error codes for npm ci. A reader takes that for a broken service. The passages are the
knowledge search's best for the question, its full-text half ranking by the question's
rarest words, so a name none of them says is one the knowledge base does not hold, and
no passage can be about it: the answerer says so instead.

A name is what the question writes as one, not any word the passages lack (a reader's
paraphrase uses words the documents do not, "pick up an answer again", and still has
an answer):

* a run of capitalised words, not opening the question, holding a proper noun (a word
  with lower-case letters after its capital: "Kubernetes", "AWS Lambda", "Django's
  ORM"); an acronym alone ("CPU cores") is a common noun of technical prose;
* the owner of a possessive ("webpack's dev server");
* a code span, a path, an underscore identifier or an option (``llm.extractive_forms``'s
  ``NAME`` less its hyphenated words, which are as often adjectives: "built-in");
* what a definition question asks about ("What does npm ci do …?", "what is X?").

A name is unmentioned when no passage (its text, title or section) says any of its
words. It declines the question only when it is in what the question asks
(``declined``): newcomers write a greeting, a sentence of context or a sign-off around
their question ("Hello from Berlin! How do I cancel a run?", "My team uses Slack; how do
I add an MCP server?", "Cheers, Maria"), and a name there says nothing of what is asked;
the answer is chosen for the ask alone (``ask_of``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable

from llm.extractive_words import Words, stems

#: A word of the question as written, with a possessive ending it may carry.
_WORD = re.compile(r"[^\W_][\w.+#]*(?<![.])(?P<possessive>['\u2019]s\b)?")
#: What ends a sentence of the question before a word (with a space after it), and what
#: opens one (with or without): a word after either is capitalised as a sentence's first.
_SENTENCE_END = ".!?:;"
#: Spanish opens a question or an exclamation with an inverted mark ("¿Qué significa …?"):
#: the word after it is the sentence's first.
_SENTENCE_OPENING = '"\u201c(\u00bf\u00a1'
#: A proper noun: a capital with lower-case letters after it ("Kubernetes", "GitHub").
_PROPER = re.compile(r"^[A-Z].*[a-z]")
#: Code spans, paths, underscore identifiers and options (``NAME`` without hyphenated words).
_CODE = re.compile(r"`[^`]+`|(?<![\w/.])/[^\W_][\w./-]*|\b[^\W\d_]\w*_\w+|(?<![\w-])--?[^\W\d_][\w-]*")
#: "What does X do …?" / "what is X?": X is what the question asks about.
_DEFINED = re.compile(
    r"^\s*what(?:\s+(?:does|do|is|are)|['\u2019]s)\s+(?P<subject>.+?)(?:\s+do\b.*)?\s*[?.!]*\s*$", re.IGNORECASE
)
_ARTICLE = re.compile(r"^(?:the|a|an|my|your|our|its|their)\s+", re.IGNORECASE)
#: A preposition ending a definition's subject ("what is X for?") is not part of it.
_TRAILING = re.compile(r"\s+(?:for|in|about|of|like|with|to|on)$", re.IGNORECASE)


def _starts_sentence(text: str, at: int) -> bool:
    """The word at ``at`` opens the question or a sentence of it: nothing but spaces
    before it (a question sent with a leading space or blank line), or a sentence's end
    and a space, or an opening quote or bracket. Read backwards over the spaces only: a
    search through all the text before, once per capitalised word, took 2.7 s of CPU for
    a question of ``AGENT_MAX_MESSAGE_CHARS`` (32,000)."""
    mark = at
    while mark > 0 and text[mark - 1].isspace():
        mark -= 1
    if mark == 0:
        return True  # only spaces before it: the question's first word
    return text[mark - 1] in _SENTENCE_OPENING or (mark < at and text[mark - 1] in _SENTENCE_END)


#: German capitalises every noun, so a German question's capitals say nothing of names
#: ("Muss ich nach einem Update meiner Dokumente agentchat ingest erneut laufen lassen?"
#: was declined for "Dokumente"). A question with two of these function words (none an
#: English word a question writes: no "die", "an", "was", "will", "im") is German ...
_GERMAN = frozenset(
    "ich wir wie welche welcher welches warum kann muss soll einen einem einer eines ein eine "
    "mein meine meiner meinen meinem dein deine unser unsere nicht und oder mit für über der den "
    "dem des das ist sind wird werden auf bei nach zum zur vom beim kein keine keinen".split()
)
#: ... and in it a capitalised word after an article or possessive ("einem Update", "den
#: Port des Servers"), maybe past one adjective ("meiner eigenen Dokumente"), is a common
#: noun; one without ("wie installiere ich Kubernetes?") may still be a name.
_GERMAN_ARTICLE = frozenset(
    "der die das den dem des ein eine einen einem einer eines mein meine meiner meinen meinem meines "
    "dein deine deiner deinen deinem unser unsere unserer unseren unserem kein keine keiner keinen "
    "keinem welche welcher welches welchen welchem diese dieser dieses diesen diesem jede jeder jedes "
    "jeden jedem zum zur im am vom beim ins".split()
)


def _is_german(question: str) -> bool:
    words = {w.casefold() for w in re.findall(r"[^\W\d_]+", question)}
    return len(words & _GERMAN) >= 2


def _capitalised_runs(question: str) -> list[str]:
    """The runs of capitalised words holding a proper noun, and possessives' owners; in a
    German question (``_is_german``) not a run after an article (``_GERMAN_ARTICLE``)."""
    runs: list[str] = []
    run: list[tuple[int, int]] = []  # each word's start and end (its possessive left out)
    proper = False
    common = False  # a German run after an article: nouns, not a name
    end = -1
    german = _is_german(question)
    before: list[str] = []  # the words before this one, folded (German questions only)

    def close() -> None:
        nonlocal run, proper, common
        if run and proper and not common:
            runs.append(question[run[0][0] : run[-1][1]])
        run, proper, common = [], False, False

    for m in _WORD.finditer(question):
        word = m.group(0)
        bare = word[: -len(m.group("possessive"))] if m.group("possessive") else word
        gap = question[end : m.start()] if end >= 0 else ""
        capital = bare[:1].isupper() and bare != "I" and not _starts_sentence(question, m.start())
        if run and (not capital or gap.strip()):
            close()
        if capital and not run and german and _after_article(before):
            common = True  # German nouns: "nach einem Update", "einen MCP Server"
        if capital:
            run.append((m.start(), m.start() + len(bare)))
            proper = proper or _PROPER.match(bare) is not None
        elif m.group("possessive"):
            runs.append(bare)
        if m.group("possessive") and capital:
            proper = True  # "Django's ORM": an owner named in capitals is a proper name
        end = m.end()
        if german:
            before.append(bare.casefold())
    close()
    return runs


def _after_article(before: list[str]) -> bool:
    """The next word follows a German article, maybe past one adjective ("meiner eigenen")."""
    return bool(before) and (before[-1] in _GERMAN_ARTICLE or (len(before) >= 2 and before[-2] in _GERMAN_ARTICLE))


def _defined_subject(text: str) -> str:
    """What a definition question asks about ("What is the zebra launch code?": "zebra
    launch code"), without its article and a trailing preposition; "" for another question."""
    defined = _DEFINED.match(text)
    if defined is None:
        return ""
    return _TRAILING.sub("", _ARTICLE.sub("", defined.group("subject").strip()))


def _named(question: str, keep_run: Callable[[str, str], bool]) -> list[str]:
    """The question's names, as written: its capitalised runs that ``keep_run(text, run)``
    keeps, then its code spans, paths, identifiers and options, then a definition
    question's subject; each once."""
    text = unicodedata.normalize("NFKC", question)
    out = [run for run in _capitalised_runs(text) if keep_run(text, run)]
    out += [m.group(0) for m in _CODE.finditer(text)]
    out.append(_defined_subject(text))
    return list(dict.fromkeys(n for n in out if n))


#: Words that end a definition subject's leading noun phrase ("limits on attachments",
#: "token for streams"): its head is the last word before one.
_PHRASE_END = frozenset("of on in for to from with about by at as and or that which who whose when where".split())


#: A definition question whose subject is a noun phrase: "What is/are X?", "What does X
#: do?" - not "What does X tell the model?" or "What do errors look like …?", whose
#: subject runs on into what is asked of it.
_DEFINED_THING = re.compile(
    r"^\s*what(?:(?:\s+(?:is|are)|['\u2019]s)\s+.+?|\s+(?:does|do)\s+.+?\s+do\b[^?.!]*)\s*[?.!]*\s*$", re.IGNORECASE
)


#: Words that rank or judge ("the recommended database for production", "the fastest
#: embedder"): they choose among things the knowledge base may hold rather than name one,
#: and documentation rarely writes them, so they qualify nothing (``_qualifiers``).
_JUDGING = frozenset(
    "best worst better good bad right wrong correct proper ideal optimal typical usual normal common "
    "recommended preferred suggested advised fastest quickest slowest easiest simplest safest cheapest "
    "smallest largest biggest shortest longest latest newest oldest cleanest".split()
)


def _qualifiers(subject: str) -> list[str]:
    """The words qualifying the head of a definition subject's leading noun phrase - all
    its words but the last ("zebra" and "launch" of "zebra launch code"; none of "heartbeat",
    "limits" of "limits on attachments"). A thing the knowledge base holds is named by
    words it says: a qualifier no passage says names another thing than the passages'
    ("the zebra launch code" is no error code), while the head may be the reader's own
    word for it ("the retention window")."""
    phrase: list[str] = []
    for word in re.findall(r"[^\W_]+(?:['\u2019]s\b)?", subject):
        if word.casefold() in _PHRASE_END:
            break
        phrase.append(re.sub(r"['\u2019]s$", "", word))
    return [word for word in phrase[:-1] if word.casefold() not in _JUDGING]


def names(question: str) -> list[str]:
    """What the question writes as a name (see the module docstring), as written."""
    return _named(question, lambda _text, _run: True)


#: Words before a name that make it where or with what the question is set ("on Ubuntu",
#: "in Chrome", "On my Mac"), and the determiners that may stand between.
_SETTING = frozenset("on in with from under inside using via behind through at within for".split())
_DETERMINER = frozenset("my our your the a an their its this that".split())
#: How far before a name its preceding words are looked for (three words, whatever their length).
_BEFORE_CHARS = 200
#: The reader's own: a name between one of these and a common noun says what the reader's
#: thing is set in ("Which URL should my Kubernetes liveness probe hit?" asks about the
#: probe, as "a liveness probe on Kubernetes" would), not what is asked about; "restart a
#: Kubernetes pod" (an article) still asks about Kubernetes.
_OWN = frozenset("my our".split())
#: Two lower-case words right after the name: the noun it qualifies and the next word
#: ("my Kubernetes liveness probe", "our Jenkins job start"). One word alone ends the
#: question or is what is said of the name ("Why is my Redis slow?"), and a function word
#: in either place makes the first a verb with its object ("my Grafana show no data",
#: "make my Redis use less memory"): the name is then what is asked about.
_QUALIFIED_NOUN = re.compile(r"\s+([a-z][a-z-]*)\s+([a-z][a-z-]*)\b")
#: Words that follow a verb, never a noun of a compound: a determiner or quantifier.
_FUNCTION_WORDS = frozenset(
    "a an the no not any all some much many more less most least too very so this that these those "
    "its their your my our his her up down out off away again".split()
)


def _qualifies_a_noun(after: str) -> bool:
    """Whether the words after a name make it qualify the reader's own thing (``_OWN``)."""
    found = _QUALIFIED_NOUN.match(after)
    return found is not None and not (set(found.groups()) & _FUNCTION_WORDS)


def _is_object(text: str, name: str) -> bool:
    """Whether a capitalised name is what the question is about rather than its setting:
    an owner ("Django's ORM"), or a name in the question's last clause not after a
    preposition ("restart a Kubernetes pod", "use Elasticsearch instead of SQLite");
    "I'm on Ubuntu, how do I …", "My team uses Slack; how do I …", "I use Podman. How do
    I …", "(I use Podman)", "in Chrome" and "my Kubernetes liveness probe" (``_OWN``)
    set it."""
    at = text.find(name)
    if at < 0:
        return False
    after = text[at + len(name) :]
    if "'s" in name or re.match(r"['\u2019]s\b", after):
        return True
    if re.search(r"[,;:]\s", after):
        return False  # an earlier clause: the question proper comes after it
    said = re.search(r"[.!?](?=\s+\S)", after)
    if said is not None and said.group(0) != "?":
        return False  # a sentence before the question: "I use Podman. How do I …?"
    if text[:at].count("(") > text[:at].count(")"):
        return False  # an aside: "How do I start the service (I use Podman)?"
    # The three words before it, read from just before it (not from the whole prefix, once
    # per name: quadratic in a long message naming many things).
    before = [w.casefold() for w in re.findall(r"[^\W\d_]+", text[max(0, at - _BEFORE_CHARS) : at])][-3:]
    if before and before[-1] in _OWN and _qualifies_a_noun(after):
        return False  # the reader's own thing: "my Kubernetes liveness probe", "our Jenkins job"
    while before and before[-1] in _DETERMINER:
        before.pop()
    return not (before and before[-1] in _SETTING)


def asked_about(question: str) -> list[str]:
    """The names (``names``) the question is about, not merely set in: a possessive's
    owner or a name holding one ("webpack's dev server", "Django's ORM"), a code span,
    path, identifier or option, a definition question's subject. A capitalised name
    may be only the setting of a question the knowledge base answers ("I'm on Ubuntu,
    how do I start the service?", "resume a stream in Chrome"): ``_is_object``."""
    return _named(question, _is_object)


def proper_names_asked(question: str) -> list[str]:
    """The capitalised names the question is about (``asked_about``'s runs of capitalised
    words: "Gemini" of "How do I connect Gemini?", not "Ubuntu" of "I'm on Ubuntu, how do
    I …"; nor a possessive's lower-case owner, "a search result's score"), as written:
    what the answer must be about when a passage says it."""
    text = unicodedata.normalize("NFKC", question)
    return [run for run in _capitalised_runs(text) if run[:1].isupper() and _is_object(text, run)]


#: Where a sentence of the message ends: its marks and a space or the message's end
#: ("Next.js", "3.12" and "package-lock.json" end nothing).
_SENTENCE_BREAK = re.compile(r"[.!?]+(?=\s|$)")
#: What opens a question's own clause after a clause setting it ("I'm on Ubuntu, how do
#: I …", "My team uses Slack; how do I …", "Quick question - can I …", "Hola, ¿cómo …"):
#: a question word or an auxiliary, in English or the languages readers most often write.
_OPENER = re.compile(
    r"(?:\u00bf\s*)?(?:how|what|where|why|which|when|who|whom|whose|is|are|am|was|were|do|does|did|can|could"
    r"|will|would|shall|should|may|might|must|has|have|had|any|c\u00f3mo|qu\u00e9|d\u00f3nde|cu\u00e1l|cu\u00e1ndo"
    r"|comment|quel|quelle|quels|quelles|o\u00f9|pourquoi|est-ce|wie|wo|welche|welcher|welches|warum|kann|muss)\b",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(r"[,;:]\s+|\s[\u2014\u2013-]\s*")
#: A clause opening with one of these qualifies the question after it ("If I open the
#: events of a finished run, what do I get?", "In npm outdated's output, what does …",
#: "On my Mac, how do I …"): part of what is asked, unlike a statement or a greeting.
_QUALIFYING = frozenset(
    "if when whenever after before while once since until unless because although though as in on at "
    "for from with without during under over inside within by via through between among given besides "
    "unlike like instead except per compared".split()
)
#: What is asked must hold this many content words; a question saying fewer refers back
#: to what comes before it ("I want Slack notifications for finished runs. Is that
#: possible?", "my stream ended without message_complete, what happened?"), which is
#: then asked too.
_OWN_ASK_WORDS = 2
#: Words of a tag question asking for help with what comes before it ("I need to rotate
#: the JWT key in Okta. Any tips?", "Any ideas?", "Thoughts?"): no content word of what
#: is asked ("Any tips?" stood alone, and its answer was chosen for "any" and "tips").
_TAG_WORDS = stems("any tips ideas advice suggestions thoughts pointers help recommend recommendations")


def _question_start(text: str, begin: int, end: int, before: int | None) -> int:
    """Where the question of the sentence ``text[begin:end]`` starts: after a clause
    setting it (a statement or a greeting before a comma, semicolon, colon or dash and a
    question word, ``_OPENER``: "I'm on Ubuntu, how do I …", "Hey, quick q: which …"),
    unless the sentence opens with a question word or the clause with a qualifying one
    (``_QUALIFYING``); then back to the sentence's start, and to the sentence before it
    (starting at ``before``), while what is asked says too little (``_OWN_ASK_WORDS``, a
    tag question's ``_TAG_WORDS`` not counted)."""
    sentence = text[begin:end]
    lead = len(sentence) - len(sentence.lstrip())
    starts = [begin]
    first = re.match(r"[^\W\d_]+", sentence[lead:])
    if _OPENER.match(sentence, lead) is None and (first is None or first.group(0).casefold() not in _QUALIFYING):
        opened = [b.end() for b in _CLAUSE_BREAK.finditer(sentence) if _OPENER.match(sentence, b.end())]
        if opened:
            starts.insert(0, begin + opened[-1])
    if before is not None:
        starts.append(before)
    return next((at for at in starts if len(stems(text[at:end]) - _TAG_WORDS) >= _OWN_ASK_WORDS), starts[-1])


#: What opens a sentence that greets, signs off or says the writer's own setting rather
#: than asking ("Hello from Berlin!", "Thanks, Maria", "I'm on Ubuntu.", "We use
#: Jenkins."): in a message with no question mark, the sentences opening otherwise (an
#: imperative, "tell me how to run the tests") are what it asks.
_STATEMENT_OPENER = re.compile(
    r"[\s\"'\u201c(\u00bf\u00a1]*(?:hi|hello|hey|hiya|howdy|greetings|dear|thanks|thank|thx|cheers|regards"
    r"|best(?=\s*,)|best\s+(?:regards|wishes)|good\s+(?:morning|afternoon|evening|day)|sorry|hallo|hola|bonjour|salut|ciao"
    r"|i|i['\u2019](?:m|ve|d|ll)|im|we|we['\u2019](?:re|ve|d|ll)|my|our)\b",
    re.IGNORECASE,
)


def asking_spans(text: str) -> list[tuple[int, int]]:
    """The spans of ``text`` that ask: its question sentences (those ending with "?"),
    each from where its question starts (``_question_start``); in a message with no
    question sentence, those not greeting or saying the writer's setting
    (``_STATEMENT_OPENER``: "Hello from Berlin! Explain how to cancel a run.", "Hi, I'm
    on Ubuntu. tell me how to run the tests" were declined for Berlin and Ubuntu), and
    all of it when every sentence does ("I need to rotate the JWT key"); an imperative
    ("Explain Kubernetes pods. Keep it short.") is asked whole. Greetings, sign-offs, a
    sentence of context ("We use Jenkins.", "Cheers, Maria") are outside every span
    (``_outside_ask``). Public: a message too long for the search tools is searched for
    by these spans (``llm.extractive_long.search_text``)."""
    sentences: list[tuple[int, int, bool]] = []
    start = 0
    for m in _SENTENCE_BREAK.finditer(text):
        sentences.append((start, m.end(), "?" in m.group(0)))
        start = m.end()
    if text[start:].strip():
        sentences.append((start, len(text), False))
    if not any(question for _, _, question in sentences):
        sentences = [(begin, end, _STATEMENT_OPENER.match(text, begin) is None) for begin, end, _ in sentences]
        if not any(asking for _, _, asking in sentences):
            return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    for at, (begin, end, question) in enumerate(sentences):
        if question:
            begin = _question_start(text, begin, end, sentences[at - 1][0] if at else None)
            if spans and begin <= spans[-1][1]:  # "How do I …? Is that possible?": one span
                begin = spans.pop()[0]
            spans.append((begin, end))
    return spans


def ask_of(question: str, unsaid: Iterable[str] = ()) -> str:
    """``question`` without the greetings, context and sign-off outside its ask (``asking_spans``)
    that write a name in ``unsaid``, what no passage found says (``unmentioned``): "Hello
    from Berlin! How do I cancel a run?" asks "How do I cancel a run?". The answer is
    chosen for it, so a name of the reader's own stack (a team's Slack, a laptop's
    Ubuntu), said by no passage, does not dilute how well a passage answers. Context
    naming only what the passages say stays: it holds the documents' words, often the
    very subject ("The `Idempotency-Key` header confuses me. How long does the server
    remember it?", "Using PostgreSQL with pgvector. How do I move my SQLite data over?"
    lost the key and PostgreSQL, and were answered with MCP settings and without the
    migration, when every context writing a name was dropped); so does context without a
    name ("I run three replicas. How many database connections does each one keep?")."""
    missing = frozenset(unsaid)
    if not missing:
        return question
    text = unicodedata.normalize("NFKC", question)
    spans = asking_spans(text)
    kept: list[str] = []
    dropped = False
    at = 0
    for begin, end in [*spans, (len(text), len(text))]:
        context = text[at:begin]
        if context.strip() and not missing.isdisjoint(names(context)):
            dropped = True
        elif context.strip():
            kept.append(context.strip())
        if end > begin:
            kept.append(text[begin:end].strip())
        at = end
    return " ".join(kept) if dropped else question


def _outside_ask(text: str, spans: list[tuple[int, int]], name: str) -> bool:
    """``name`` is written only outside the message's ask (``spans``, ``asking_spans``) or in
    brackets in it: context, a greeting or a sign-off, not what is asked."""
    at = text.find(name)
    while at >= 0:
        inside = any(begin <= at < end for begin, end in spans)
        if inside and text.count("(", 0, at) <= text.count(")", 0, at):
            return False
        at = text.find(name, at + 1)
    return True


def declined(question: str, missing: Iterable[str], answered: bool) -> tuple[str, ...]:
    """Of the names no passage mentions (``unmentioned``), those the answer declines for,
    to be named in it; none when it answers. Only a name in the question's ask counts
    (``asking_spans``: "Hello from Berlin! How do I cancel a run?", "My team uses Slack; how do I
    add an MCP server?" and "Which embedder works offline? Cheers, Maria" are answered:
    the name says nothing of what is asked). Such a name declines the question when it is
    what the question is about (``asked_about``), or when no unit answers the rest of it
    well (``answered`` false: "Can I deploy the service on AWS Lambda?")."""
    text = unicodedata.normalize("NFKC", question)
    spans = asking_spans(text)  # once: a message of AGENT_MAX_MESSAGE_CHARS may name a thousand things
    asked = tuple(n for n in missing if not _outside_ask(text, spans, n))
    if not asked or (answered and not set(asked) & set(asked_about(question))):
        return ()
    return asked


def unmentioned(question: str, said: Iterable[frozenset[str]], words: Words) -> tuple[str, ...]:
    """The question's names (``names``) of which no passage says a word: ``said`` is what
    each passage says, its title and section included, as stems. A name with no content
    word ("what is it?") is never unmentioned; nor is anything when no passage was found
    (the answer then says that nothing was found at all)."""
    passages = list(said)
    if not passages:
        return ()
    everything = frozenset().union(*passages)
    text = unicodedata.normalize("NFKC", question)
    subject = _defined_subject(text) if _DEFINED_THING.match(text) else ""
    out: list[str] = []
    for name in names(question):
        stems = words.stems(name)
        # A code span, path, identifier or option is one name: a passage that says only
        # some of its words ("DNS" for `--verbose-dns`) does not mention it. A name in
        # capitals is mentioned by any of its words ("Helm" of "Helm chart"). A definition's
        # subject is not mentioned when a word qualifying its head is unsaid ("What is the
        # zebra launch code?" was answered with the error codes: ``_qualifiers``).
        unsaid = [words.match(s, everything) < 1.0 for s in stems]
        qualified = name == subject and any(
            words.match(s, everything) < 1.0 for q in _qualifiers(name) for s in words.stems(q)
        )
        if stems and (any(unsaid) if _CODE.fullmatch(name) else all(unsaid) or qualified):
            out.append(name)
    # "What is a Helm chart?" names "Helm" and asks about "Helm chart": say "Helm" once.
    return tuple(n for n in out if not any(o != n and o.strip("`") in n for o in out))


__all__ = [
    "ask_of",
    "asked_about",
    "asking_spans",
    "declined",
    "names",
    "proper_names_asked",
    "unmentioned",
]
