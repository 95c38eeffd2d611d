"""A server's certificate kept fresh inside its running TLS contexts, no restart needed.

``issue`` (blocking, run in a thread: it does its caller's I/O, such as rotating the CA
and publishing its bundle) returns a new certificate and, for a side that checks its
peers' certificates, the bundle of CAs to trust. The certificate is loaded into every
context of ``contexts`` (new connections get it, open ones keep theirs) and the bundle
added to every context of ``trusting``. That happens again at half the certificate's
lifetime; a failed renewal is logged and tried again soon, and so is one that brings the
certificate already loaded (a side that reads what another issues, before that one has
renewed it).

A context's trust only grows: OpenSSL cannot take a CA out of a live context. That is
fine for the bundles of :mod:`pki.rotation`, which drop a CA only once it has expired,
and an expired CA verifies nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from pki import certs

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Issued:
    pair: certs.KeyPair
    """The new certificate and its key."""
    bundle: bytes = b""
    """PEM of the CAs whose certificates the ``trusting`` contexts accept ("": no change)."""


class Serving:
    def __init__(self, issue: Callable[[], Issued], *, lifetime: dt.timedelta,
                 contexts: Sequence[ssl.SSLContext],
                 trusting: Sequence[ssl.SSLContext] = ()) -> None:
        self.issue = issue
        self.lifetime = lifetime
        self.contexts = tuple(contexts)
        self.trusting = tuple(trusting)
        self.renew_at = 0.0
        self.loaded = b""
        """PEM of the certificate in the contexts."""

    def load(self, issued: Issued) -> None:
        """Into the contexts now (ssl reads a certificate chain from files only: they
        live in a private temporary directory for the moment it takes)."""
        pair = issued.pair
        with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
            files = certs.write_pair(tmp, pair.cert_pem, pair.key_pem)
            for ctx in self.contexts:
                ctx.load_cert_chain(*files)
        self.loaded = pair.cert_pem
        if issued.bundle:
            for ctx in self.trusting:
                ctx.load_verify_locations(cadata=issued.bundle.decode())
        left = (certs.not_after(pair.cert_pem) - dt.datetime.now(dt.UTC)).total_seconds()
        self.renew_at = time.monotonic() + max(1.0, left - self.lifetime.total_seconds() / 2)

    async def keep_fresh(self, _: object) -> AsyncIterator[None]:
        """aiohttp cleanup context: renews in the background while the app runs."""
        task = asyncio.create_task(self.run())
        yield
        task.cancel()

    async def run(self) -> None:
        """Renew forever (until cancelled). Any failure is logged and retried after a
        tenth of the lifetime (30 s at most): the loop must outlive a lost API server."""
        retry = min(30.0, self.lifetime.total_seconds() / 10)
        while True:
            await asyncio.sleep(max(0.0, self.renew_at - time.monotonic()))
            try:
                issued = await asyncio.to_thread(self.issue)
                if issued.pair.cert_pem == self.loaded:
                    logger.info("no newer certificate than the one serving yet; trying "
                                "again in %g s", retry)
                    self.renew_at = time.monotonic() + retry
                    continue
                self.load(issued)
                logger.info("renewed the serving certificate")
            except Exception as err:  # whatever broke (the API server gone...): try later
                logger.warning("renewing the serving certificate failed: %s", err)
                self.renew_at = time.monotonic() + retry
