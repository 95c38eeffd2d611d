"""A CA bundle file: the system roots (certifi's) plus the PEMs a user gave (a
certConfigMap, a cert dir, a node's certs.d), for clients that take one file to verify
with. The file is private (0600) and goes when it is closed."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import certifi


def open_bundle(pems: Iterable[bytes]) -> tempfile._TemporaryFileWrapper[bytes]:
    """A temporary file holding the system roots and ``pems``; close it (or use it as a
    context manager) when done."""
    bundle = tempfile.NamedTemporaryFile(prefix="ca-bundle-", suffix=".pem")  # noqa: SIM115
    bundle.write(Path(certifi.where()).read_bytes())
    for pem in pems:
        bundle.write(b"\n" + pem)
    bundle.flush()
    return bundle


def dir_bundle(cert_dir: Path) -> tempfile._TemporaryFileWrapper[bytes]:
    """The system roots plus every PEM file of ``cert_dir`` (a mounted certConfigMap),
    as one bundle file."""
    return open_bundle(path.read_bytes() for path in sorted(cert_dir.iterdir())
                       if path.is_file() and not path.name.startswith("."))
