"""The disk inside a container-disk image: find ``disk/<file>`` in the layers and stream it.

As CDI's registry importer reads a containerDisk: the manifest named by the reference
(for an index, the entry for the wanted platform), then each layer in order, bottom
first, until one holds a regular file under ``disk/`` (a layer that is not a tar is
skipped, as upstream's). Unlike upstream, nothing is unpacked to scratch here: the
member's bytes stream straight out of the (decompressed) layer, and the rest of the
layer blob is read after them so that its sha256 is checked before the stream ends —
a tampered layer fails the import instead of landing on the disk.

Every read is bounded: a blob may not run past the size its descriptor declares.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import lzma
import platform as host_platform
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Protocol, cast

import requests
import zstandard
from dxf import DXF
from dxf import exceptions as dxf_errors

from ociregistry.client import (
    INDEX_TYPES,
    Access,
    Manifest,
    RegistryError,
    RegistryUnavailable,
    classify,
    connect,
    get_manifest,
)
from ociregistry.reference import (
    ImageReference,
    ReferenceError,
    parse_archive_url,
)

logger = logging.getLogger(__name__)

DISK_PREFIX = "disk/"
CHUNK = 1024 * 1024
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""An image config is a few KiB; one this large is not a config."""
WHITEOUT_PREFIX = ".wh."
BOOTC_LABELS = ("containers.bootc", "ostree.bootable")
BOOTC_REFUSED = ("bootc image detected: this image contains an ostree-based bootable OS"
                 " (containers.bootc=1 or ostree.bootable=1) and cannot be imported as a"
                 " regular container disk; bootc-to-disk conversion is not yet implemented")
"""CDI's ErrBootcImageDetected, word for word."""
NOT_FOUND = "Failed to find VM disk image file in the container image"
"""CDI's error when no layer holds a file under ``disk/``, word for word."""

_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
           "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def host_architecture() -> str:
    """This machine's architecture as Go (and so OCI platforms) spell it."""
    machine = host_platform.machine().lower()
    return _GOARCH.get(machine, machine)


@dataclass(frozen=True)
class Platform:
    os: str = "linux"
    architecture: str = ""
    variant: str = ""


def choose_manifest(index: Mapping[str, Any], wanted: Platform) -> Mapping[str, Any]:
    """The index entry for ``wanted`` (pure). containers/image's choice: os and
    architecture must match; a wanted variant must match; else the first match."""
    entries = index.get("manifests")
    if not isinstance(entries, list):
        raise RegistryError("image index has no manifests list")
    for entry in entries:
        plat = entry.get("platform") or {} if isinstance(entry, Mapping) else {}
        if plat.get("os") == wanted.os and plat.get("architecture") == wanted.architecture \
                and (not wanted.variant or plat.get("variant", "") == wanted.variant):
            return entry  # type: ignore[no-any-return]
    raise RegistryError(f"no image found in image index for architecture"
                        f" {wanted.architecture!r}, variant {wanted.variant!r},"
                        f" OS {wanted.os!r}")


def is_disk_member(member: tarfile.TarInfo, prefix: str = DISK_PREFIX) -> bool:
    """Upstream's test: under ``prefix`` (or ``./prefix``), not a whiteout, not a dir."""
    name = member.name
    under = name.startswith(prefix) or name.startswith("./" + prefix)
    whiteout = name.rsplit("/", 1)[-1].startswith(WHITEOUT_PREFIX)
    return under and not whiteout and not member.isdir()


class _BlobReader(io.RawIOBase):
    """A blob's chunks as a file, never past the descriptor's ``size``; the digest (which
    python-dxf checks when its iterator ends) is checked by :meth:`drain`."""

    def __init__(self, chunks: Iterable[bytes], digest: str, size: int) -> None:
        self._chunks = iter(chunks)
        self._digest = digest
        self._size = size
        self._pending = b""
        self._done = False
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending and not self._done:
            self._pending = self._next()
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _next(self) -> bytes:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._done = True
            if self.read_bytes != self._size:
                raise RegistryError(f"blob {self._digest}: {self.read_bytes} bytes, the"
                                    f" manifest says {self._size}") from None
            return b""
        except dxf_errors.DXFDigestMismatchError as e:
            self._done = True
            raise RegistryError(f"Digest did not match, expected {self._digest},"
                                f" got {e.args[0] if e.args else 'another'}") from e
        except requests.exceptions.RequestException as e:
            raise RegistryUnavailable(f"reading blob {self._digest}: {e}") from e
        self.read_bytes += len(chunk)
        if self.read_bytes > self._size:
            raise RegistryError(f"blob {self._digest}: more bytes than the {self._size}"
                                " its descriptor declares")
        return chunk

    def drain(self) -> None:
        """Read to the end (checking the size and the digest)."""
        self._pending = b""
        while not self._done:
            self._next()


