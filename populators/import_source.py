"""A VolumeImportSource read into what the importer pod needs (pure).

``spec.source`` names exactly one kind. The importer runs http, s3 and blank; upstream's
other kinds (registry, gcs, imageio, vddk) are refused with a message naming the field,
so the import fails at once instead of starting a pod that cannot work. Errors name the
field as ``spec.source.<kind>.<field>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from populators.errors import SourceError
from vocab import cdi as api
from vocab import sources

SUPPORTED = sources.IMPORTED
UPSTREAM_ONLY = ("registry", "gcs", "imageio", "vddk")


@dataclass(frozen=True)
class ImportSource:
    kind: str
    """http, s3 or blank (the importer's IMPORTER_SOURCE)."""
    url: str = ""
    secret: str | None = None
    cert_configmap: str | None = None
    checksum: str | None = None
    extra_headers: tuple[str, ...] = ()
    secret_extra_headers: tuple[str, ...] = ()
    """Secrets each holding headers (one per key); mounted into the pod, never in env."""
    insecure_tls: bool = False
    content_type: str = "kubevirt"
    preallocation: bool = False


def parse(obj: Mapping[str, Any]) -> ImportSource:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    source: Mapping[str, Any] = spec.get("source") or {}
    kinds = [k for k, v in source.items() if v is not None]
    if not kinds:
        raise SourceError("spec.source: one source kind is required (http, s3 or blank)")
    if len(kinds) > 1:
        raise SourceError(f"spec.source: exactly one source kind allowed, got {sorted(kinds)}")
    kind = kinds[0]
    if kind in UPSTREAM_ONLY:
        raise SourceError(f"spec.source.{kind}: not supported by rootdisk's importer "
                          f"(supported: {', '.join(SUPPORTED)})")
    if kind not in SUPPORTED:
        raise SourceError(f"spec.source.{kind}: unknown source kind")
    content_type = spec.get("contentType") or "kubevirt"
    if content_type not in ("kubevirt", "archive"):
        raise SourceError(f"spec.contentType: {content_type!r} is not kubevirt or archive")
    preallocation = bool(spec.get("preallocation"))
    body: Mapping[str, Any] = source[kind] or {}
    if kind == "blank":
        return ImportSource(kind="blank", content_type=content_type,
                            preallocation=preallocation)
    url = body.get("url")
    if not isinstance(url, str) or not url:
        raise SourceError(f"spec.source.{kind}.url: an image URL is required")
    headers = body.get("extraHeaders") or []
    if not isinstance(headers, list) or not all(isinstance(h, str) for h in headers):
        raise SourceError(f"spec.source.{kind}.extraHeaders: must be a list of strings")
    for i, header in enumerate(headers):
        name, sep, _ = header.partition(":")
        if not sep or not name.strip() or any(c in header for c in "\r\n"):
            raise SourceError(f"spec.source.{kind}.extraHeaders[{i}]: not a 'Name: value' "
                              "header on one line")
    secret_headers = body.get("secretExtraHeaders") or []
    if not isinstance(secret_headers, list) or not all(
            isinstance(h, str) and h for h in secret_headers):
        raise SourceError(f"spec.source.{kind}.secretExtraHeaders: must be a list of Secret"
                          " names")
    checksum = body.get("checksum") or None
    return ImportSource(
        kind=kind,
        url=url,
        secret=_name(body, "secretRef", kind),
        cert_configmap=_name(body, "certConfigMap", kind),
        checksum=str(checksum) if checksum else None,
        extra_headers=tuple(headers),
        secret_extra_headers=tuple(secret_headers),
        insecure_tls=bool(body.get("insecureSkipVerify")),
        content_type=content_type,
        preallocation=preallocation,
    )


def _name(body: Mapping[str, Any], key: str, kind: str) -> str | None:
    value = body.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise SourceError(f"spec.source.{kind}.{key}: must be the name of an object")
    return value


def prime_annotations(src: ImportSource) -> dict[str, str]:
    """Upstream's source annotations on PVC' (what an importer pod is made from)."""
    ann = {
        api.IMPORT_SOURCE: "none" if src.kind == "blank" else src.kind,
        api.CONTENT_TYPE: src.content_type,
        api.PREALLOCATION_REQUESTED: str(src.preallocation).lower(),
    }
    if src.url:
        ann[api.IMPORT_ENDPOINT] = src.url
    if src.secret:
        ann[api.IMPORT_SECRET] = src.secret
    if src.cert_configmap:
        ann[api.IMPORT_CERT_CONFIGMAP] = src.cert_configmap
    if src.checksum:
        ann[api.IMPORT_CHECKSUM] = src.checksum
    # Extra headers are not copied (upstream does): they often carry tokens, and PVCs
    # are readable by more people than the VolumeImportSource.
    return ann
