"""Admission checks for DataVolumes: what the validating webhook refuses, and why (pure).

Each problem names the field it is about, as kube-apiserver's own validation does, so a
user sees ``spec.source.http.url: ...`` rather than a generic refusal. Existence of the
Secrets and ConfigMaps a source refers to is checked against the names the caller looked
up in the DataVolume's namespace (the adapter does the lookups).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from cdi import api
from sizes import MIB, parse_bytes

_CHECKSUM_LENGTHS = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
_CHECKSUM = re.compile(r"(?P<algo>[a-z0-9]+):(?P<hex>[0-9a-fA-F]+)")
_URL_SCHEMES = {"http": ("http", "https"), "s3": ("http", "https", "s3"),
                "gcs": ("gs", "http", "https"), "imageio": ("http", "https"),
                "vddk": ("http", "https")}

Exists = Callable[[str, str], bool]
"""``exists(kind, name)`` for kind "Secret" or "ConfigMap" in the DataVolume's namespace."""


def validate_create(*, dv: Mapping[str, Any], exists: Exists) -> list[str]:
    """Problems with a new DataVolume; empty when it is acceptable."""
    spec = dv.get("spec") or {}
    problems: list[str] = []
    if spec.get("source") is not None and spec.get("sourceRef") is not None:
        problems.append("spec: Data volume should have either Source or SourceRef, not both")
    elif spec.get("source") is None and spec.get("sourceRef") is None:
        problems.append("spec.source: Data volume should have either Source or SourceRef")
    if spec.get("sourceRef") is not None:
        ref = spec["sourceRef"] or {}
        if ref.get("kind") != "DataSource":
            problems.append(f"spec.sourceRef.kind: unsupported kind {ref.get('kind')!r}"
                            " (only DataSource)")
        if not ref.get("name"):
            problems.append("spec.sourceRef.name: a DataSource name is required")
    kind = None
    if spec.get("source") is not None:
        source = spec["source"] or {}
        kinds = [k for k in api.ALL_SOURCE_KINDS if source.get(k) is not None]
        unknown = sorted(set(source) - set(api.ALL_SOURCE_KINDS))
        if unknown:
            problems.append(f"spec.source: unknown source type(s) {', '.join(unknown)}")
        if len(kinds) > 1:
            problems.append("spec.source: Data volume source contains more than one source"
                            f" type: {', '.join(kinds)}")
        elif not kinds and not unknown:
            problems.append("spec.source: Missing Data volume source")
        elif kinds:
            kind = kinds[0]
            problems += _source_problems(kind, source[kind] or {}, exists)
    problems += _storage_problems(spec, kind)
    return problems


def validate_update(*, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A DataVolume's spec cannot change once created (upstream refuses it too)."""
    if (old.get("spec") or {}) != (new.get("spec") or {}):
        return ["spec: Cannot update DataVolume spec; delete and recreate it instead"]
    return []


def _source_problems(kind: str, src: Mapping[str, Any], exists: Exists) -> list[str]:
    field = f"spec.source.{kind}"
    problems: list[str] = []
    if kind in _URL_SCHEMES:
        url = src.get("url")
        if not url or not isinstance(url, str):
            problems.append(f"{field}.url: a URL is required")
        else:
            parts = urlsplit(url)
            allowed = _URL_SCHEMES[kind]
            if parts.scheme not in allowed:
                problems.append(f"{field}.url: scheme {parts.scheme or '(none)'!r} is not"
                                f" supported; use {' or '.join(allowed)}")
            elif not parts.netloc:
                problems.append(f"{field}.url: {url!r} has no host")
    checksum = src.get("checksum")
    if checksum is not None:
        match = _CHECKSUM.fullmatch(str(checksum))
        if match is None or match["algo"] not in _CHECKSUM_LENGTHS:
            problems.append(f"{field}.checksum: {checksum!r} is not <algorithm>:<hex> with"
                            " algorithm md5, sha1, sha256 or sha512")
        elif len(match["hex"]) != _CHECKSUM_LENGTHS[match["algo"]]:
            problems.append(f"{field}.checksum: a {match['algo']} digest has"
                            f" {_CHECKSUM_LENGTHS[match['algo']]} hex digits, not"
                            f" {len(match['hex'])}")
    for key, obj_kind in (("secretRef", "Secret"), ("certConfigMap", "ConfigMap")):
        name = src.get(key)
        if name and not exists(obj_kind, name):
            problems.append(f"{field}.{key}: {obj_kind} {name!r} not found")
    for i, name in enumerate(src.get("secretExtraHeaders") or []):
        if not exists("Secret", name):
            problems.append(f"{field}.secretExtraHeaders[{i}]: Secret {name!r} not found")
    for i, header in enumerate(src.get("extraHeaders") or []):
        if ":" not in str(header) or "\n" in str(header) or "\r" in str(header):
            problems.append(f"{field}.extraHeaders[{i}]: not a single 'Name: value' header")
    return problems


def _storage_problems(spec: Mapping[str, Any], kind: str | None) -> list[str]:
    pvc, storage = spec.get("pvc"), spec.get("storage")
    if pvc is not None and storage is not None:
        return ["spec: Duplicate storage definition, both target storage and target pvc"
                " defined"]
    if pvc is None and storage is None:
        return ["spec.storage: Missing target storage/pvc definition"]
    field = "spec.pvc" if pvc is not None else "spec.storage"
    target: Mapping[str, Any] = (pvc if pvc is not None else storage) or {}
    problems: list[str] = []
    if pvc is not None and not pvc.get("accessModes"):
        problems.append("spec.pvc.accessModes: Required value: at least one access mode")
    if spec.get("contentType") == "archive" and target.get("volumeMode") == "Block":
        problems.append(f"{field}.volumeMode: ContentType Archive cannot have block volumeMode")
    text = ((target.get("resources") or {}).get("requests") or {}).get("storage")
    size_optional = storage is not None and (kind in api.CLONE_SOURCE_KINDS
                                             or spec.get("sourceRef") is not None)
    if text is None:
        if not size_optional:
            problems.append(f"{field}.resources.requests.storage: Storage size is missing")
        return problems
    try:
        size = parse_bytes(text)
    except ValueError as err:
        problems.append(f"{field}.resources.requests.storage: {err}")
        return problems
    if size < MIB:
        problems.append(f"{field}.resources.requests.storage: size should be at least 1MiB")
    return problems
