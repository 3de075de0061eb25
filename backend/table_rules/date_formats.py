"""Date formats in a table configuration: the one check of a column's date-fns format.

Part of the table rules (``backend.table_rules``) that the backend's write and the
agent's own check before it calls the backend both run, so a format is accepted or
refused the same by both, with the same message.

What it accepts is what date-fns' ``format`` accepts: tokens are runs of one letter among
its formatters (``yyyy``, ``MM``, ``do``, ``EEE``, ``P`` …), text in single quotes is
printed as written, ``''`` is a quote character, and every other character (digits,
punctuation, non-Latin letters) is printed as it is. date-fns throws on any other Latin
letter and on ``YY``/``YYYY``/``D``/``DD`` (week-numbering year, day of the year). On
top of that it refuses what date-fns would print without complaint but is a mistake in
a column's format: a Go time layout (``2006-01-02``: digits that print as themselves), a
strftime pattern (``%Y-%m-%d``), an unquoted ``T`` or ``t`` (ISO's separator, or "at" —
date-fns reads them as the Unix timestamp), a quote that is never closed (date-fns would
quote the rest of the string) and a format with no token at all (every date the same).
Quoted text is never searched for mistakes: it is printed as written, deliberately.

Checked against date-fns 4.4 on 25k random formats: nothing accepted here makes it throw,
and everything refused here as "not a date-fns token" makes it throw — except a long
format followed by ``o`` (``PPo``), which in English ends in ``y`` and makes ``yo``.
"""

from __future__ import annotations

import re
import string

__all__ = ["date_format_problem"]

# date-fns' formatters (``_lib/format/formatters``) and long formatters (``P``, ``p``).
_TOKEN_LETTERS = frozenset("GyYRuQqMLwIdDEeciabBhHKkmsSXxOzPp")
_ORDINAL_LETTERS = frozenset("yYQqMLwIdDecihHKkms")  # ``do``, ``Mo``, …
_TIMESTAMP_LETTERS = frozenset("tT")
# The tokens date-fns throws on unless an option asks for them, and what was meant.
_REFUSED_BY_DATE_FNS = {
    "YY": ("the week-numbering year", "yy"),
    "YYYY": ("the week-numbering year", "yyyy"),
    "D": ("the day of the year", "d"),
    "DD": ("the day of the year", "dd"),
}
# Substrings of Go's reference time (Mon Jan 2 15:04:05 MST 2006) that a date-fns format
# never holds outside quotes: the Ichor original's list, with the dotted day and month
# (``02.01.06``) it missed.
_GO_LAYOUT_MARKERS = (
    "2006", "01-", "-01-", "-01", "/01/", "01/", "/01", "-02", "02-", "-02-", "/02/", "02/", "/02",
    "01.", ".01", "02.", ".02", " 15:", "T15:", ":04:", ":04", ":05",
)  # fmt: skip
# Go's elements and the date-fns tokens that print the same, longest first.
_GO_TO_DATE_FNS = (
    ("January", "MMMM"), ("Monday", "EEEE"), ("Z07:00", "XXX"), ("-07:00", "xxx"), ("Z0700", "XX"),
    ("-0700", "xx"), ("2006", "yyyy"), (".000", ".SSS"), ("Jan", "MMM"), ("Mon", "EEE"), ("MST", "zzz"),
    ("PM", "a"), ("pm", "aaa"), ("_2", "d"), ("01", "MM"), ("02", "dd"), ("03", "hh"), ("04", "mm"),
    ("05", "ss"), ("06", "yy"), ("15", "HH"),
)  # fmt: skip
_STRFTIME = re.compile(r"%[A-Za-z]")
_QUOTED_OUT = "\0"  # stands for quoted text in the skeleton: never part of a token or marker
_EXAMPLE = "yyyy-MM-dd HH:mm"


