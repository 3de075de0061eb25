"""Date formats in a table configuration: date-fns tokens (``yyyy-MM-dd``), and a Go
time layout (``2006-01-02``) recognised and refused with the fix.

Its own module because it is a small grammar of its own, used by the column format
rules and tested apart.
"""

from __future__ import annotations

_GO_LAYOUT_FRAGMENTS = (
    "2006", "01-", "-01-", "-01", "/01/", "01/", "/01", "-02", "02-", "-02-",
    "/02/", "02/", "/02", " 15:", "T15:", ":04:", ":04", ":05",
)  # fmt: skip
_DATE_TOKENS = sorted(
    ("yyyy", "yy", "MMMM", "MMM", "MM", "M", "dd", "d", "do", "EEEE", "EEE", "E", "HH", "H", "hh", "h",
     "mm", "m", "ss", "s", "a", "aaa", "z", "zzz"),
    key=len,
    reverse=True,
)  # fmt: skip
_DATE_SEPARATORS = frozenset("-/. :,T")


def date_format_problem(fmt: str) -> str | None:
    """Why ``fmt`` is not a date-fns format string, or None when it is one."""
    for fragment in _GO_LAYOUT_FRAGMENTS:
        if fragment in fmt:
            return f"{fmt!r} looks like a Go time layout ({fragment!r}); use date-fns tokens such as yyyy-MM-dd"
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "'":
            end = fmt.find("'", i + 1)
            if end < 0:
                return f"{fmt!r} has an unterminated quoted section"
            i = end + 1
            continue
        if ch in _DATE_SEPARATORS:
            i += 1
            continue
        token = next((t for t in _DATE_TOKENS if fmt.startswith(t, i)), None)
        if token is None:
            return f"{fmt!r} contains {ch!r} at position {i}, which is not a date-fns token or separator"
        i += len(token)
    return None
