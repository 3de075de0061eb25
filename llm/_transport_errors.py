"""Classify transport failures of the HTTP client libraries into ``StreamError`` codes.

Both ``httpx`` and its fork ``httpx2`` (google-genai's default backend) are recognised
by class name within their own module, so neither needs to be installed for the other
to work.
"""

from __future__ import annotations

from llm.types import StreamError

_TRANSPORT_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2")


def _lineage(exc: BaseException) -> list[tuple[str, str]]:
    return [((cls.__module__ or "").split(".")[0], cls.__name__) for cls in type(exc).__mro__]


def transport_error(exc: BaseException, service: str, where: str) -> StreamError | None:
    """A ``StreamError`` for an httpx/httpx2 transport exception, or ``None`` if it is not one.

    Refused or unresolvable connections are ``provider_unreachable``; any timeout is
    ``provider_timeout``; a connection lost mid-response is ``provider_error``.
    """
    names = {name for module, name in _lineage(exc) if module in _TRANSPORT_MODULES}
    if not names:
        return None
    detail = str(exc) or type(exc).__name__
    if "TimeoutException" in names:
        return StreamError(message=f"{service} timed out ({where}): {detail}", code="provider_timeout")
    if "ConnectError" in names:
        return StreamError(message=f"cannot reach {service} at {where}: {detail}", code="provider_unreachable")
    return StreamError(message=f"{service} connection failed ({where}): {detail}", code="provider_error")
