"""A VolumeImportSource read into what the importer pod needs (pure).

``spec.source`` names exactly one kind. The importer runs http, s3, registry and blank;
upstream's other kinds (gcs, imageio, vddk) are refused with a message naming the field,
so the import fails at once instead of starting a pod that cannot work. Errors name the
field as ``spec.source.<kind>.<field>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from populators.errors import SourceError
from vocab import cdi as api
from vocab import sources

SUPPORTED = sources.IMPORTED
UPSTREAM_ONLY = ("gcs", "imageio", "vddk")


@dataclass(frozen=True)
class ImportSource:
    kind: str
    """http, s3, registry or blank (the importer's IMPORTER_SOURCE)."""
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
    pull_method: str = ""
    """registry: ``pod`` or ``node`` (both pulled by the importer pod here)."""
    architecture: str = ""
    """registry: ``platform.architecture``."""


def parse(obj: Mapping[str, Any]) -> ImportSource:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    source: Mapping[str, Any] = spec.get("source") or {}
    kinds = [k for k, v in source.items() if v is not None]
    if not kinds:
        raise SourceError("spec.source: one source kind is required (http, s3, registry or"
                          " blank)")
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
    if kind == sources.REGISTRY:
        return _registry(body, content_type=content_type, preallocation=preallocation)
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


def _registry(body: Mapping[str, Any], *, content_type: str,
              preallocation: bool) -> ImportSource:
    """``spec.source.registry``: a ``docker://`` url (ImageStreams are OpenShift's; an
    ``oci-archive://`` path would name a file inside the importer pod)."""
    where = "spec.source.registry"
    if body.get("imageStream"):
        raise SourceError(f"{where}.imageStream: ImageStreams are an OpenShift API that"
                          " rootdisk does not serve; give a docker:// url")
    url = body.get("url")
    if not isinstance(url, str) or not url.startswith("docker://"):
        raise SourceError(f"{where}.url: a docker:// image reference is required"
                          f" (got {url!r})")
    method = body.get("pullMethod") or "pod"
    if method not in ("pod", "node"):
        raise SourceError(f"{where}.pullMethod: {method!r} is not pod or node")
    platform = body.get("platform") or {}
    architecture = platform.get("architecture") if isinstance(platform, Mapping) else None
    if architecture is not None and not isinstance(architecture, str):
        raise SourceError(f"{where}.platform.architecture: must be a string")
    return ImportSource(kind=sources.REGISTRY, url=url,
                        secret=_name(body, "secretRef", sources.REGISTRY),
                        cert_configmap=_name(body, "certConfigMap", sources.REGISTRY),
                        content_type=content_type, preallocation=preallocation,
                        pull_method=method, architecture=architecture or "")


def registry_host(url: str) -> str:
    """``host[:port]`` of a ``docker://`` url: what CDIConfig ``insecureRegistries`` lists
    (upstream compares the URL's host, port included, exactly)."""
    return urlsplit(url).netloc


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
    if src.pull_method:
        ann[api.REGISTRY_IMPORT_METHOD] = src.pull_method
    if src.architecture:
        ann[api.REGISTRY_IMAGE_ARCHITECTURE] = src.architecture
    # Extra headers are not copied (upstream does): they often carry tokens, and PVCs
    # are readable by more people than the VolumeImportSource.
    return ann
