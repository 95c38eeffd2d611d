"""An overall deadline for one registry operation, every request of it included.

requests' timeout bounds each socket read, not a request, so a registry that sends a byte
just inside it (of a header, a TLS handshake, a token answer or a manifest) holds the
caller for as long as it likes. :class:`Deadline` holds a duplicate of every socket the
operation's session opens (taken before TLS wraps it, so a handshake is covered) and,
when the time is up, shuts them down from a :class:`threading.Timer`: the read blocked
in the caller's thread ends at once (at end of file, or a connection error), later
connections are shut as they open, and the caller, seeing :attr:`Deadline.passed`,
reports the deadline rather than what the cut-short read returned. The timer lives no
longer than the operation's ``with`` block, and the duplicates are closed with it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool


class Deadline:
    """``seconds`` from ``__enter__`` on; the sockets of sessions :meth:`mount`-ed on it
    are shut down when they have passed."""

    def __init__(self, seconds: float, *, name: str = "registry deadline") -> None:
        self.seconds = seconds
        self.passed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = name
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._timer.cancel()
        self._timer.join()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()

    def mount(self, session: requests.Session) -> requests.Session:
        """Put ``session``'s connections under this deadline."""
        adapter = _Adapter(self)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        return session

    def track(self, sock: socket.socket) -> None:
        """Keep a duplicate of a new connection's socket (shut at once if too late)."""
        duplicate = sock.dup()
        with self._lock:
            self._sockets.append(duplicate)
            if self.passed:
                _shut(duplicate)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Shut the connection down (it is the socket, not this descriptor, that is shut:
    a read blocked on another descriptor of it ends)."""
    with contextlib.suppress(OSError):  # already closed by the peer
        sock.shutdown(socket.SHUT_RDWR)


class _Tracked:
    """A urllib3 connection that hands each socket it opens to its deadline."""

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        self._deadline.track(sock)
        return sock


class _TrackedHTTP(_Tracked, HTTPConnection):
    pass


class _TrackedHTTPS(_Tracked, HTTPSConnection):
    pass


class _Adapter(HTTPAdapter):
    """requests' adapter whose connection pools (one session's, so one operation's) make
    :class:`_Tracked` connections; through a proxy too."""

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline
        super().__init__()

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> ConnectionPool:
        pool = super().get_connection_with_tls_context(*args, **kwargs)
        assert isinstance(pool, HTTPConnectionPool)  # http and https: urllib3's only kinds
        if not issubclass(pool.ConnectionCls, _Tracked):
            # a pool makes its connections lazily, so none is made before this
            https = issubclass(pool.ConnectionCls, HTTPSConnection)
            pool.ConnectionCls = _TrackedHTTPS if https else _TrackedHTTP
            pool.conn_kw["deadline"] = self._deadline
        return pool
