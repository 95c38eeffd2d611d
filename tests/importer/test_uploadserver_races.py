"""The upload server's failure answers, each ordering of the processor and the feed
driven on purpose instead of by chance (in-process: the server's real app on a loopback
port, real threads and sockets, raw HTTP from the test).

A stand-in for the processor (:class:`StandInProcessor`, monkeypatched over the
server's ``Processor``) runs the test's script: it waits on the Events the test or the
upload set, then fails (TooSmall, its own read timeout, the upload stopped under it).

The end of a run (``UploadServer._settled``: the upload closed, its scratch directory
removed, the server free again) is a callback of the processor's future, which may run
after the handler has already seen that future done. Here it is always held until the
handler waits for it (``run.released.wait()``) or the client has heard the answer and
the test has looked: what the client sees at its answer is then deterministic, and a
handler that answers before the run is released is caught on every run.

Claims:

a) the processor fails (TooSmall) while the feed waits inside ``upload.feed`` on a full
   piped queue (the feed then sees ``upload stopped: …``): the answer is TooSmall with
   the processor's message, and the run is released when it arrives;
b) the processor fails before the feed's next chunk (the feed's ``_Stop``): the same;
c) a spooled (qcow2) body, the processor failing while the feed writes to scratch: the
   answer names TooSmall and the scratch directory is empty when the client reads it;
d) the processor's read timeout fires first on a silent client: a 400 and the
   connection closed at once, within a couple of seconds of the read timeout;
e) a body error (the client gone mid-body), the processor failing after it: the answer
   is the body's error, not the processor's reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from aiohttp import web

from importer import uploadsource
from importer.config import ImporterConfig
from importer.errors import TooSmall, TransferError
from importer.formats import HEAD_BYTES
from importer.processor import Result
from importer.progress import Progress
from importer.uploadserver import server as server_module
from importer.uploadserver.server import Outcome, UploadServer
from importer.uploadsource import Upload
from tests.fixtures.appthread import AppThread
from vocab import sources

WAIT = 10.0
"""Bound of every wait on an Event or a socket (none is expected to come near it)."""
TOO_SMALL = "DataVolume too small: the image's virtual size 1073741824 is larger than 16777216"
CHUNK = 64 * 1024
RAW_HEAD = b"\0" * HEAD_BYTES
"""A raw image's head: piped."""

Script = Callable[[Upload], Result]
"""What the stand-in processor does with the upload it is given (in its thread)."""


def _qcow2_head(virtual_size: int = 1 << 30) -> bytes:
    """An uncompressed qcow2's head (no backing file, v3): spooled to scratch."""
    header = b"QFI\xfb" + struct.pack(">IQIIQI", 3, 0, 0, 16, virtual_size, 0)
    return header.ljust(HEAD_BYTES, b"\0")


class ReleasedEvent(asyncio.Event):
    """``_Run.released``, telling the test when the handler waits for it."""

    def __init__(self, on_wait: Callable[[], None]) -> None:
        super().__init__()
        self._on_wait = on_wait

    async def wait(self) -> Literal[True]:
        self._on_wait()
        return await super().wait()


@dataclass(frozen=True)
class Answered:
    """What the handler returned, and whether the run was released at that moment."""
    status: int
    text: str
    released: bool


class Reply:
    """One HTTP answer as the client read it."""

    def __init__(self, status: int, headers: dict[str, str], text: str) -> None:
        self.status = status
        self.headers = headers
        self.text = text


class Client:
    """Raw HTTP/1.1 on a blocking socket: the body is sent when the test says."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self._buf = b""

    def start(self, length: int, path: str = "/v1beta1/upload") -> None:
        self.sock.sendall(f"POST {path} HTTP/1.1\r\nHost: upload\r\n"
                          f"Content-Length: {length}\r\n\r\n".encode())

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> Reply:
        while b"\r\n\r\n" not in self._buf:
            self._buf += self._recv()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self._buf) < length:
            self._buf += self._recv()
        body, self._buf = self._buf[:length], self._buf[length:]
        return Reply(int(status_line.split()[1]), headers, body.decode())

    def _recv(self) -> bytes:
        got = self.sock.recv(65536)
        assert got, "the server closed the connection before its answer"
        return got

    def closed_within(self, seconds: float) -> bool:
        """Whether the server closes the connection within ``seconds`` (and sends
        nothing more)."""
        self.sock.settimeout(seconds)
        try:
            return self.sock.recv(65536) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        finally:
            self.sock.settimeout(WAIT)

    def reset(self) -> None:
        """Gone at once, mid-body (RST, no FIN)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


