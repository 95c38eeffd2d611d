"""The upload server's HTTPS endpoints (aiohttp) and the one upload it takes.

The request body is read here, on the event loop, and handed to an
:class:`importer.uploadsource.Upload`; the importer's :class:`Processor` runs in a
thread and reads it as a source. A sync request is answered once the disk is written,
an async one once the body has arrived. The outcome (:class:`Outcome`) tells
``__main__`` how to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from aiohttp import BodyPartReader, MultipartReader, web

from apiservice.answers import refused_closing
from importer.config import ImporterConfig
from importer.errors import ImporterError, TransferError
from importer.formats import HEAD_BYTES
from importer.processor import Processor, Result
from importer.progress import Progress
from importer.uploadsource import Upload, spooled

logger = logging.getLogger(__name__)

CHUNK = 1024 * 1024
UPLOAD_PATHS = ("/v1beta1/upload", "/v1alpha1/upload")
ASYNC_PATHS = ("/v1beta1/upload-async", "/v1alpha1/upload-async")
FORM_PATHS = ("/v1beta1/upload-form", "/v1alpha1/upload-form")
FORM_ASYNC_PATHS = ("/v1beta1/upload-form-async", "/v1alpha1/upload-form-async")
ARCHIVE_PATHS = ("/v1beta1/upload-archive", "/v1alpha1/upload-archive")
FORM_FIELD = "file"
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """How the server's work ended: ``result`` on success, else the error; neither when
    its deadline came with no upload (``deadline_passed``)."""
    result: Result | None
    error: ImporterError | None
    deadline_passed: bool = False


def server_ssl_context(tls_dir: Path) -> ssl.SSLContext:
    """Serving context: the server's certificate; a client certificate is asked for (the
    kubelet's probe of /healthz sends none) and verified against ``ca.crt`` only."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))
    ctx.load_verify_locations(cafile=str(tls_dir / "ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def client_common_name(request: web.Request) -> str | None:
    """The CN of the verified client certificate (None when none was sent)."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class UploadServer:
    def __init__(self, config: ImporterConfig, *, client_name: str,
                 require_client_cert: bool = True) -> None:
        self.config = config
        self.client_name = client_name
        self.require_client_cert = require_client_cert
        self.busy = False
        self.finished: asyncio.Future[Outcome] | None = None
        self._active: Upload | None = None
        self._closing = False
        """The deadline came: no upload is taken any more."""
        self._work: asyncio.Future[Outcome] | None = None
        """The processor's run, from its start until its thread has ended (an async
        upload's goes on after its answer: the server stays busy until then)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        for paths, sync, form in ((UPLOAD_PATHS, True, False), (ASYNC_PATHS, False, False),
                                  (FORM_PATHS, True, True), (FORM_ASYNC_PATHS, False, True),
                                  (ARCHIVE_PATHS, True, False)):
            for path in paths:
                for method in ("POST", "PUT"):
                    app.router.add_route(method, path, self._handler(sync=sync, form=form))
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="OK")

    def _handler(self, *, sync: bool, form: bool):  # type: ignore[no-untyped-def]
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.upload(request, sync=sync, form=form)
        return handle

    def outcome(self) -> asyncio.Future[Outcome]:
        if self.finished is None:
            self.finished = asyncio.get_running_loop().create_future()
        return self.finished

    async def upload(self, request: web.Request, *, sync: bool,
                     form: bool) -> web.StreamResponse:
        if self.require_client_cert and client_common_name(request) != self.client_name:
            return web.Response(status=401, text="uploads are taken only from the upload"
                                " proxy (client certificate)\n")
        if self._closing:
            return web.Response(status=503, text="this upload server is being replaced (its"
                                " certificate is due); try again shortly\n")
        if self.outcome().done():
            return web.Response(status=409, text="the upload has already finished\n")
        if self.busy:
            return web.Response(status=503, text="an upload is in progress\n")
        self.busy = True
        try:
            return await self._receive(request, sync=sync, form=form)
        finally:
            # once the processor runs, only its end releases the server (_settled): a
            # second upload must never write beside, or be wiped by, a first still running
            if self._work is None:
                self.busy = False

    async def _receive(self, request: web.Request, *, sync: bool,
                       form: bool) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        idle = self.config.read_timeout
        try:
            if form:
                chunks, size = await _bounded(_form_chunks(request), idle)
                if chunks is None:
                    return _refused(400, f"multipart field {FORM_FIELD!r} is missing")
            else:
                chunks, size = request.content.iter_chunked(CHUNK), request.content_length
            head = await _read_head(chunks, idle=idle)
        except Exception as err:  # whatever the body did wrong: nothing was started yet
            text = f"reading the upload failed: {_why(err)}"
            if isinstance(err, _Idle):
                return await refused_closing(request, 400, text)
            return _refused(400, text)
        if not head:
            return _refused(400, "the upload is empty")
        with contextlib.ExitStack() as stack:
            scratch = None
            if spooled(head=head[0], size=size):
                assert size is not None
                where = self.config.scratch_dir
                room = _scratch_room(where, limit=self.config.image_size)
                if size > room:
                    return _refused(413, f"the image ({size} bytes) is larger than the"
                                    f" scratch space ({room} bytes)")
                tmp = stack.enter_context(tempfile.TemporaryDirectory(
                    prefix="upload-", dir=str(where) if where else None))
                scratch = Path(tmp) / "image"
            upload = Upload(head=head[0], size=size, scratch=scratch,
                            read_timeout=self.config.read_timeout)
            stack.callback(upload.close)
            # the upload and its scratch directory belong to the processor from here:
            # closed, and the directory removed, when it has ended (_settled)
            resources = stack.pop_all()
        self._active = upload
        work = loop.run_in_executor(None, self._process, upload)
        self._work = work
        run = _Run()
        work.add_done_callback(lambda w: self._settled(w, resources, run))
        received = await self._feed(upload, head[1], work)
        if not received.ok:
            # shielded: a cancelled handler must not cancel the future of a thread that
            # goes on running (busy would be released under it)
            outcome = await asyncio.shield(work)
            await run.released.wait()  # nothing of it is left when the client hears
            if received.idle:  # whichever side's read timeout fired first
                logger.warning("upload failed: %s; ready for another", received.why)
                return await refused_closing(request, 400, f"upload failed: {received.why}")
            first = upload.error  # what stopped the upload first
            if outcome.error is not None and first is outcome.error \
                    and first is not received.error:
                # the processor's own failure (TooSmall, …) came first, whichever side
                # of the body then noticed the upload stopped: its reason is the answer
                return self._end(outcome)
            logger.warning("upload failed: %s; ready for another", received.why)
            return _refused(400, f"upload failed: {received.why}")
        if not sync and not run.released.is_set():
            run.answered = True  # _settled records the outcome
            return web.Response(text="upload received; processing\n")
        outcome = await asyncio.shield(work)
        await run.released.wait()
        return self._end(outcome)

    def end_at_deadline(self) -> bool:
        """At the deadline: end unless an upload is under way (True when the server's
        work is over, now or already; False: ask again later)."""
        if self.outcome().done():
            return True
        if self.busy:
            return False
        self._closing = True
        logger.info("deadline passed with no upload; ending for a fresh certificate")
        self.outcome().set_result(Outcome(None, None, deadline_passed=True))
        return True

    def _settled(self, work: asyncio.Future[Outcome], resources: contextlib.ExitStack,
                 run: _Run) -> None:
        """The processor has ended (its thread is done): the upload's resources go, a
        success (or an answered async upload's failure) is recorded before anything
        else can happen, then the server takes another upload."""
        try:
            resources.close()
            if not work.cancelled():
                outcome = work.result()
                if run.answered or outcome.error is None:
                    self._end(outcome, answered=run.answered)
        finally:
            self._work = None
            self._active = None
            self.busy = False
            run.released.set()

    def _end(self, outcome: Outcome, *, answered: bool = False) -> web.Response:
        """Record the outcome. A failure the client is still waiting to hear about is
        answered, what it wrote is gone, and the server stays ready for another upload
        (a wrong file, an image too large for the volume): as upstream's, only a success
        ends the server, or a failure after an async upload was already answered."""
        self._active = None
        error = outcome.error
        if error is not None and not answered:
            logger.warning("upload failed (%s): %s; ready for another", error.reason,
                           error.message)
            return web.Response(status=400, text=f"{error.reason}: {error.message}\n")
        if not self.outcome().done():
            self.outcome().set_result(outcome)
        if error is not None:
            logger.error("upload failed (%s): %s", error.reason, error.message)
        return web.Response(text="upload complete\n")

    async def _feed(self, upload: Upload, rest: AsyncIterator[bytes],
                    work: asyncio.Future[Outcome]) -> _Received:
        """The rest of the body into ``upload``. Any failure (the client gone or silent
        longer than the read timeout, a malformed body, the processor failed) aborts the
        upload, so the processor ends too."""
        loop = asyncio.get_running_loop()
        idle = self.config.read_timeout
        try:
            while True:
                try:
                    chunk = await _bounded(rest.__anext__(), idle)
                except StopAsyncIteration:
                    break
                if work.done() and work.result().error is not None:
                    raise _Stop("processing failed before the upload ended")
                if upload.spooled:
                    upload.feed(chunk)  # an append to the scratch file: never waits long
                else:
                    await loop.run_in_executor(None, upload.feed, chunk)
            await loop.run_in_executor(None, upload.finish)
            return _Received(True, "")
        except _Stop as err:
            upload.abort(err)
            return _Received(False, str(err), error=err)
        except Exception as err:  # every other failure too: never a running processor left
            upload.abort(err)
            return _Received(False, _why(err), error=err, idle=isinstance(err, _Idle))
        except asyncio.CancelledError:
            upload.abort(TransferError("the client went away"))
            raise

    def _process(self, upload: Upload) -> Outcome:
        try:
            result = Processor(self.config, upload, Progress([])).run()
        except ImporterError as err:
            upload.abort(err)  # the feeding side stops too
            return Outcome(None, err)
        except Exception as err:  # reported, never swallowed silently
            logger.exception("processing the upload failed")
            upload.abort(err)
            return Outcome(None, ImporterError(f"processing failed: {err}"))
        logger.info("upload written: %s", result.as_dict())
        return Outcome(result, None)

    async def _on_shutdown(self, _: web.Application) -> None:
        if self._active is not None:
            self._active.abort(TransferError("the upload server is stopping"))

    async def wound_down(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until the processor's run, if any, has ended and
        its resources (the scratch directory) are gone; whether it has."""
        work = self._work
        if work is not None:
            await asyncio.wait([work], timeout=timeout)
            await asyncio.sleep(0)  # its done-callback (_settled) runs on this loop
        return self._work is None


@dataclass(frozen=True)
class _Received:
    ok: bool
    why: str
    error: BaseException | None = None
    """What the feed aborted the upload with (no-op when something had already)."""
    idle: bool = False
    """The client went silent: the connection is closed after the answer."""


@dataclass
class _Run:
    """One processor run, as the handler and the run's end (``_settled``) share it."""
    answered: bool = False
    """An async upload was answered: the run's end records its outcome, whatever it is."""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the run's resources are gone (its scratch directory removed): a
    failure is answered only then, a done future's callbacks having not yet run."""


class _Stop(Exception):
    pass


class BadBody(Exception):
    """The request body is not what it claims to be (a malformed multipart form)."""


def _why(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    if isinstance(err, (ConnectionError, asyncio.IncompleteReadError)):
        return f"the client went away ({text})"
    return text


class _Idle(TransferError):
    """No byte of the body for longer than the read timeout."""


def _refused(status: int, text: str) -> web.Response:
    """A refusal before the body's end: aiohttp reads and drops the rest for a while
    (its lingering close), so that a client still sending hears the answer."""
    return web.Response(status=status, text=f"{text}\n")


async def _bounded(step: Awaitable[T], idle: float) -> T:
    """One read of the body, which may wait no longer than ``idle`` seconds (the
    importer's read timeout): a client that goes silent is ended, not waited for."""
    try:
        async with asyncio.timeout(idle):  # no task per read, as wait_for makes
            return await step
    except TimeoutError:
        raise _Idle(f"no upload data for {idle:.0f} s") from None


def _scratch_room(where: Path | None, *, limit: int | None) -> int:
    """Bytes a spooled image may take: the scratch volume's free space, and no more than
    ``limit``, the emptyDir's size limit (the claim's request). A kubelet evicts a pod
    over its limit only after the fact (every few seconds): without this bound, an
    upload could fill the node's disk under a small claim before that."""
    stat = os.statvfs(where if where is not None else tempfile.gettempdir())
    free = stat.f_bavail * stat.f_frsize
    return free if limit is None else min(free, limit)


async def _read_head(chunks: AsyncIterator[bytes], *, idle: float,
                     ) -> tuple[bytes, AsyncIterator[bytes]] | None:
    """The first HEAD_BYTES (fewer for a short body), and the rest of the body."""
    buf = bytearray()
    iterator = chunks.__aiter__()
    while len(buf) < HEAD_BYTES:
        try:
            buf += await _bounded(iterator.__anext__(), idle)
        except StopAsyncIteration:
            break
    if not buf:
        return None
    return bytes(buf), iterator


async def _form_chunks(request: web.Request,
                       ) -> tuple[AsyncIterator[bytes] | None, int | None]:
    try:
        reader = await request.multipart()
        while True:
            part = await reader.next()
            if part is None:
                return None, None
            if isinstance(part, BodyPartReader) and part.name == FORM_FIELD:
                return _part_chunks(reader, part), None
    except (ValueError, AssertionError, KeyError) as err:  # aiohttp's words for "malformed"
        raise BadBody(f"the multipart body is malformed: {err}") from err


async def _part_chunks(reader: MultipartReader, part: BodyPartReader) -> AsyncIterator[bytes]:
    """The file field's bytes. Its end must be a boundary, and the form must end with
    its closing boundary (fields after the file are read and ignored): a body cut short
    is not an upload."""
    try:
        while True:
            chunk = await part.read_chunk(CHUNK)
            if chunk:
                yield chunk
                continue
            if not part.at_eof():
                raise BadBody(f"the multipart field {FORM_FIELD!r} ended without its"
                              " boundary")
            while (more := await reader.next()) is not None:
                await more.release()
            if not reader.at_eof():
                raise BadBody("the multipart body ended without its closing boundary")
            return
    except (ValueError, AssertionError) as err:  # aiohttp's words for "malformed"
        raise BadBody(f"the multipart body is malformed: {err}") from err
