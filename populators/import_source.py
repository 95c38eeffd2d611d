"""A VolumeImportSource read into what the importer pod needs (pure).

``spec.source`` names exactly one kind. The importer runs the kinds declared in
``vocab.sources.DECLARATIONS`` and this module reads each from its declaration (its
shared fields, its options); upstream's other kinds (gcs, imageio, vddk) are refused with
a message naming the field, so the import fails at once instead of starting a pod that
cannot work. Errors name the field as ``spec.source.<kind>.<field>``.
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
UPSTREAM_ONLY = tuple(k for k in sources.IMPORT_KINDS if k not in SUPPORTED)


@dataclass(frozen=True)
class ImportSource:
    kind: str
    """A kind of ``vocab.sources.DECLARATIONS`` (the importer's IMPORTER_SOURCE)."""
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
    options: tuple[tuple[str, str], ...] = ()
    """The declared options read from the spec (field, value), in declared order."""

    @property
    def declaration(self) -> sources.Declaration:
        return sources.DECLARATIONS[self.kind]

    def option(self, field: str) -> str:
        return dict(self.options).get(field, "")


def parse(obj: Mapping[str, Any]) -> ImportSource:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    source: Mapping[str, Any] = spec.get("source") or {}
    kinds = [k for k, v in source.items() if v is not None]
    if not kinds:
        raise SourceError("spec.source: one source kind is required"
                          f" ({', '.join(SUPPORTED[:-1])} or {SUPPORTED[-1]})")
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
    declared = sources.DECLARATIONS[kind]
    where = f"spec.source.{kind}"
    for field, reason in declared.refused:
        if body.get(field):
            raise SourceError(f"{where}.{field}: {reason}")
    fields = declared.fields
    url = _url(body, declared, where) if sources.URL in fields else ""
    headers = _headers(body, where) if sources.EXTRA_HEADERS in fields else []
    secret_headers = (_secret_headers(body, where) if sources.SECRET_EXTRA_HEADERS in fields
                      else [])
    options = tuple((o.field, _option(body, o, where)) for o in declared.options if o.field)
    checksum = body.get(sources.CHECKSUM) if sources.CHECKSUM in fields else None
    return ImportSource(
        kind=kind,
        url=url,
        secret=_name(body, sources.SECRET_REF, kind) if sources.SECRET_REF in fields else None,
        cert_configmap=(_name(body, sources.CERT_CONFIGMAP, kind)
                        if sources.CERT_CONFIGMAP in fields else None),
        checksum=str(checksum) if checksum else None,
        extra_headers=tuple(headers),
        secret_extra_headers=tuple(secret_headers),
        insecure_tls=bool(body.get(sources.INSECURE_SKIP_VERIFY))
        if sources.INSECURE_SKIP_VERIFY in fields else False,
        content_type=content_type,
        preallocation=preallocation,
        options=options,
    )


def _url(body: Mapping[str, Any], declared: sources.Declaration, where: str) -> str:
    url = body.get(sources.URL)
    if declared.spec_schemes:
        # e.g. the registry: a docker:// url (an oci-archive:// path would name a file
        # inside the importer pod)
        prefixes = tuple(f"{scheme}://" for scheme in declared.spec_schemes)
        if not isinstance(url, str) or not url.startswith(prefixes):
            raise SourceError(f"{where}.url: a {' or '.join(prefixes)} image reference is"
                              f" required (got {url!r})")
        return url
    if not isinstance(url, str) or not url:
        raise SourceError(f"{where}.url: an image URL is required")
    return url


def _headers(body: Mapping[str, Any], where: str) -> list[str]:
    headers = body.get(sources.EXTRA_HEADERS) or []
    if not isinstance(headers, list) or not all(isinstance(h, str) for h in headers):
        raise SourceError(f"{where}.extraHeaders: must be a list of strings")
    for i, header in enumerate(headers):
        name, sep, _ = header.partition(":")
        if not sep or not name.strip() or any(c in header for c in "\r\n"):
            raise SourceError(f"{where}.extraHeaders[{i}]: not a 'Name: value' "
                              "header on one line")
    return headers


def _secret_headers(body: Mapping[str, Any], where: str) -> list[str]:
    secret_headers = body.get(sources.SECRET_EXTRA_HEADERS) or []
    if not isinstance(secret_headers, list) or not all(
            isinstance(h, str) and h for h in secret_headers):
        raise SourceError(f"{where}.secretExtraHeaders: must be a list of Secret names")
    return secret_headers


def _option(body: Mapping[str, Any], option: sources.Option, where: str) -> str:
    """The option's value at its dotted path (an object missing on the way: unset)."""
    value: Any = body
    for part in option.field.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None or value == "":
        value = option.default
    if option.choices and value not in option.choices:
        raise SourceError(f"{where}.{option.field}: {value!r} is not"
                          f" {' or '.join(option.choices)}")
    if not isinstance(value, str):
        raise SourceError(f"{where}.{option.field}: must be a string")
    return value


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
        api.IMPORT_SOURCE: src.declaration.import_source or src.kind,
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
    for option in src.declaration.options:
        if option.annotation and src.option(option.field):
            ann[option.annotation] = src.option(option.field)
    # Extra headers are not copied (upstream does): they often carry tokens, and PVCs
    # are readable by more people than the VolumeImportSource.
    return ann
