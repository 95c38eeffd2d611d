"""DataVolume sources: the kinds upstream CDI names, which of them rootdisk imports, and
for each imported kind its declaration — the URL schemes the importer reads, the fields
of ``spec.source.<kind>`` it carries, the values beyond those and the importer variable
and PVC′ annotation each travels in. One table for the webhook (cdi.validate), the
DataVolume controller (cdi.render), the import populator (which renders the importer pod
from it) and the importer (which parses its environment from it and finds its reader by
the kind, ``importer/sources/<kind>.py``).

Adding a source: its :class:`Declaration` in :data:`DECLARATIONS` here (with the names
of its own importer variables, if it has any), its reader in
``importer/sources/<kind>.py``, and — only when its pod needs more than the shared
plumbing (volumes, CDIConfig settings) — an entry in ``populators/importer_pod.PLUMBING``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from vocab import cdi

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

TYPE_NAMES: Final = {HTTP: "HTTP", S3: "S3", GCS: "GCS", REGISTRY: "Registry",
                     IMAGEIO: "Imageio", VDDK: "VDDK"}
"""Upstream's spelling of a source in its field paths (``spec.source.HTTP.url``)."""

# -- the fields every URL source may carry (upstream's names), each with its own plumbing
URL: Final = "url"
"""→ ``IMPORTER_ENDPOINT``."""
SECRET_REF: Final = "secretRef"  # noqa: S105 - a field's name
"""→ ``IMPORTER_ACCESS_KEY_ID``/``IMPORTER_SECRET_KEY`` from the Secret (``secretKeyRef``)."""
CERT_CONFIGMAP: Final = "certConfigMap"
"""→ mounted at ``/certs``, ``IMPORTER_CERT_DIR``."""
CHECKSUM: Final = "checksum"
EXTRA_HEADERS: Final = "extraHeaders"
SECRET_EXTRA_HEADERS: Final = "secretExtraHeaders"  # noqa: S105 - a field's name
"""→ each Secret mounted at ``/extraheaders/<i>``, never in the environment."""
INSECURE_SKIP_VERIFY: Final = "insecureSkipVerify"
URL_FIELDS: Final = frozenset({URL, SECRET_REF, CERT_CONFIGMAP, CHECKSUM, EXTRA_HEADERS,
                               SECRET_EXTRA_HEADERS, INSECURE_SKIP_VERIFY})


@dataclass(frozen=True)
class Option:
    """A value of one source beyond the shared fields: where it comes from and how it
    reaches the importer. The populator reads ``field`` from ``spec.source.<kind>`` (a
    dotted path) and sets ``variable`` to it; the importer reads ``variable`` back into
    ``ImporterConfig.options``. An option without a field is set by the importer's other
    front doors (the command line) or by the source's pod plumbing. Never a secret: the
    value is written into the pod spec (credentials come from ``secretRef``)."""

    field: str = ""
    variable: str = ""
    annotation: str = ""
    """The PVC′ annotation upstream records the value under ("" none)."""
    choices: tuple[str, ...] = ()
    """The values allowed (none: any string)."""
    default: str = ""


@dataclass(frozen=True)
class Declaration:
    """What one imported source is, for every package that handles it."""

    kind: str
    schemes: tuple[str, ...] = ()
    """The URL schemes the importer reads (none: the source has no URL)."""
    spec_schemes: tuple[str, ...] = ()
    """The schemes a VolumeImportSource may give (none: any the webhook let through)."""
    fields: frozenset[str] = frozenset()
    """The shared fields (:data:`URL_FIELDS`) the source carries; others are ignored."""
    options: tuple[Option, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    """Upstream fields rootdisk refuses, with the reason given."""
    import_source: str = ""
    """The value of PVC′'s ``storage.import.source`` (default: the kind)."""


# -- the sources' own importer variables (beside the shared ones of vocab.podenv) ---------
S3_ENDPOINT: Final = "IMPORTER_S3_ENDPOINT"
"""For s3:// URLs: a custom S3 endpoint, path-style addressing (rootdisk's; the CLI's)."""
REGISTRY_ARCHITECTURE: Final = "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE"
"""A registry source's ``platform.architecture`` (upstream's name)."""
REGISTRY_IMAGE_DIR: Final = "IMPORTER_REGISTRY_IMAGE_DIR"
"""``pullMethod: node``: where the node mounted the image (an image volume); the disk is
read from there, not from the registry (rootdisk's own)."""

DECLARATIONS: Final = {d.kind: d for d in (
    Declaration(HTTP, schemes=("http", "https"), fields=URL_FIELDS),
    Declaration(S3, schemes=("http", "https", "s3"), fields=URL_FIELDS,
                options=(Option(variable=S3_ENDPOINT),)),
    Declaration(
        REGISTRY, schemes=("docker", "oci-archive"), spec_schemes=("docker",),
        fields=frozenset({URL, SECRET_REF, CERT_CONFIGMAP}),
        options=(Option("pullMethod", annotation=cdi.REGISTRY_IMPORT_METHOD,
                        choices=("pod", "node"), default="pod"),
                 Option("platform.architecture", variable=REGISTRY_ARCHITECTURE,
                        annotation=cdi.REGISTRY_IMAGE_ARCHITECTURE),
                 # set by the pod plumbing of pullMethod node (populators.importer_pod)
                 Option(variable=REGISTRY_IMAGE_DIR)),
        refused=(("imageStream", "ImageStreams are an OpenShift API that rootdisk does not"
                                 " serve; give a docker:// url"),)),
    Declaration(BLANK, import_source="none"),
)}
"""The sources rootdisk's importer imports, in the order messages list them."""

IMPORTED: Final = tuple(DECLARATIONS)
"""The import sources rootdisk's importer imports (the others are refused, named)."""

URL_SCHEMES: Final = {k: d.schemes for k, d in DECLARATIONS.items() if d.schemes}
"""The schemes the importer reads for a URL source (``s3://`` only from the command line:
the DataVolume webhook refuses it, as upstream's)."""

CHECKSUM_DIGEST_LENGTHS: Final = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
"""``algorithm:hex`` checksums (upstream's ``checksum.ParseAndValidate``): hex digits."""
