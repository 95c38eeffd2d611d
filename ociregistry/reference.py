"""Parsing ``docker://host[:port]/repo[:tag|@digest]`` references (pure, no I/O).

As containers/image's docker reference (used by CDI): a first path component that holds
no ``.`` or ``:`` and is not ``localhost`` is a Docker Hub repository (``docker.io``,
``library/`` added for a single component); a missing tag is ``latest``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_SCHEME = "docker://"
OCI_ARCHIVE_SCHEME = "oci-archive://"
OCI_ARCHIVE_PREFIX = "oci-archive:"
DOCKER_HUB = "docker.io"
DOCKER_HUB_API_HOST = "registry-1.docker.io"

_REPO_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReferenceError(ValueError):
    """The reference cannot be parsed; the message names what is wrong."""


@dataclass(frozen=True)
class ImageReference:
    """One image: registry host (``host[:port]``), repository, and a tag or a digest."""

    host: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        """The host to talk the registry API to (Docker Hub's differs from its name)."""
        return DOCKER_HUB_API_HOST if self.host == DOCKER_HUB else self.host

    @property
    def alias(self) -> str:
        """What to ask ``/v2/<repo>/manifests/<alias>`` for: the digest, else the tag."""
        if self.digest is not None:
            return self.digest
        assert self.tag is not None
        return self.tag

    def __str__(self) -> str:
        suffix = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self.host}/{self.repository}{suffix}"


def parse_docker_url(url: str) -> ImageReference:
    """Parse ``docker://…`` (the scheme is required)."""
    if not url.startswith(DOCKER_SCHEME):
        raise ReferenceError(f"not a {DOCKER_SCHEME} reference: {url!r}")
    return parse_reference(url[len(DOCKER_SCHEME) :])


def parse_reference(ref: str) -> ImageReference:
    """Parse ``host[:port]/repo[:tag|@digest]`` (the part after ``docker://``)."""
    if not ref or any(c.isspace() for c in ref):
        raise ReferenceError(f"invalid image reference {ref!r}")
    digest: str | None = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
        if not _DIGEST.match(digest):
            raise ReferenceError(f"invalid digest {digest!r} (want sha256:<64 hex digits>)")
    tag: str | None = None
    last_slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > last_slash:
        ref, tag = ref[:colon], ref[colon + 1 :]
        if not _TAG.match(tag):
            raise ReferenceError(f"invalid tag {tag!r}")
    parts = ref.split("/")
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
        host, repo_parts = first, parts[1:]
    else:
        host, repo_parts = DOCKER_HUB, parts
        if len(repo_parts) == 1:
            repo_parts = ["library", *repo_parts]
    for part in repo_parts:
        if not _REPO_COMPONENT.match(part):
            raise ReferenceError(f"invalid repository name component {part!r} in {ref!r}")
    if digest is None and tag is None:
        tag = "latest"
    return ImageReference(host=host, repository="/".join(repo_parts), tag=tag, digest=digest)


def parse_archive_url(url: str) -> tuple[str, str | None]:
    """``oci-archive:PATH[:NAME]`` (also ``oci-archive://PATH``) → (PATH, NAME)."""
    rest = url.removeprefix(OCI_ARCHIVE_PREFIX)
    rest = rest.removeprefix("//")
    path, sep, name = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
    if not path.startswith("/"):
        raise ReferenceError(f"{url!r}: an oci-archive reference needs an absolute path")
    return path, (name or None) if sep else None
