"""Container-disk images in a registry (``docker://``): the file under ``disk/``, streamed
out of its layer (``ociregistry.image``) — no whole image unpacked to scratch first.

The probe resolves the reference once and pins the exact image manifest by digest: a
resumed read, and every later request, names that digest, so a tag moved mid-import
cannot mix two images into one disk. The layer's sha256 is checked when its last byte is
read, before the import can succeed. Registry credentials are the DataVolume Secret's
``accessKeyId``/``secretKey``, as upstream; they stay in memory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from importer.config import ImporterConfig, existing_dir, require_host
from importer.errors import (
    ConfigError,
    ImporterError,
    InvalidImage,
    NotFound,
    SourceChanged,
    TransferError,
    Unauthorized,
)
from importer.formats import HEAD_BYTES
from importer.sources.base import CHUNK, Probe, Validators, call_with_retries
from importer.streams import peek
from ociregistry.client import (
    Access,
    Credentials,
    RegistryError,
    RegistryNotFound,
    RegistryUnauthorized,
    RegistryUnavailable,
)
from ociregistry.image import DiskStream, open_archive_disk, open_disk
from ociregistry.reference import (
    OCI_ARCHIVE_PREFIX,
    ImageReference,
    parse_archive_url,
    parse_docker_url,
)
from ociregistry.reference import ReferenceError as BadReference
from pki.bundle import dir_bundle
from vocab import sources


def translated(err: RegistryError) -> ImporterError:
    """The importer's error for a registry failure (its kind decides the retry)."""
    text = str(err)
    if isinstance(err, RegistryUnauthorized):
        return Unauthorized(text, cause=err)
    if isinstance(err, RegistryNotFound):
        return NotFound(text, cause=err)
    if isinstance(err, RegistryUnavailable):
        return TransferError(text, cause=err)
    return InvalidImage(f"Failed to read registry image: {text}", cause=err)


class MountedDisk:
    """``pullMethod: node``: the disk file of the image the node mounted (an image volume),
    read at random (the convert route streams a qcow2 through NBD, no scratch)."""

    def __init__(self, image_dir: Path) -> None:
        disk_dir = image_dir / "disk"
        try:
            names = sorted(p.name for p in disk_dir.iterdir()
                           if p.is_file() and not p.is_symlink())
        except FileNotFoundError:
            raise InvalidImage(f"{image_dir}: the image has no /disk directory") from None
        if not names:
            raise InvalidImage("Failed to find VM disk image file in the container image")
        self.path = disk_dir / names[0]
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        st = os.fstat(self._fd)
        self._size = st.st_size
        self._validators = Validators(etag=f"{st.st_ino}:{st.st_mtime_ns}")

    def probe(self) -> Probe:
        return Probe(size=self._size, ranged=True, head=self.read_range(0, HEAD_BYTES),
                     validators=self._validators)

    def read_range(self, start: int, length: int) -> bytes:
        return os.pread(self._fd, max(0, min(length, self._size - start)), start)

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        while offset < self._size:
            chunk = self.read_range(offset, CHUNK)
            if not chunk:
                return
            offset += len(chunk)
            yield chunk

    def fork(self) -> MountedDisk:
        return self  # pread: safe from any thread

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def check_url(url: str, *, field_name: str) -> None:
    """A ``docker://`` reference (with a registry host) or an ``oci-archive://`` path."""
    try:
        if urlsplit(url).scheme == "oci-archive":
            parse_archive_url(url)
            return
        require_host(url, field_name=field_name)
        parse_docker_url(url)
    except BadReference as err:
        raise ConfigError(f"{field_name}: {err}") from None


def check_config(config: ImporterConfig) -> None:
    existing_dir(config.option(sources.REGISTRY_IMAGE_DIR) or "", sources.REGISTRY_IMAGE_DIR)


def open_source(config: ImporterConfig) -> RegistrySource | MountedDisk:
    """The registry source: the node's mounted image (``pullMethod: node``), else the
    registry itself."""
    mounted = config.option(sources.REGISTRY_IMAGE_DIR)
    if mounted is not None:
        return MountedDisk(Path(mounted))
    return RegistrySource(config)


class RegistrySource:
    """The disk file of one image, read in order (no random access into a layer)."""

    def __init__(self, config: ImporterConfig) -> None:
        self.config = config
        self.archive = config.endpoint.startswith(OCI_ARCHIVE_PREFIX)
        """``oci-archive:PATH[:NAME]``: an OCI layout in a tar file on this machine."""
        self.ref = (ImageReference("oci-archive", "local", "latest", None) if self.archive
                    else parse_docker_url(config.endpoint))
        self._stack = contextlib.ExitStack()
        bundle: tempfile._TemporaryFileWrapper[bytes] | None = None
        if config.cert_dir is not None and not config.insecure_tls:
            bundle = self._stack.enter_context(dir_bundle(config.cert_dir))
        credentials = None
        if config.access_key_id and config.secret_key:
            credentials = Credentials(config.access_key_id, config.secret_key)
        self.access = Access(credentials=credentials, ca_file=bundle.name if bundle else None,
                             insecure=config.insecure_tls, timeout=config.read_timeout)
        self._pinned = self.ref
        self._pending: Iterator[bytes] | None = None
        self._image_digest: str | None = None

    def probe(self) -> Probe:
        disk = call_with_retries(self.config, f"reading {self.ref}", lambda: self._open(self.ref))
        self._image_digest = disk.image_digest
        self._pinned = replace(self.ref, tag=None, digest=disk.image_digest)
        head, self._pending = peek(self._chunks(disk), HEAD_BYTES)
        return Probe(size=disk.size, ranged=False, head=head,
                     validators=Validators(etag=disk.image_digest))

    def _open(self, ref: ImageReference) -> DiskStream:
        """Open the disk of ``ref`` (kept open until :meth:`close`)."""
        architecture = self.config.option(sources.REGISTRY_ARCHITECTURE)
        try:
            if self.archive:
                return self._stack.enter_context(open_archive_disk(
                    self.config.endpoint, architecture=architecture))
            return self._stack.enter_context(open_disk(
                ref, self.access, architecture=architecture))
        except RegistryError as err:
            raise translated(err) from err

    def _chunks(self, disk: DiskStream) -> Iterator[bytes]:
        try:
            yield from disk.chunks()
        except RegistryError as err:
            raise translated(err) from err

    def read_range(self, start: int, length: int) -> bytes:
        raise TransferError("a registry layer is read in order; no ranges")

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        if offset == 0 and self._pending is not None:
            chunks, self._pending = self._pending, None
            yield from chunks
            return
        # A resumed read: the pinned manifest again (the tag may have moved since).
        disk = self._open(self._pinned)
        if disk.image_digest != self._image_digest:
            raise SourceChanged(f"{self.ref}: image {disk.image_digest} is not the"
                                f" {self._image_digest} probed")
        skip = offset
        for chunk in self._chunks(disk):
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            yield chunk[skip:]
            skip = 0

    def fork(self) -> RegistrySource:
        return self

    def close(self) -> None:
        self._pending = None
        self._stack.close()