def _decompressed(raw: _BlobReader) -> IO[bytes]:
    """The layer's tar stream, decompressed by its magic (as upstream's format readers:
    the media type is not trusted to say)."""
    buffered = io.BufferedReader(raw, CHUNK)
    magic = buffered.peek(6)[:6]
    if magic.startswith(b"\x1f\x8b"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=buffered, mode="rb"))
    if magic.startswith(b"\x28\xb5\x2f\xfd"):
        reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(
            buffered, read_across_frames=True)
        return reader
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(buffered)
    return buffered


@dataclass
class DiskStream:
    """The disk file found in an image, open for reading once."""

    name: str
    """Its path in the layer (``disk/fedora.qcow2``)."""
    size: int
    image_digest: str
    """The digest of the image manifest read (for an index: the platform's entry)."""
    reference_digest: str
    """The digest of what the reference named (the index's, for a manifest list): what a
    DataImportCron compares between polls."""
    layer_digest: str
    _member: IO[bytes]
    _raw: _BlobReader

    def chunks(self, chunk_size: int = CHUNK) -> Iterator[bytes]:
        """The file's bytes; then the rest of its layer is read and its digest checked
        before the iterator ends (``RegistryError`` on a mismatch)."""
        left = self.size
        while left > 0:
            chunk = self._member.read(min(chunk_size, left))
            if not chunk:
                raise RegistryError(f"layer {self.layer_digest} ends inside {self.name}")
            left -= len(chunk)
            yield chunk
        self._raw.drain()


class Store(Protocol):
    """Where an image's manifests and blobs come from: a registry, or an OCI archive."""

    name: str

    def manifest(self, alias: str | None = None) -> Manifest:
        """What the reference names (None), or the manifest of digest ``alias``."""
        ...

    def blob(self, digest: str) -> Iterable[bytes]:
        """The blob's bytes; its sha256 is checked when the iterator ends."""
        ...


class RegistryStore:
    """A registry's, through python-dxf (which checks each blob's digest)."""

    def __init__(self, dxf: DXF, ref: ImageReference) -> None:
        self.dxf, self.ref, self.name = dxf, ref, str(ref)

    def manifest(self, alias: str | None = None) -> Manifest:
        return get_manifest(self.dxf, self.ref, alias=alias)

    def blob(self, digest: str) -> Iterable[bytes]:
        try:
            chunks: Iterable[bytes] = self.dxf.pull_blob(  # type: ignore[assignment]
                digest, chunk_size=CHUNK)
        except (requests.exceptions.RequestException, dxf_errors.DXFError) as e:
            raise classify(self.ref, e) from e
        return chunks


def _config(store: Store, manifest: Manifest) -> Mapping[str, Any]:
    descriptor = manifest.body.get("config") or {}
    digest, size = descriptor.get("digest"), descriptor.get("size")
    if not isinstance(digest, str) or not isinstance(size, int) or size > MAX_CONFIG_BYTES:
        raise RegistryError(f"{store.name}: manifest {manifest.digest} has no usable config")
    raw = _BlobReader(store.blob(digest), digest, size)
    body = raw.read(size + 1)
    raw.drain()
    try:
        config = json.loads(body)
    except ValueError as e:
        raise RegistryError(f"{store.name}: image config is not JSON: {e}") from e
    if not isinstance(config, Mapping):
        raise RegistryError(f"{store.name}: image config is not a JSON object")
    return config


def _check_config(config: Mapping[str, Any], architecture: str | None) -> None:
    labels = (config.get("config") or {}).get("Labels") or {}
    if any(labels.get(label) == "1" for label in BOOTC_LABELS):
        raise RegistryError(BOOTC_REFUSED)
    if architecture and config.get("architecture") != architecture:
        raise RegistryError(
            f'Error validating architecture: manifest image architecture:'
            f' "{config.get("architecture", "")}" doesn\'t match requested architecture:'
            f' "{architecture}"')


