"""DataVolume sources: the kinds upstream CDI names, which of them rootdisk imports, the URL
schemes the importer reads for each, and the checksum algorithms — one table for the
webhook (cdi.validate), the DataVolume controller (cdi.render), the import populator and
the importer."""

from __future__ import annotations

from typing import Final

HTTP: Final = "http"
S3: Final = "s3"
GCS: Final = "gcs"
REGISTRY: Final = "registry"
IMAGEIO: Final = "imageio"
VDDK: Final = "vddk"
BLANK: Final = "blank"
PVC: Final = "pvc"
SNAPSHOT: Final = "snapshot"
UPLOAD: Final = "upload"

IMPORT_KINDS: Final = (HTTP, S3, GCS, REGISTRY, IMAGEIO, VDDK, BLANK)
"""Upstream's sources an importer pod serves."""
CLONE_KINDS: Final = (PVC, SNAPSHOT)
ALL_KINDS: Final = (*IMPORT_KINDS, *CLONE_KINDS, UPLOAD)

IMPORTED: Final = (HTTP, S3, REGISTRY, BLANK)
"""The import sources rootdisk's importer imports (the others are refused, named)."""

TYPE_NAMES: Final = {HTTP: "HTTP", S3: "S3", GCS: "GCS", REGISTRY: "Registry",
                     IMAGEIO: "Imageio", VDDK: "VDDK"}
"""Upstream's spelling of a source in its field paths (``spec.source.HTTP.url``)."""

URL_SCHEMES: Final = {HTTP: ("http", "https"), S3: ("http", "https", "s3"),
                      REGISTRY: ("docker", "oci-archive")}
"""The schemes the importer reads for a URL source (``s3://`` only from the command line:
the DataVolume webhook refuses it, as upstream's)."""

CHECKSUM_DIGEST_LENGTHS: Final = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
"""``algorithm:hex`` checksums (upstream's ``checksum.ParseAndValidate``): hex digits."""
