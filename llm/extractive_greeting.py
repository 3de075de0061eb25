"""A message that only greets or thanks, told apart from a question, and the offline
provider's reply to it.

A newcomer's first message is often "hi", "Hallo" or "good morning", and the last one
"thanks": searched as a question, each found nothing and was answered "I could not find an
answer to that in the knowledge base" - unfriendly, and untrue in spirit, since nothing was
asked. Such a message is answered with what the provider can do instead, and so is a
question to the assistant itself ("What can you do?", "Who are you?"), which the
knowledge base does not answer either. A greeting *with*
a question ("Hi, how do I cancel a run?") is not one: every word of the message must be a
greeting's, a thanks' or their filler ("there", "everyone", "so much") for it to count.

A thanks that is not a plain one - "thanks :(", "thanks, but that didn't help", "thanks
anyway" - says an answer missed: "You're welcome!" to it reads as mockery, and searched
as a question it found an unrelated passage. It gets ``NOT_HELPED_REPLY`` (how to ask so
the knowledge base can answer), citing nothing. "No, thank you" may say that too, or turn
down "Ask me anything else" (the reply to a thanks): ``NO_THANKS_REPLY`` fits both.

Which greeting depends on the configuration, which the app factory tells the provider
(``sample_kb``, from ``AGENT_INGEST_SAMPLE_KB``): with the sample knowledge base ingested
(``make run``'s default) it suggests a question that knowledge base answers - a browser
newcomer's first answer is then something to try, not CLI commands; without it a sample
question would be answered "I could not find an answer", so it says what is true of every
configuration - how to see what the knowledge base holds and how to add to it.
"""

from __future__ import annotations

import re

#: Word sequences that greet or thank, as newcomers write them (English first, then the
#: greetings of the languages the sample questions come in), longest first so that "good
#: morning" is taken whole; and what is written around them ("hey there", "thanks a lot").
_GREETINGS = (
    "good morning",
    "good afternoon",
    "good evening",
    "good day",
    "guten morgen",
    "guten tag",
    "guten abend",
    "buenos dias",
    "buenos días",
    "buenas tardes",
    "hello",
    "hallo",
    "hi",
    "hey",
    "heya",
    "hiya",
    "howdy",
    "greetings",
    "yo",
    "moin",
    "servus",
    "hola",
    "bonjour",
    "salut",
    "ciao",
    "how are you",
    "how are you doing",
    "how's it going",
    # What a newcomer asks the assistant itself, which is what the greeting tells: searched
    # as a question, "What can you do?" was answered "I could not find an answer to that".
    "what can you do",
    "what do you do",
    "what can you help with",
    "what can you help me with",
    "how can you help",
    "how can you help me",
    "what can i ask",
    "what can i ask you",
    "what should i ask",
    "who are you",
    "what are you",
)
_THANKS = (
    "thank you",
    "thanks",
    "thx",
    "ty",
    "cheers",
    "many thanks",
    "danke",
    "danke schön",
    "danke schoen",
    "vielen dank",
    "merci",
    "gracias",
)
_FILLER = (
    "there",
    "all",
    "everyone",
    "everybody",
    "folks",
    "guys",
    "team",
    "again",
    "so much",
    "very much",
    "a lot",
    "a bunch",
    "ok",
    "okay",
    "oh",
    "great",
    "and",
    "bot",
    "agent",
    "assistant",
    # what closes a thanks in a follow-up ("thanks for the help earlier", "thanks, that helped")
    "for the help",
    "for your help",
    "for helping",
    "earlier",
    "that helped",
    "that helps",
    "this helped",
    "that works",
    "that worked",
    "got it",
    "perfect",
    "much appreciated",
    "appreciated",
)

#: What says an answer missed, beside a thanks or a greeting ("thanks :(", "thanks, but
#: that didn't help", "thanks anyway"); matched after the filler is taken out.
_MISSED = (
    "no",
    "nope",
    "not",
    "but",
    "anyway",
    "anyways",
    "for nothing",
    "unhelpful",
    "useless",
    *(
        f"{subject}{state}"
        for subject in ("", "that is ", "that's ", "this is ", "it is ", "it's ", "that was ", "this was ")
        for state in (
            "wrong",
            "not it",
            "not right",
            "not helpful",
            "not very helpful",
            "not really",
            "not quite",
            "not what i asked",
            "not what i meant",
            "not what i needed",
        )
    ),
    *(
        f"{subject}{verb} {what}"
        for subject in ("", "that ", "this ", "it ", "the answer ", "your answer ")
        for verb in ("did not", "didn't", "didnt", "does not", "doesn't", "doesnt")
        for what in ("help", "work", "really help", "help much", "help at all", "answer it", "answer my question")
    ),
)
#: A smile written with letters (":D", ":P"): filler, as the punctuation of ":)" is.
_GRIN = re.compile(r"(?<!\w):-?[DPp]\b")
#: Emoticons and emoji that say an answer missed ("thanks :(").
_SAD = re.compile(
    r"(?<![\w/]):['-]?[(/\\|\[]|(?<![\w/])\):|(?<!\w)D:"
    "|[\u2639\U0001F612\U0001F614\U0001F615\U0001F61E\U0001F61F\U0001F620\U0001F621\U0001F622"
    "\U0001F629\U0001F62B\U0001F62D\U0001F641\U0001F644\U0001F44E]"
)