def _layers(manifest: Manifest) -> list[tuple[str, int]]:
    layers = manifest.body.get("layers")
    if not isinstance(layers, list) or not layers:
        raise RegistryError(f"manifest {manifest.digest} lists no layers")
    out = []
    for layer in layers:
        digest = layer.get("digest") if isinstance(layer, Mapping) else None
        size = layer.get("size") if isinstance(layer, Mapping) else None
        if not isinstance(digest, str) or not isinstance(size, int) or size < 0:
            raise RegistryError(f"manifest {manifest.digest}: a layer without digest and size")
        out.append((digest, size))
    return out


@contextlib.contextmanager
def open_disk(ref: ImageReference, access: Access, *, architecture: str | None = None,
              prefix: str = DISK_PREFIX) -> Iterator[DiskStream]:
    """Find the first regular file under ``prefix`` in ``ref``'s layers and open it.

    ``architecture`` (CDI's ``platform.architecture``) picks the index entry and must
    match the image's config; None: this machine's, for an index, and no check for a
    single image (as upstream).
    """
    try:
        client = connect(ref, access)
    except requests.exceptions.RequestException as e:
        raise classify(ref, e) from e
    with client as dxf:
        yield from _open_disk(RegistryStore(dxf, ref), architecture, prefix)


def _image_manifest(store: Store, architecture: str | None) -> tuple[Manifest, Manifest]:
    """(what the reference names, the image manifest for the platform)."""
    top = store.manifest()
    manifest = top
    if top.media_type in INDEX_TYPES or "manifests" in top.body:
        entry = choose_manifest(top.body, Platform(
            architecture=architecture or host_architecture()))
        manifest = store.manifest(str(entry.get("digest")))
    _check_config(_config(store, manifest), architecture)
    return top, manifest


def _open_disk(store: Store, architecture: str | None, prefix: str) -> Iterator[DiskStream]:
    top, manifest = _image_manifest(store, architecture)
    for digest, size in _layers(manifest):
        raw = _BlobReader(store.blob(digest), digest, size)
        with contextlib.ExitStack() as stack:
            found = _find_member(raw, digest, prefix, stack)
            if found is None:
                continue
            member, info = found
            logger.info("file %s (%d bytes) found in layer %s", info.name, info.size, digest)
            yield DiskStream(name=info.name, size=info.size, image_digest=manifest.digest,
                             reference_digest=top.digest, layer_digest=digest,
                             _member=member, _raw=raw)
            return
    raise RegistryError(NOT_FOUND)


def _find_member(raw: _BlobReader, digest: str, prefix: str, stack: contextlib.ExitStack,
                 ) -> tuple[IO[bytes], tarfile.TarInfo] | None:
    """The first disk member of one layer, or None (a layer read to its end, its digest
    checked; one that is not a tar is skipped, as upstream's importer skips it)."""
    try:
        stream = stack.enter_context(_decompressed(raw))
        tar = stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))  # noqa: SIM115
        for info in tar:
            if not is_disk_member(info, prefix):
                continue
            if not info.isreg():
                raise RegistryError(f"{info.name} in layer {digest} is not a regular file")
            member = tar.extractfile(info)
            assert member is not None  # a regular file always has a reader
            return member, info
    except (tarfile.TarError, OSError, EOFError, zstandard.ZstdError, lzma.LZMAError) as e:
        logger.warning("skipping layer %s: not a readable tar (%s)", digest, e)
        return None
    raw.drain()
    return None


