"""The outbound pools' TLS context, whose CA bundle is read at its first TLS connection.

Why: reading the bundle (certifi's, as httpx's default context does) costs ~45 ms of CPU,
and every ``agentchat serve`` - each restart, each ``--workers`` child, each of the
hundreds the test suite starts - read it at start, though many never open an https
connection (a local Ollama, the offline answerer, a reference backend on http). The
context is httpx's default in every other respect (``httpx.create_ssl_context()``:
certificates required, host names checked, the bundle of ``SSL_CERT_FILE``,
``SSL_CERT_DIR`` or certifi, ``SSLKEYLOGFILE`` honoured); the bundle is loaded before
the first handshake (``wrap_bio`` / ``wrap_socket``, which every TLS connection of
asyncio, anyio and httpcore goes through) or the first look at the trust store.

A bundle file or directory that does not exist still fails where it did, when the
context is built (at start); only reading it waits.
"""

from __future__ import annotations

import errno
import os
import ssl
import sys
import threading
from typing import Any


class DeferredTrustContext(ssl.SSLContext):
    """A client context that loads its CA locations (``cafile`` / ``capath``) once, just
    before it is first used; built by :func:`deferred_tls_context`."""

    _cafile: str | None = None
    _capath: str | None = None
    _loaded: bool = False
    _lock: threading.Lock

    @property
    def trust_loaded(self) -> bool:
        """Whether the CA bundle has been read (by a handshake or a look at the store)."""
        return self._loaded

    def _load_trust(self) -> None:
        if self._loaded:
            return
        with self._lock:  # a handshake on another thread (a sync client) waits for the one load
            if not self._loaded:
                self.load_verify_locations(cafile=self._cafile, capath=self._capath)
                self._loaded = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load_trust()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load_trust()
        return super().wrap_bio(*args, **kwargs)

    def cert_store_stats(self) -> dict[str, int]:
        self._load_trust()
        return super().cert_store_stats()

    def get_ca_certs(self, binary_form: bool = False) -> Any:
        self._load_trust()
        return super().get_ca_certs(binary_form)


def deferred_tls_context(*, trust_env: bool = True) -> DeferredTrustContext:
    """``httpx.create_ssl_context()`` (``verify=True``) with the bundle read at first use."""
    if trust_env and os.environ.get("SSL_CERT_FILE"):
        cafile, capath = os.environ["SSL_CERT_FILE"], None
    elif trust_env and os.environ.get("SSL_CERT_DIR"):
        cafile, capath = None, os.environ["SSL_CERT_DIR"]
    else:
        import certifi

        cafile, capath = certifi.where(), None
    where = cafile or capath
    assert where is not None
    if not os.path.exists(where):  # as load_verify_locations says it, when the context is built
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), where)
    context = DeferredTrustContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    context._cafile, context._capath, context._lock = cafile, capath, threading.Lock()
    if sys.version_info >= (3, 13):  # the stricter chain checks create_default_context adds there
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
    keylog = os.environ.get("SSLKEYLOGFILE")  # as ssl.create_default_context does
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    return context
