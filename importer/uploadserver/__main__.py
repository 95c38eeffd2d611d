"""``python -m importer.uploadserver``: serve one upload, then exit as the importer does
(0 complete, 1 retryable, 2 permanent; the termination message says why)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from importer import children
from importer.config import TERMINATION_LOG
from importer.errors import ConfigError, ImporterError
from importer.redact import install_log_filter
from importer.termination import EXIT_OK, EXIT_PERMANENT, EXIT_RETRYABLE, message, write
from importer.uploadserver.config import from_env
from importer.uploadserver.server import UploadServer, server_ssl_context
from vocab import podenv

logger = logging.getLogger("importer.uploadserver")
DEADLINE_RECHECK = 2.0
"""Seconds between looks, once the deadline passed, at whether the upload ended."""
HANDLER_GRACE = 2.0
"""Seconds a request still in flight gets when the server stops: enough to send the
answer of an upload that has ended; a body still arriving (the pod deleted mid-upload)
is cut off, not waited for (the kubelet's grace would run out first)."""
WIND_DOWN = 20.0
"""Seconds, once stopped, for the processor to end and its scratch to be removed."""


async def serve() -> int:
    log = Path(os.environ.get(podenv.TERMINATION_LOG) or str(TERMINATION_LOG))
    try:
        config = from_env(os.environ)
        ctx = server_ssl_context(config.tls_dir)
    except (ConfigError, OSError) as bad:
        text = bad.message if isinstance(bad, ConfigError) else f"TLS files: {bad}"
        logger.error("%s", text)
        write(log, message(reason="InvalidConfig", text=text, retryable=False))
        return EXIT_PERMANENT
    server = UploadServer(config.importer, client_name=config.client_name)
    # auto_decompress off: the body is taken as sent (a gzip body is a gzip image, which
    # the processor unpacks), never inflated here under the sender's Content-Length
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False,
                           auto_decompress=False, shutdown_timeout=HANDLER_GRACE)
    await runner.setup()
    site = web.TCPSite(runner, config.address, config.port, ssl_context=ctx)
    await site.start()
    logger.info("upload server on %s:%d", config.address, config.port)
    stopping = asyncio.get_running_loop().create_future()

    def stop() -> None:
        if not stopping.done():
            stopping.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop)
    done = server.outcome()
    deadline = asyncio.ensure_future(_deadline(server, config.deadline))
    await asyncio.wait([done, stopping], return_when=asyncio.FIRST_COMPLETED)
    deadline.cancel()
    # aiohttp's graceful shutdown lets the handler still answering finish and flush first
    await runner.cleanup()
    if not await server.wound_down(WIND_DOWN):
        logger.warning("the upload's processing did not end within %g s", WIND_DOWN)
    children.stop_all()
    if not done.done():
        text = "upload server stopped before an upload completed"
        write(config.termination_log, message(reason="Interrupted", text=text, retryable=True))
        return EXIT_RETRYABLE
    outcome = done.result()
    if outcome.deadline_passed:  # upstream's message: the controller makes a new pod
        write(config.termination_log, message(reason="DeadlinePassed", text="Deadline Passed",
                                              retryable=False, deadlinePassed=True))
        return EXIT_OK
    if outcome.error is not None:
        err: ImporterError = outcome.error
        write(config.termination_log, message(reason=err.reason, text=err.message,
                                              retryable=err.retryable))
        return EXIT_RETRYABLE if err.retryable else EXIT_PERMANENT
    assert outcome.result is not None
    write(config.termination_log, message(reason="Completed", text="Upload Complete",
                                          retryable=False, **outcome.result.as_dict()))
    return EXIT_OK


async def _deadline(server: UploadServer, deadline: dt.datetime | None) -> None:
    """At ``deadline``, end the server unless an upload is under way; then look again
    every few seconds (an upload is bounded by its own timeouts)."""
    if deadline is None:
        return
    await asyncio.sleep(max(0.0, (deadline - dt.datetime.now(dt.UTC)).total_seconds()))
    while not server.end_at_deadline():
        await asyncio.sleep(DEADLINE_RECHECK)


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_filter()
    return asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