def date_format_problem(fmt: str) -> str | None:
    """What is wrong with ``fmt`` as a date-fns format, and how to fix it; None when it is one."""
    skeleton = _unquoted_skeleton(fmt)
    if isinstance(skeleton, int):
        return (
            f"{fmt!r}: the quote at position {skeleton} is never closed; end the literal text with a "
            f"second ' (as in yyyy-MM-dd'T'HH:mm), or write '' for a quote character"
        )
    if marker := next((m for m in _GO_LAYOUT_MARKERS if m in skeleton), None):
        return f"{fmt!r} looks like a Go time layout ({marker!r}); use date-fns tokens {_go_hint(fmt)}"
    if strftime := _STRFTIME.search(skeleton):
        return (
            f"{fmt!r} looks like a strftime pattern ({strftime.group()!r}); use date-fns tokens such as "
            f"yyyy-MM-dd HH:mm (%Y-%m-%d %H:%M)"
        )
    return _token_problem(fmt, skeleton)


def _unquoted_skeleton(fmt: str) -> str | int:
    """``fmt`` with its quoted text and ``''`` pairs blanked out (same length, so positions
    still point into ``fmt``), or the position of a quote that is never closed. Quotes are
    read as date-fns reads them: ``''`` is a quote character inside or outside quotes."""
    out: list[str] = []
    i = 0
    while i < len(fmt):
        if fmt.startswith("''", i):
            out.append(_QUOTED_OUT * 2)
            i += 2
        elif fmt[i] == "'":
            end = i + 1
            while True:
                end = fmt.find("'", end)
                if end < 0:
                    return i
                if not fmt.startswith("''", end):
                    break
                end += 2
            out.append(_QUOTED_OUT * (end + 1 - i))
            i = end + 1
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def _token_problem(fmt: str, skeleton: str) -> str | None:
    """The first token date-fns refuses (or that prints a timestamp), or a format without
    any token; None when every letter is a token."""
    tokens = 0
    i = 0
    while i < len(skeleton):
        ch = skeleton[i]
        if ch not in string.ascii_letters:
            i += 1  # printed as it is (date-fns leaves non-Latin letters alone too)
            continue
        if ch in _ORDINAL_LETTERS and skeleton.startswith("o", i + 1):
            tokens += 1
            i += 2
            continue
        end = i + 1
        while end < len(skeleton) and skeleton[end] == ch:
            end += 1
        run = skeleton[i:end]
        if ch in _TIMESTAMP_LETTERS:
            return (
                f"{fmt!r}: the unquoted {ch!r} at position {i} is date-fns' Unix timestamp, not a letter; "
                f"put literal text in single quotes, as in yyyy-MM-dd'T'HH:mm or dd.MM.yyyy 'at' HH:mm"
            )
        if ch not in _TOKEN_LETTERS:
            return (
                f"{fmt!r}: {ch!r} at position {i} is not a date-fns token; put literal text in single quotes "
                f"('at'), and use tokens such as yyyy, MM, dd, EEE, HH, mm, ss, a"
            )
        if run in _REFUSED_BY_DATE_FNS:
            meaning, meant = _REFUSED_BY_DATE_FNS[run]
            return f"{fmt!r}: {run} is {meaning} in date-fns, which refuses it; use {meant}"
        tokens += 1
        i = end
    if not tokens:
        return f"{fmt!r} has no date-fns token, so every date would show the same text; use tokens such as {_EXAMPLE}"
    return None


def _go_hint(fmt: str) -> str:
    """The date-fns format that prints what the Go layout ``fmt`` meant, when every digit
    in it is one of Go's elements and the translation is a valid format; else an example."""
    out: list[str] = []
    letters: list[str] = []  # literal letters, quoted together when the run ends
    i = 0
    while i < len(fmt):
        match = next(((go, fns) for go, fns in _GO_TO_DATE_FNS if fmt.startswith(go, i)), None)
        if match is None and (fmt[i] in string.ascii_letters or fmt[i] == "'"):
            letters.append("''" if fmt[i] == "'" else fmt[i])
            i += 1
            continue
        if letters:
            out.append("'" + "".join(letters) + "'")
            letters.clear()
        if match is not None:
            out.append(match[1])
            i += len(match[0])
        else:
            out.append(fmt[i])
            i += 1
    if letters:
        out.append("'" + "".join(letters) + "'")
    translated = "".join(out)
    if not any(c.isdigit() for c in translated) and date_format_problem(translated) is None:
        return f"instead: {translated}"
    return f"such as {_EXAMPLE} (yyyy for 2006, MM for 01, dd for 02, HH for 15, mm for 04, ss for 05)"
