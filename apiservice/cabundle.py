"""Keeping the caBundles a server owns in place while it runs.

A server that is its own CA (virt-api, the cdi-apiserver) writes its CA bundle into the
``caBundle`` of its APIService and webhook configurations when it issues a certificate.
The manifests do not carry that field, so writing an object again as its manifest has
it (``kubectl replace -f manifests/``, or ``rootdisk up`` re-applying the manifests
while the server's pod starts again beside it) empties the bundle, and the API server
then refuses the server's certificate until its next renewal, hours away. The
:class:`Keeper` writes the last bundle again every :data:`CHECK_SECONDS` where it is
missing or different (the server's ``publish`` reads each object and writes only what
changed), as upstream's operators reconcile theirs. The CDI operator, which is not an
asyncio program, keeps its webhook's bundle with a thread at the same interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

logger = logging.getLogger(__name__)

CHECK_SECONDS = 15.0


class Keeper:
    def __init__(self, publish: Callable[[bytes], None], *,
                 every: float = CHECK_SECONDS) -> None:
        self.publish = publish
        """Writes a bundle where it belongs (blocking: run in a thread)."""
        self.every = every
        self.bundle = b""
        """The bundle last published on issue (b"": none yet, nothing to keep)."""

    async def keep(self, _: object) -> AsyncIterator[None]:
        """aiohttp cleanup context: checks in the background while the app runs."""
        task = asyncio.create_task(self.run())
        yield
        task.cancel()

    async def run(self) -> None:
        """Check forever (until cancelled); a failed check is logged and tried again at
        the next one."""
        while True:
            await asyncio.sleep(self.every)
            if not self.bundle:
                continue
            try:
                await asyncio.to_thread(self.publish, self.bundle)
            except Exception as err:  # whatever broke (the API server gone...): next time
                logger.warning("caBundle check failed: %s", err)