def _alternation(phrases: tuple[str, ...]) -> str:
    ordered = sorted(phrases, key=len, reverse=True)
    return "|".join(r"\s+".join(re.escape(word) for word in p.split()) for p in ordered)


_GREETING = re.compile(rf"\b(?:{_alternation(_GREETINGS)})\b", re.IGNORECASE)
_THANK = re.compile(rf"\b(?:{_alternation(_THANKS)})\b", re.IGNORECASE)
_FILL = re.compile(rf"\b(?:{_alternation(_FILLER)})\b", re.IGNORECASE)
_MISS = re.compile(rf"\b(?:{_alternation(_MISSED)})(?![\w'])", re.IGNORECASE)
#: What is left of a message that only greets once its words are taken out: punctuation,
#: emoji and other symbols, spaces.
_LEFTOVER = re.compile(r"[\W_]*")
#: A thanks that declines an offer ("no thanks", "no, thank you", "nope, thanks"): nothing
#: but a "no" before a thanks. It may answer "Ask me anything else…" as well as say the
#: last answer missed, so it gets ``NO_THANKS_REPLY``, true either way.
_NO_THANKS = re.compile(rf"^\W*(?:no|nope|nah)\W+(?:{_alternation(_THANKS)})\W*$", re.IGNORECASE)
#: A greeting is a short message: a longer one asks something even in greeting words.
_MAX_CHARS = 80

GREETING_REPLY = (
    "Hello! I answer questions from the knowledge base. This service is running without a "
    "language model (the offline mode), so my answers quote the passages of the knowledge "
    "base that answer a question, with their sources. Ask me about anything its documents "
    "cover: `agentchat docs list` lists them, and `agentchat ingest <folder>` (or "
    "`POST /v1/kb/documents`) adds your own."
)
#: The greeting when the sample knowledge base is ingested: its question is one that
#: knowledge base answers (tests/test_extractive_greeting.py asks it of the service).
SAMPLE_KB_GREETING_REPLY = (
    "Hello! I answer questions from the knowledge base. This service is running without a "
    "language model (the offline mode), so my answers quote the passages of the knowledge "
    "base that answer a question, with their sources. Ask me about what it covers - the "
    "sample knowledge base describes this service, so you could ask, for example, \"How do I "
    "resume a stream after a disconnect?\""
)
THANKS_REPLY = (
    "You're welcome! Ask me anything else the knowledge base covers: I answer by quoting "
    "its passages, with their sources."
)
NO_THANKS_REPLY = (
    "All right. If another question comes up, ask it here: I answer from the knowledge base, "
    "quoting its passages with their sources. If my last answer missed, asking again in other "
    "words - the setting, error message or term you are after - often finds it."
)
NOT_HELPED_REPLY = (
    "Sorry that did not help. I can only quote what the knowledge base says, so try asking "
    "again in other words - name the setting, error message or term you are after - or ask "
    "about one part of it at a time. If the knowledge base does not cover it, I cannot answer it."
)


def greeting_reply(message: str, *, sample_kb: bool = False) -> str | None:
    """The reply to ``message`` when it only greets or thanks: ``NOT_HELPED_REPLY`` when
    it also says an answer missed ("thanks :(", "thanks anyway"), ``NO_THANKS_REPLY`` when it
    declines ("no, thank you": an offer turned down or an answer that missed), else ``THANKS_REPLY`` when
    it thanks, else the greeting - ``SAMPLE_KB_GREETING_REPLY`` when the sample knowledge
    base is ingested (``sample_kb``), ``GREETING_REPLY`` otherwise; None when it asks
    something, to be searched."""
    text = message.strip().replace("\u2019", "'")
    if not text or len(text) > _MAX_CHARS:
        return None
    if _NO_THANKS.match(text) is not None:
        return NO_THANKS_REPLY
    thanked = _THANK.search(text) is not None
    greeted = _GREETING.search(text) is not None
    if not (thanked or greeted):
        return None
    rest = _GRIN.sub(" ", _FILL.sub(" ", _THANK.sub(" ", _GREETING.sub(" ", text))))
    if _LEFTOVER.fullmatch(_SAD.sub(" ", _MISS.sub(" ", rest))) is None:
        return None
    # A sad face after a thanks says the answer missed; after a greeting, only a bad mood.
    if _MISS.search(rest) is not None or (thanked and _SAD.search(rest) is not None):
        return NOT_HELPED_REPLY
    if thanked:
        return THANKS_REPLY
    return SAMPLE_KB_GREETING_REPLY if sample_kb else GREETING_REPLY


__all__ = [
    "GREETING_REPLY",
    "NOT_HELPED_REPLY",
    "NO_THANKS_REPLY",
    "SAMPLE_KB_GREETING_REPLY",
    "THANKS_REPLY",
    "greeting_reply",
]
