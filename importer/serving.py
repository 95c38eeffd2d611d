"""A stdlib HTTP server's accept loop in a thread of its own, stopped promptly.

``serve_forever`` checks for ``shutdown()`` once per poll interval, 0.5 s by default:
stopping such a server cost the importer up to half a second at the end of an import
(the metrics server at every pod's exit; the range endpoint at the end of every S3
import, whose whole transfer can take two). Here the loop checks every
:data:`SHUTDOWN_POLL` seconds.
"""

from __future__ import annotations

import threading
from socketserver import BaseServer

SHUTDOWN_POLL = 0.02
"""Seconds between the accept loop's checks for shutdown (the stop's worst-case wait)."""


class ServingThread:
    """``server``'s accept loop in a daemon thread named ``name``."""

    def __init__(self, server: BaseServer, name: str) -> None:
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever,
                                       kwargs={"poll_interval": SHUTDOWN_POLL},
                                       name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The loop stopped, the listening socket closed (its port free again)."""
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