class Harness:
    """The server's real app (``UploadServer.app``) on a loopback port in its own thread,
    with the processor stood in and the run's end held (see the module's docstring)."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, *,
                 read_timeout: float) -> None:
        self.scratch = tmp / "scratch"
        self.scratch.mkdir()
        config = ImporterConfig(source=sources.UPLOAD, dest=tmp / "disk.img",
                                image_size=16 * 2**20, termination_log=None,
                                metrics_port=None, scratch_dir=self.scratch,
                                read_timeout=read_timeout, retry_attempts=1,
                                stall_min_bytes=0)
        self.server = UploadServer(config, client_name="test", require_client_cert=False)
        self.scripts: list[Script] = []
        self.hold_full_feed = False
        """Hold the feed inside ``upload.feed`` on a full queue until the upload stops."""
        # set by the upload, the stand-in, the run's end (any thread), or the test
        self.upload_made = threading.Event()
        self.fed_past_head = threading.Event()
        self.feed_held = threading.Event()
        self.stopped = threading.Event()
        self.run_ended = threading.Event()
        self.client_silent = threading.Event()
        self.answered_event = threading.Event()
        self.aborts: list[BaseException] = []
        """What ``Upload.abort`` was called with, in order (the first one stopped it)."""
        self.feed_errors: list[BaseException] = []
        """What ``upload.feed`` raised to the feed."""
        self.answered: list[Answered] = []
        self.spooled_to: list[Path] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate: asyncio.Event | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._clients: list[Client] = []
        self._patch(monkeypatch)
        self._thread = AppThread(self._build, name="upload server")
        self._thread.start()

    async def _build(self) -> tuple[web.Application, None]:
        self._loop = asyncio.get_running_loop()
        self._gate = asyncio.Event()
        return self.server.app(), None

    def client(self) -> Client:
        c = Client(self._thread.port)
        self._clients.append(c)
        return c

    def release(self) -> None:
        """Let the held end of the run go (the test has looked at what it needed)."""
        if self._loop is not None and self._gate is not None:
            self._loop.call_soon_threadsafe(self._gate.set)

    def stop(self) -> None:
        self.release()
        for c in self._clients:
            c.close()
        self._thread.stop()

    def _patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        harness = self

        class StandInProcessor:
            """Stand-in for ``importer.processor.Processor``: the test's script, in the
            processor's thread, over the server's Upload."""

            def __init__(self, _config: ImporterConfig, source: Upload,
                         _progress: Progress) -> None:
                self.source = source

            def run(self) -> Result:
                return harness.scripts.pop(0)(self.source)

        class WatchedUpload(Upload):
            """The server's Upload, telling the test where the feed is."""

            def __init__(self, **kw: Any) -> None:
                super().__init__(**kw)
                if self.scratch is not None:
                    harness.spooled_to.append(self.scratch)
                harness.upload_made.set()

            def feed(self, data: bytes) -> None:
                if self.received >= len(self.head) and harness.hold_full_feed:
                    assert not self.spooled and self._queue.full()
                    harness.feed_held.set()  # would wait in queue.put
                    assert harness.stopped.wait(WAIT), "the upload was never stopped"
                try:
                    super().feed(data)
                except BaseException as err:
                    harness.feed_errors.append(err)
                    raise
                if self.received > len(self.head):
                    harness.fed_past_head.set()

            def abort(self, error: BaseException) -> None:
                harness.aborts.append(error)
                super().abort(error)
                harness.stopped.set()

        original_run = server_module._Run
        original_settled = UploadServer._settled
        original_upload = UploadServer.upload

        def watched_run() -> Any:
            return original_run(released=ReleasedEvent(harness._open_gate))

        def held_settled(server: UploadServer, work: asyncio.Future[Outcome],
                         resources: ExitStack, run: Any) -> None:
            """The run's end, held until the handler waits for it (or the test lets it
            go): a done future's callbacks may run that late."""
            harness.run_ended.set()

            async def later() -> None:
                assert harness._gate is not None
                await harness._gate.wait()
                original_settled(server, work, resources, run)

            task = asyncio.get_running_loop().create_task(later())
            harness._pending.add(task)
            task.add_done_callback(harness._pending.discard)

        async def recorded_upload(server: UploadServer, request: web.Request, *,
                                  sync: bool, form: bool) -> web.StreamResponse:
            resp = await original_upload(server, request, sync=sync, form=form)
            text = (resp.text or "") if isinstance(resp, web.Response) else ""
            harness.answered.append(Answered(resp.status, text, released=not server.busy))
            harness.answered_event.set()
            return resp

        monkeypatch.setattr(server_module, "Processor", StandInProcessor)
        monkeypatch.setattr(server_module, "Upload", WatchedUpload)
        monkeypatch.setattr(server_module, "_Run", watched_run)
        monkeypatch.setattr(UploadServer, "_settled", held_settled)
        monkeypatch.setattr(UploadServer, "upload", recorded_upload)

    def _open_gate(self) -> None:  # on the server's loop
        assert self._gate is not None
        self._gate.set()


