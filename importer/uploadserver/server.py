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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import BodyPartReader, web

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
        self._pending = False
        """An async upload's processing goes on after its answer (the server stays busy)."""
        self._closing = False
        """The deadline came: no upload is taken any more."""

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
            if not self._pending:
                self.busy = False

    async def _receive(self, request: web.Request, *, sync: bool,
                       form: bool) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        if form:
            chunks, size = await _form_chunks(request)
            if chunks is None:
                return web.Response(status=400, text=f"multipart field {FORM_FIELD!r}"
                                    " is missing\n")
        else:
            chunks, size = request.content.iter_chunked(CHUNK), request.content_length
        try:
            head = await _read_head(chunks)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as err:
            return web.Response(status=400, text=f"reading the upload failed: {err}\n")
        if not head:
            return web.Response(status=400, text="the upload is empty\n")
        with contextlib.ExitStack() as stack:
            scratch = None
            if spooled(head=head[0], size=size):
                assert size is not None
                where = self.config.scratch_dir
                room = _scratch_room(where, limit=self.config.image_size)
                if size > room:
                    return web.Response(status=413, text=f"the image ({size} bytes) is larger"
                                        f" than the scratch space ({room} bytes)\n")
                tmp = stack.enter_context(tempfile.TemporaryDirectory(
                    prefix="upload-", dir=str(where) if where else None))
                scratch = Path(tmp) / "image"
            upload = Upload(head=head[0], size=size, scratch=scratch,
                            read_timeout=self.config.read_timeout)
            stack.callback(upload.close)
            self._active = upload
            work = loop.run_in_executor(None, self._process, upload)
            received = await self._feed(upload, head[1], work)
            if not received.ok:
                outcome = await _settle(work)
                if outcome.error is not None:
                    return self._end(outcome)
                return web.Response(status=400, text=f"upload failed: {received.why}\n")
            if not sync:
                task = asyncio.ensure_future(_settle(work))
                self._pending = True
                # the upload and its scratch directory outlive this answer: closed, and
                # the directory removed, when the processing ends
                later = stack.pop_all()
                task.add_done_callback(lambda t: self._async_done(t.result(), later))
                return web.Response(text="upload received; processing\n")
            outcome = await _settle(work)
            return self._end(outcome)
        raise AssertionError("unreachable")

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

    def _async_done(self, outcome: Outcome, resources: contextlib.ExitStack) -> None:
        resources.close()
        self._pending = False
        self.busy = False
        self._end(outcome, answered=True)

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
        loop = asyncio.get_running_loop()
        try:
            async for chunk in rest:
                if work.done() and work.result().error is not None:
                    raise _Stop("processing failed before the upload ended")
                if upload.spooled:
                    upload.feed(chunk)  # an append to the scratch file: never waits long
                else:
                    await loop.run_in_executor(None, upload.feed, chunk)
            await loop.run_in_executor(None, upload.finish)
            return _Received(True, "")
        except (ConnectionError, asyncio.IncompleteReadError, OSError, TransferError,
                _Stop) as err:
            upload.abort(err)
            return _Received(False, str(err) or type(err).__name__)
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


@dataclass(frozen=True)
class _Received:
    ok: bool
    why: str


class _Stop(Exception):
    pass


def _scratch_room(where: Path | None, *, limit: int | None) -> int:
    """Bytes a spooled image may take: the scratch volume's free space, and no more than
    ``limit``, the emptyDir's size limit (the claim's request). A kubelet evicts a pod
    over its limit only after the fact, and localcluster's does not at all: without
    this bound, an upload could fill the node's disk under a small claim."""
    stat = os.statvfs(where if where is not None else tempfile.gettempdir())
    free = stat.f_bavail * stat.f_frsize
    return free if limit is None else min(free, limit)


async def _settle(work: asyncio.Future[Outcome]) -> Outcome:
    return await work


async def _read_head(chunks: AsyncIterator[bytes]) -> tuple[bytes, AsyncIterator[bytes]] | None:
    """The first HEAD_BYTES (fewer for a short body), and the rest of the body."""
    buf = bytearray()
    iterator = chunks.__aiter__()
    while len(buf) < HEAD_BYTES:
        try:
            buf += await iterator.__anext__()
        except StopAsyncIteration:
            break
    if not buf:
        return None
    return bytes(buf), iterator


async def _form_chunks(request: web.Request,
                       ) -> tuple[AsyncIterator[bytes] | None, int | None]:
    reader = await request.multipart()
    while True:
        part = await reader.next()
        if part is None:
            return None, None
        if isinstance(part, BodyPartReader) and part.name == FORM_FIELD:
            return _part_chunks(part), None


async def _part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while True:
        chunk = await part.read_chunk(CHUNK)
        if not chunk:
            return
        yield chunk