def _keep_owner(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, keeping the owner as the image says (numeric ids):
    container runtimes do, and a container disk's file is 107:107 0440 for the
    launcher's user to read. The filter has already dropped set-id bits and anything
    leading out of ``dest``, so an owner is all that is kept."""
    safe = tarfile.data_filter(member, dest)
    if safe is None:
        return None
    return safe.replace(uid=member.uid, gid=member.gid, uname="", gname="", deep=False)


class Unsupported(RegistryError):
    """The image uses what this unpacker does not do (whiteouts)."""


def pull_and_unpack(ref: ImageReference, access: Access, dest: str, *,
                    architecture: str | None = None) -> str:
    """Unpack every layer of ``ref``, bottom first, into the new directory ``dest``;
    returns the image manifest's digest.

    Each member goes through tarfile's ``data`` filter (no absolute or ``..`` paths, no
    links out of ``dest``, no devices, no set-id bits), its numeric owner kept; each
    layer is read to its end and its digest checked. Whiteout entries (a layer deleting a
    lower one's file) are refused: a container disk has one layer and never needs them.
    """
    try:
        client = connect(ref, access)
    except requests.exceptions.RequestException as e:
        raise classify(ref, e) from e
    with client as dxf:
        store = RegistryStore(dxf, ref)
        _, manifest = _image_manifest(store, architecture)
        for digest, size in _layers(manifest):
            raw = _BlobReader(store.blob(digest), digest, size)
            try:
                with _decompressed(raw) as stream, \
                        tarfile.open(fileobj=stream, mode="r|") as tar:
                    for info in tar:
                        if info.name.rsplit("/", 1)[-1].startswith(WHITEOUT_PREFIX):
                            raise Unsupported(f"layer {digest} has a whiteout entry"
                                              f" ({info.name}): not supported")
                        tar.extract(info, dest, filter=_keep_owner, numeric_owner=True)
            except (tarfile.TarError, EOFError, zstandard.ZstdError, lzma.LZMAError) as e:
                raise RegistryError(f"layer {digest} is not a readable tar: {e}") from e
            raw.drain()
    return manifest.digest


# -- OCI archives (``oci-archive:PATH[:REF]``) ----------------------------------------------

class ArchiveStore:
    """An OCI image layout in a tar file (containers/image's ``oci-archive`` transport):
    ``index.json`` names the manifests, ``blobs/sha256/<hex>`` holds every blob; each
    read is checked against its digest."""

    def __init__(self, path: str, ref_name: str | None) -> None:
        self.name = f"oci-archive:{path}"
        self.ref_name = ref_name
        try:
            self.tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by close()
        except (OSError, tarfile.TarError) as e:
            raise RegistryError(f"{self.name}: {e}") from e

    def close(self) -> None:
        self.tar.close()

    def _read(self, member: str, limit: int) -> bytes:
        try:
            handle = self.tar.extractfile(member.removeprefix("./"))
        except KeyError:
            handle = None
        if handle is None:
            raise RegistryError(f"{self.name}: no {member} in the archive")
        with handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise RegistryError(f"{self.name}: {member} is too large")
        return data

    def manifest(self, alias: str | None = None) -> Manifest:
        if alias is None:
            index = json.loads(self._read("index.json", MAX_CONFIG_BYTES))
            entries = [e for e in index.get("manifests") or [] if isinstance(e, Mapping)]
            if self.ref_name is not None:
                entries = [e for e in entries if (e.get("annotations") or {}).get(
                    "org.opencontainers.image.ref.name") == self.ref_name]
            if not entries:
                raise RegistryError(f"{self.name}: no image"
                                    f"{' ' + repr(self.ref_name) if self.ref_name else ''}"
                                    " in index.json")
            if len(entries) > 1 and self.ref_name is None:
                raise RegistryError(f"{self.name}: index.json names {len(entries)} images;"
                                    " name one (oci-archive:PATH:NAME)")
            alias = str(entries[0].get("digest"))
        body = b"".join(self.blob(alias, limit=MAX_CONFIG_BYTES))
        try:
            parsed = json.loads(body)
        except ValueError as e:
            raise RegistryError(f"{self.name}: manifest {alias} is not JSON: {e}") from e
        media_type = parsed.get("mediaType") or ""
        return Manifest(digest=alias, media_type=media_type, body=parsed)

    def blob(self, digest: str, limit: int | None = None) -> Iterator[bytes]:
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64 or not all(
                c in "0123456789abcdef" for c in hexdigest):
            raise RegistryError(f"{self.name}: unsupported digest {digest!r}")
        try:
            handle = self.tar.extractfile(f"blobs/sha256/{hexdigest}")
        except KeyError:
            handle = None
        if handle is None:
            raise RegistryError(f"{self.name}: blob {digest} is not in the archive")
        hasher = hashlib.sha256()
        read = 0
        with handle:
            while chunk := handle.read(CHUNK):
                read += len(chunk)
                if limit is not None and read > limit:
                    raise RegistryError(f"{self.name}: blob {digest} is too large")
                hasher.update(chunk)
                yield chunk
        if "sha256:" + hasher.hexdigest() != digest:
            raise RegistryError(f"Digest did not match, expected {digest},"
                                f" got sha256:{hasher.hexdigest()}")


@contextlib.contextmanager
def open_archive_disk(url: str, *, architecture: str | None = None,
                      prefix: str = DISK_PREFIX) -> Iterator[DiskStream]:
    """:func:`open_disk` for an OCI archive on this machine."""
    try:
        path, name = parse_archive_url(url)
    except ReferenceError as e:
        raise RegistryError(str(e)) from e
    store = ArchiveStore(path, name)
    try:
        yield from _open_disk(store, architecture, prefix)
    finally:
        store.close()