@pytest.fixture
def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def go(read_timeout: float = 30.0) -> Harness:
        h = Harness(tmp_path, monkeypatch, read_timeout=read_timeout)
        made.append(h)
        return h

    yield go
    for h in made:
        h.stop()


def _too_small_at_once(_: Upload) -> Result:
    raise TooSmall(TOO_SMALL)


def _reads_it_all(upload: Upload) -> Result:
    """A processor that takes the whole body and succeeds."""
    for _ in upload.stream():
        pass
    return Result(route="stream", format="raw")


def _another_upload_is_taken(h: Harness) -> None:
    """A second, whole upload right after the answer is taken, not refused as busy."""
    h.scripts.append(_reads_it_all)
    c = h.client()
    body = b"\0" * 4096
    c.start(len(body))
    c.send(body)
    reply = c.reply()
    assert (reply.status, reply.text) == (200, "upload complete\n")


def test_processor_fails_while_the_feed_waits_on_a_full_queue(
        make: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch) -> None:
    """a) the feed sees the stop as ``upload stopped: …`` from ``upload.feed``."""
    monkeypatch.setattr(uploadsource, "QUEUE_CHUNKS", 1)  # the head alone fills it
    h = make()
    h.hold_full_feed = True

    def too_small_once_the_feed_waits(_: Upload) -> Result:
        assert h.feed_held.wait(WAIT), "the feed never waited on the full queue"
        raise TooSmall(TOO_SMALL)

    h.scripts.append(too_small_once_the_feed_waits)
    c = h.client()
    c.start(HEAD_BYTES + 8 * CHUNK)
    c.send(RAW_HEAD)
    assert h.upload_made.wait(WAIT)
    c.send(b"\0" * CHUNK)  # the feed's next chunk: into a full queue
    reply = c.reply()
    released = not h.server.busy
    h.hold_full_feed = False
    h.release()
    # the ordering driven: the processor stopped the upload, then upload.feed raised
    assert isinstance(h.aborts[0], TooSmall)
    assert [str(e) for e in h.feed_errors] == [f"upload stopped: {TOO_SMALL}"]
    assert (reply.status, reply.text) == (400, f"TooSmall: {TOO_SMALL}\n")
    assert released, "answered before the run's resources were released"
    _another_upload_is_taken(h)


def test_processor_fails_before_the_feeds_next_chunk(make: Callable[..., Harness]) -> None:
    """b) the feed sees the processor's end before its next chunk (``_Stop``)."""
    h = make()
    h.scripts.append(_too_small_at_once)
    c = h.client()
    c.start(HEAD_BYTES + 8 * CHUNK)
    c.send(RAW_HEAD)
    assert h.run_ended.wait(WAIT), "the processor's end never reached the server"
    c.send(b"\0" * CHUNK)  # the feed's next chunk, the processor's future done
    reply = c.reply()
    released = not h.server.busy
    h.release()
    assert isinstance(h.aborts[0], TooSmall)
    assert type(h.aborts[1]).__name__ == "_Stop" and h.feed_errors == []
    assert (reply.status, reply.text) == (400, f"TooSmall: {TOO_SMALL}\n")
    assert released, "answered before the run's resources were released"
    _another_upload_is_taken(h)


