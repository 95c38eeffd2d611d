"""The protocol every image source speaks, and the retry policy they share.

A source answers three questions: how big is the object and can it be read at random
(``probe``), give me bytes ``[start, start+length)`` (``read_range``), and give me the
bytes in order from an offset (``stream``). The processor picks the route from those
answers; random access is what lets qemu-img convert while the image streams.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import tenacity

from importer.config import ImporterConfig
from importer.errors import SourceChanged, TransferError

logger = logging.getLogger(__name__)
T = TypeVar("T")

CHUNK = 1024 * 1024
USER_AGENT = "rootdisk-importer"


@dataclass(frozen=True)
class Validators:
    """What names one version of an object (RFC 9110's validators): pinned at the probe
    and compared with every later answer, so that every byte of one import comes from
    one object. A validator the probe saw that is gone or different later is a change."""

    etag: str | None = None
    last_modified: str | None = None

    def check(self, now: Validators, what: str) -> None:
        """SourceChanged when ``now`` (a later answer's) is not the pinned object."""
        for name, before, after in (("ETag", self.etag, now.etag),
                                    ("Last-Modified", self.last_modified, now.last_modified)):
            if before is not None and before != after:
                raise SourceChanged(f"{what} changed during the import: {name} was {before},"
                                    f" is now {after if after is not None else 'absent'}")

    @property
    def present(self) -> bool:
        return self.etag is not None or self.last_modified is not None


@dataclass(frozen=True)
class Probe:
    size: int | None
    """Bytes of the object as stored (compressed if it is); None when the source won't say."""
    ranged: bool
    """Whether byte ranges can be read at random (Range requests work)."""
    head: bytes
    """The first bytes of the object (up to formats.HEAD_BYTES)."""
    content_type: str | None = None
    """The media type the server declared, where it did (to name what came back)."""
    validators: Validators = Validators()
    """What identifies the object probed; every later read is checked against it."""
    spooled: bool = False
    """The object is being kept whole in a local file as it arrives (an upload): the
    source is a :class:`Spooled` and qemu-img can read that file itself."""


class Source(Protocol):
    """An image source. Implementations raise ``importer.errors`` types only. Readers on
    other threads get their own ``fork`` (the source itself where it is thread-safe)."""

    def probe(self) -> Probe: ...

    def read_range(self, start: int, length: int) -> bytes: ...

    def stream(self, offset: int = 0) -> Iterator[bytes]: ...

    def fork(self) -> Source:
        """A reader of the same object for another thread, pinned to what this source's
        probe saw (its answers are checked against the same validators and size). A
        thread-safe source returns itself."""
        ...

    def close(self) -> None:
        """Release the connections, including those of streams still open: a consumer that
        stops on an error leaves its ``stream`` generator unfinished, held by the error's
        traceback, and its socket would stay open until the garbage collector finds it."""
        ...


class Closable(Protocol):
    def close(self) -> None: ...


class OpenStreams:
    """The bodies of a source's streams still being read, closed with the source."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: list[Closable] = []

    @contextlib.contextmanager
    def held(self, body: Closable) -> Iterator[None]:
        """Track ``body`` while the block runs; close it when the block ends."""
        with self._lock:
            self._bodies.append(body)
        try:
            yield
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._bodies.remove(body)
            body.close()

    def close(self) -> None:
        with self._lock:
            bodies, self._bodies = self._bodies, []
        for body in bodies:
            with contextlib.suppress(Exception):  # a half-read body may fail to close
                body.close()


@dataclass(frozen=True)
class GrowingFile:
    """A spooled object's file while it arrives: appended in order, never rewritten."""
    path: Path
    size: int
    """The object's final size (its file's length once whole)."""
    wait: Callable[[int], None]
    """Returns once the file holds this many bytes; raises ``TransferError`` once it
    never will (the object aborted or ended short) or did not grow for the source's
    read timeout."""


class Spooled(Protocol):
    """A source that keeps the whole object in a local file as it arrives."""

    def spooled_file(self) -> Path:
        """The file, once every byte has arrived (waits until then, within the
        source's read timeout; raises ``TransferError`` if the object never completes)."""
        ...

    def growing_file(self) -> GrowingFile | None:
        """The file as it arrives, for a reader that waits for its bytes (None when its
        final size is not known)."""
        ...


SourceFactory = Callable[[ImporterConfig], Source]


def retrying(config: ImporterConfig, what: str) -> tenacity.Retrying:
    """Bounded exponential backoff over ``TransferError`` only: permanent errors
    (NotFound, Unauthorized, …) go straight through."""

    def log(state: tenacity.RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        logger.warning("%s failed (try %d of %d): %s; retrying",
                       what, state.attempt_number, config.retry_attempts, err)

    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(config.retry_attempts),
        wait=tenacity.wait_exponential(multiplier=config.retry_delay, max=30),
        retry=tenacity.retry_if_exception_type(TransferError),
        before_sleep=log,
        reraise=True,
    )


def call_with_retries(config: ImporterConfig, what: str, func: Callable[[], T]) -> T:
    result: T = retrying(config, what)(func)
    return result
