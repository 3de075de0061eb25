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

Where it is read: never on the event loop. Reading it there (~45 ms) stalled every live
stream once, at the first handshake. The pools await :meth:`DeferredTrustContext.load_trust`
before an https request (``llm.pool``), which reads it in a worker thread, once, however
many requests wait for it; the app starts that read itself once ``/readyz`` first answers
ready (``app.server.services``), so the first handshake usually finds it done, and a start
still pays nothing for it. The synchronous path (``wrap_socket`` / ``wrap_bio`` / a look at
the store, as a sync client in a thread uses it) reads it there, under a lock, as before.

A bundle file or directory that does not exist still fails where it did, when the
context is built (at start); only reading it waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
    #: The worker thread's read (``load_trust``), once started; guarded by ``_start_lock``.
    _reading: concurrent.futures.Future[None] | None = None
    _start_lock: threading.Lock

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

    async def load_trust(self) -> None:
        """Read the CA bundle in a worker thread, once: every caller, on any loop, awaits
        the one read (a failed read is tried again by the next caller). The loop only
        waits; it never reads the bundle itself."""
        if self._loaded:
            return
        with self._start_lock:  # held only to start the read, never during it
            reading = self._reading
            if reading is None or (reading.done() and reading.exception() is not None):
                reading = self._reading = concurrent.futures.Future()
                reading.set_running_or_notify_cancel()  # a waiter's cancellation cannot cancel the one read
                asyncio.get_running_loop().run_in_executor(None, self._read_into, reading)
        await asyncio.wrap_future(reading)

    def _read_into(self, reading: concurrent.futures.Future[None]) -> None:
        try:
            self._load_trust()
        except BaseException as exc:  # handed to every waiter, raised there
            reading.set_exception(exc)
        else:
            reading.set_result(None)

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
    context._start_lock = threading.Lock()
    if sys.version_info >= (3, 13):  # the stricter chain checks create_default_context adds there
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
    keylog = os.environ.get("SSLKEYLOGFILE")  # as ssl.create_default_context does
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    return context