def test_a_spooled_upload_leaves_no_scratch_file_when_the_failure_is_answered(
        make: Callable[..., Harness]) -> None:
    """c) a qcow2 body spooled to scratch; the processor fails while the feed writes."""
    h = make()

    def too_small_while_the_feed_writes(upload: Upload) -> Result:
        assert upload.scratch is not None and upload.scratch.exists()
        assert h.fed_past_head.wait(WAIT), "the feed never wrote past the head"
        raise TooSmall(TOO_SMALL)

    h.scripts.append(too_small_while_the_feed_writes)
    c = h.client()
    c.start(HEAD_BYTES + 16 * CHUNK)
    c.send(_qcow2_head())
    assert h.upload_made.wait(WAIT)
    c.send(b"\0" * CHUNK)  # written to the scratch file; then the processor fails
    assert h.run_ended.wait(WAIT), "the processor's end never reached the server"
    c.send(b"\0" * CHUNK)
    reply = c.reply()
    left = sorted(p.name for p in h.scratch.rglob("*"))
    released = not h.server.busy
    h.release()
    assert len(h.spooled_to) == 1 and h.spooled_to[0].is_relative_to(h.scratch)
    assert isinstance(h.aborts[0], TooSmall)
    assert reply.status == 400 and reply.text.startswith("TooSmall: "), reply.text
    assert TOO_SMALL in reply.text
    assert left == [], f"the upload's scratch files were still there at its answer: {left}"
    assert released


def test_a_silent_client_is_answered_and_closed_when_the_processor_times_out_first(
        make: Callable[..., Harness]) -> None:
    """d) the processor's read timeout fires first; the feed's then (``_Idle``)."""
    read_timeout = 2.0
    h = make(read_timeout=read_timeout)

    def times_out_first(upload: Upload) -> Result:
        # its read of the body gives up first (before the feed's own timer)
        assert h.client_silent.wait(WAIT)
        raise TransferError(f"no upload data for {upload.read_timeout:.0f} s")

    h.scripts.append(times_out_first)
    c = h.client()
    c.start(HEAD_BYTES + 8 * CHUNK)
    c.send(RAW_HEAD)
    silent_since = time.monotonic()
    h.client_silent.set()
    reply = c.reply()
    released = not h.server.busy
    h.release()
    closed = c.closed_within(2.0)
    waited = time.monotonic() - silent_since
    assert isinstance(h.aborts[0], TransferError)  # the processor's, first
    assert type(h.aborts[1]).__name__ == "_Idle"
    assert reply.status == 400, reply.text
    assert closed, "the connection of a silent client was kept open after the answer"
    assert reply.headers.get("connection", "").lower() == "close"
    assert waited < read_timeout + 2, waited
    assert reply.text == "upload failed: no upload data for 2 s\n"
    assert released


def test_a_body_error_is_not_answered_as_the_processors_reason(
        make: Callable[..., Harness]) -> None:
    """e) the client goes away mid-body; the processor fails after, on the stopped
    upload: the answer is the body's error (heard by nobody, but logged and recorded)."""
    h = make()

    def fails_on_the_stopped_upload(upload: Upload) -> Result:
        for _ in upload.stream():  # raises "upload stopped: …" once the feed aborts
            pass
        raise AssertionError("the body ended whole")

    h.scripts.append(fails_on_the_stopped_upload)
    c = h.client()
    c.start(HEAD_BYTES + 64 * CHUNK)
    c.send(RAW_HEAD)
    assert h.upload_made.wait(WAIT)
    c.send(b"\0" * CHUNK)
    assert h.fed_past_head.wait(WAIT)
    c.reset()
    assert h.answered_event.wait(WAIT), "the handler never answered"
    answered = h.answered[0]
    h.release()
    body_error, processor_error = h.aborts[0], h.aborts[1]
    assert isinstance(processor_error, TransferError)
    assert str(processor_error).startswith("upload stopped: ")  # after the body's error
    assert not isinstance(body_error, TransferError)
    assert answered.status == 400
    assert answered.text.startswith("upload failed: the client went away"), answered.text
    assert "TransferFailed" not in answered.text
    assert answered.released


@pytest.fixture(autouse=True)
def _no_leftover_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + WAIT
    for t in set(threading.enumerate()) - before:
        with contextlib.suppress(RuntimeError):
            t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), f"thread {t.name} outlived the test"
