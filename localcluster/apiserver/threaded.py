"""Run the API server on its own event loop in a background thread.

For synchronous callers (the ``kubernetes`` client, kopf's ``KopfRunner``, tests)::

    with running_server(tmp_path) as server:
        ... server.kubeconfig_path ...
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..looptransports import abort_open_transports
from .server import APIServer


class ServerThread:
    def __init__(self, data_dir: Path | str, **kwargs: Any) -> None:
        self.server = APIServer(data_dir, **kwargs)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="apiserver", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as err:
            self._error = err
            self._started.set()
            return
        self._started.set()
        await self._stop.wait()
        await self.server.stop()
        await abort_open_transports()  # the loop is this server's alone

    def start(self, timeout: float = 30) -> APIServer:
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("the API server did not start in time")
        if self._error is not None:
            raise self._error
        return self.server

    def stop(self, timeout: float = 30) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextmanager
def running_server(data_dir: Path | str, **kwargs: Any) -> Iterator[APIServer]:
    thread = ServerThread(data_dir, **kwargs)
    server = thread.start()
    try:
        yield server
    finally:
        thread.stop()
