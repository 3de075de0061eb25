"""A message that only greets or thanks, told apart from a question, and the offline
provider's reply to it.

A newcomer's first message is often "hi", "Hallo" or "good morning", and the last one
"thanks": searched as a question, each found nothing and was answered "I could not find an
answer to that in the knowledge base" - unfriendly, and untrue in spirit, since nothing was
asked. Such a message is answered with what the provider can do instead. A greeting *with*
a question ("Hi, how do I cancel a run?") is not one: every word of the message must be a
greeting's, a thanks' or their filler ("there", "everyone", "so much") for it to count.
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


def _alternation(phrases: tuple[str, ...]) -> str:
    ordered = sorted(phrases, key=len, reverse=True)
    return "|".join(r"\s+".join(re.escape(word) for word in p.split()) for p in ordered)


_GREETING = re.compile(rf"\b(?:{_alternation(_GREETINGS)})\b", re.IGNORECASE)
_THANK = re.compile(rf"\b(?:{_alternation(_THANKS)})\b", re.IGNORECASE)
_FILL = re.compile(rf"\b(?:{_alternation(_FILLER)})\b", re.IGNORECASE)
#: What is left of a message that only greets once its words are taken out: punctuation,
#: emoji and other symbols, spaces.
_LEFTOVER = re.compile(r"[\W_]*")
#: A greeting is a short message: a longer one asks something even in greeting words.
_MAX_CHARS = 80

GREETING_REPLY = (
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


def greeting_reply(message: str) -> str | None:
    """The reply to ``message`` when it only greets or thanks (``THANKS_REPLY`` when it
    thanks, else ``GREETING_REPLY``), else None: it asks something, to be searched."""
    text = message.strip()
    if not text or len(text) > _MAX_CHARS:
        return None
    thanked = _THANK.search(text) is not None
    greeted = _GREETING.search(text) is not None
    if not (thanked or greeted):
        return None
    rest = _FILL.sub(" ", _THANK.sub(" ", _GREETING.sub(" ", text)))
    if _LEFTOVER.fullmatch(rest) is None:
        return None
    return THANKS_REPLY if thanked else GREETING_REPLY


__all__ = ["GREETING_REPLY", "THANKS_REPLY", "greeting_reply"]
