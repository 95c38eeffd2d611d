"""Admission checks for DataVolumes: what the validating webhook refuses, and why (pure).

Upstream's rules in upstream's order and words (CDI c07cdb6fb,
``pkg/apiserver/webhooks/datavolume-validate.go`` and ``util.go``): the first rule a
DataVolume breaks is the refusal, with upstream's field path (``spec.PVC``,
``spec.source.HTTP.url``…) and message, since tools and users grep for them. Each problem
is written ``field: message`` (a message alone when upstream gives no field).

After upstream's rules, rootdisk's own (upstream accepts these and fails later, or never):
the Secrets and ConfigMaps a source names must exist in the DataVolume's namespace (the
adapter looks them up), extra headers must be single ``Name: value`` lines, a source
kind must be one rootdisk knows, and an archive cannot go to a Block volume.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from sizes import MIB, parse_bytes
from vocab import cdi as api
from vocab import sources

Exists = Callable[[str, str], bool]
"""``exists(kind, name)`` for kind "Secret" or "ConfigMap" in the DataVolume's namespace."""

NAME_MAX = 253  # kvalidation.DNS1123SubdomainMaxLength
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
_CHECKSUM_LENGTHS = sources.CHECKSUM_DIGEST_LENGTHS
_URL_SOURCES = {k: sources.TYPE_NAMES[k] for k in (sources.HTTP, sources.S3, sources.GCS)}
_HEX = re.compile(r"[0-9a-fA-F]*")


def _p(field: str, message: str) -> str:
    return f"{field}: {message}" if field else message


def _unsupported_mode(mode: Any) -> str:
    return (f'Unsupported value: "{mode}": supported values: "ReadOnlyMany", '
            '"ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"')


def validate_create(*, dv: Mapping[str, Any], exists: Exists,
                    claim: Mapping[str, Any] | None = None,
                    adoption_gate: bool = False) -> list[str]:
    """Problems with a new DataVolume; empty when it is acceptable. ``claim``: the
    metadata of the claim of the DataVolume's name, when one exists; ``adoption_gate``:
    CDIConfig enables ``DataVolumeClaimAdoption``."""
    meta = dv.get("metadata") or {}
    name = str(meta.get("name") or "")
    if len(name) > NAME_MAX:
        return [f"Name cannot be longer than {NAME_MAX} characters"]
    if claim is not None and not claim_may_exist(claim, dv, adoption_gate=adoption_gate):
        owner = next((r for r in claim.get("ownerReferences") or [] if r.get("controller")),
                     None)
        if owner is None or owner.get("kind") != "DataVolume":
            ns = claim.get("namespace") or meta.get("namespace") or ""
            return [_p("DataVolume.Name", f"Destination PVC {ns}/{name} already exists")]
    spec = dv.get("spec") or {}
    problems = _spec_problems(spec)
    if problems:
        return problems
    return _rootdisk_problems(spec, exists)


def claim_may_exist(claim: Mapping[str, Any], dv: Mapping[str, Any], *,
                    adoption_gate: bool = False) -> bool:
    """Upstream's ``ClaimMayExistBeforeDataVolume``: the claim (its metadata) was populated
    for this DataVolume, or the DataVolume may adopt it."""
    annotations = claim.get("annotations") or {}
    if annotations.get(api.POPULATED_FOR) == (dv.get("metadata") or {}).get("name"):
        return True
    return adoption_allowed(claim, dv, adoption_gate=adoption_gate)


def adoption_allowed(claim: Mapping[str, Any], dv: Mapping[str, Any], *,
                     adoption_gate: bool) -> bool:
    """Upstream's ``AllowClaimAdoption``: never a claim made for this very DataVolume
    (its uid), else the DataVolume's ``allowClaimAdoption`` annotation when it has one
    (read as Go's ``strconv.ParseBool``: anything else is false), else the
    ``DataVolumeClaimAdoption`` feature gate."""
    annotations = claim.get("annotations") or {}
    dv_meta = dv.get("metadata") or {}
    if dv_meta.get("uid") and annotations.get(api.CREATED_FOR_DV) == dv_meta.get("uid"):
        return False
    allow = (dv_meta.get("annotations") or {}).get(api.ALLOW_CLAIM_ADOPTION)
    if allow is not None:
        return str(allow) in _GO_TRUE
    return adoption_gate


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
"""What Go's ``strconv.ParseBool`` reads as true."""


def _same_spec(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Upstream's update rule: the spec may not change, except a multi-stage import's
    (a vddk or imageio source with checkpoints) ``checkpoints`` and ``finalCheckpoint``."""
    source = new.get("source") or {}
    if new.get("checkpoints") and (source.get("vddk") is not None
                                   or source.get("imageio") is not None):
        def strip(spec: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in spec.items() if k not in ("checkpoints", "finalCheckpoint")}
        return strip(old) == strip(new)
    return old == new


def validate_update(*, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A DataVolume's spec cannot change once created, as upstream; nor the requester
    annotation the mutating webhook wrote (rootdisk's: it authorises clones)."""
    if not _same_spec(old.get("spec") or {}, new.get("spec") or {}):
        return ["DataVolume.Spec: Cannot update DataVolume Spec"]
    name = str((new.get("metadata") or {}).get("name") or "")
    if len(name) > NAME_MAX:
        return [f"Name cannot be longer than {NAME_MAX} characters"]

    def requester(dv: Mapping[str, Any]) -> Any:
        return ((dv.get("metadata") or {}).get("annotations") or {}).get(api.CLONE_REQUESTER)
    if requester(old) != requester(new):
        return [f"metadata.annotations[{api.CLONE_REQUESTER}]: set at creation by the"
                " webhook; it cannot be changed"]
    return []


def _spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """Upstream's ``validateDataVolumeSpec``: the first rule broken."""
    pvc, storage = spec.get("pvc"), spec.get("storage")
    if pvc is None and storage is None:
        return [_p("spec.PVC", "Missing Data volume PVC")]
    if pvc is not None and storage is not None:
        return [_p("spec.PVC.Storage",
                   "Duplicate storage definition, both target storage and target pvc defined")]
    target: Mapping[str, Any] = (pvc if pvc is not None else storage) or {}
    size = _size_problem(spec, target, "PVC" if pvc is not None else "Storage")
    if size:
        return [size]
    class_name = target.get("storageClassName")
    if class_name and len(str(class_name)) > NAME_MAX:
        return [f"Name cannot be longer than {NAME_MAX} characters"]
    modes = list(target.get("accessModes") or [])
    if pvc is not None:
        if not modes:
            return [_p("spec.PVC.accessModes",
                       "Required value: at least 1 access mode is required")]
        if len(modes) > 1:
            return [_p("spec.PVC.accessModes", "PVC multiple accessModes")]
    for mode in modes:
        if mode not in ACCESS_MODES:
            # upstream names the first mode, whichever is wrong
            return [_p("spec.PVC.accessModes", _unsupported_mode(modes[0]))]
    data_source, data_source_ref = target.get("dataSource"), target.get("dataSourceRef")
    if data_source is not None or data_source_ref is not None:
        return _external_population(spec, data_source, data_source_ref)
    source, ref = spec.get("source"), spec.get("sourceRef")
    if (source is None) == (ref is None):
        return [_p("spec.source", "Data volume should have either Source or SourceRef, or "
                                  "be externally populated")]
    if ref is not None:
        return _source_ref_problems(ref or {})
    source = source or {}
    kinds = [k for k, v in source.items() if v is not None]
    if not kinds:
        return [_p("spec.source", "Missing Data volume source")]
    if len(kinds) > 1:
        return [_p("spec.source", "Multiple Data volume sources")]
    content_type = spec.get("contentType") or ""
    if content_type not in ("", "kubevirt", "archive"):
        return [_p("spec.contentType", "ContentType not one of: kubevirt, archive")]
    kind, body = kinds[0], source[kinds[0]] or {}
    if kind in _URL_SOURCES:
        problems = _url_problems(body.get("url"), _URL_SOURCES[kind])
        if kind == sources.HTTP:
            problems += _checksum_problems(body.get("checksum"))
        return problems
    if kind == sources.BLANK and content_type == "archive":
        return [_p("spec.contentType",
                   "SourceType cannot be blank and the contentType be archive")]
    if kind == sources.REGISTRY:
        return _registry_problems(body, content_type)
    if kind == sources.IMAGEIO:
        return _imageio_problems(body)
    if kind == sources.VDDK:
        if not all(body.get(k) for k in ("secretRef", "uuid", "backingFile", "thumbprint")):
            return [_p("spec.source.VDDK", "spec.source.VDDK source VDDK is not valid")]
        return _url_problems(body.get("url"), "VDDK")
    if kind == "pvc" and not (body.get("namespace") and body.get("name")):
        return [_p("spec.source.PVC", "spec.source.PVC source PVC is not valid")]
    if kind == "snapshot" and not (body.get("namespace") and body.get("name")):
        return [_p("spec.source.Snapshot", "spec.source.Snapshot source snapshot is not valid")]
    return []


def _size_problem(spec: Mapping[str, Any], target: Mapping[str, Any], name: str) -> str:
    """Upstream's ``validateStorageSize``: a size may be left out only with ``storage``
    when the source is a clone (pvc, snapshot, or a sourceRef)."""
    field = f"spec.{name}.resources.requests.size"
    text = ((target.get("resources") or {}).get("requests") or {}).get("storage")
    source = spec.get("source") or {}
    is_clone = spec.get("sourceRef") is not None or source.get("pvc") is not None \
        or source.get("snapshot") is not None
    if text is None:
        if name == "PVC" or not is_clone:
            return _p(field, f"{name} size is missing")
        return ""
    try:
        size = parse_bytes(str(text))
    except ValueError as err:
        return _p(field, str(err))
    if size <= 0:
        return _p(field, f"{name} size can't be equal or less than zero")
    if size < MIB:
        return _p(field, f"{name} size should be at least 1MiB")
    return ""


def _external_population(spec: Mapping[str, Any], data_source: Any,
                         data_source_ref: Any) -> list[str]:
    """Upstream's ``validateExternalPopulation`` (every cause, not only the first)."""
    problems: list[str] = []
    if spec.get("source") is not None or spec.get("sourceRef") is not None:
        problems.append(_p("spec.source",
                           "External population is incompatible with Source and SourceRef"))
    if data_source is not None and data_source_ref is not None:
        ds, ref = dict(data_source or {}), dict(data_source_ref or {})
        if ref.get("namespace") in ("", None):
            ref.pop("namespace", None)
        if ds != ref:
            problems.append("DataSourceRef and DataSource must match")
    if data_source is not None:
        problems += _typed_ref_problems(data_source or {}, "spec.dataSource", "DataSource")
    if data_source_ref is not None:
        ref = data_source_ref or {}
        if ref.get("namespace"):
            problems.append(_p("spec.dataSourceRef.namespace",
                               "Invalid value: DataSourceRef namespace not supported"))
        problems += _typed_ref_problems(ref, "spec.dataSourceRef", "DataSourceRef")
    return problems


def _typed_ref_problems(ref: Mapping[str, Any], field: str, what: str) -> list[str]:
    problems: list[str] = []
    if not ref.get("name"):
        problems.append(_p(f"{field}.name", f"Required value: {what} name"))
    if not ref.get("kind"):
        problems.append(_p(f"{field}.kind", f"Required value: {what} kind"))
    if not ref.get("apiGroup") and ref.get("kind") != "PersistentVolumeClaim":
        problems.append(_p(f"{field}.apiGroup", f"Required value: {what} apiGroup when kind "
                                                "is not 'PersistentVolumeClaim'"))
    return problems


def _source_ref_problems(ref: Mapping[str, Any]) -> list[str]:
    kind = ref.get("kind") or ""
    if not kind:
        return [_p("spec.sourceRef.Kind", "Missing sourceRef kind")]
    if kind != "DataSource":
        return [_p("spec.sourceRef.Kind", f"Unsupported sourceRef kind {kind}, currently "
                                          "only DataSource is supported")]
    if not ref.get("name"):
        return [_p("spec.sourceRef.Name", "Missing sourceRef name")]
    return []


def _url_problems(url: Any, source_type: str) -> list[str]:
    """Upstream's ``checkSourceURL``: http, https or gs, parsed as a request URI."""
    field = f"spec.source.{source_type}.url"
    text = str(url or "")
    if not text:
        return [_p(field, "spec.source source URL is empty")]
    parts = urlsplit(text)
    # ParseRequestURI: an absolute URI or an absolute path
    if not (parts.scheme or text.startswith("/")) or any(c in text for c in " \t\r\n"):
        return [_p(field, f"spec.source Invalid source URL: {text}")]
    if parts.scheme not in ("http", "https", "gs"):
        return [_p(field, f"spec.source Invalid source URL scheme: {text}")]
    return []


def _checksum_problems(checksum: Any) -> list[str]:
    """Upstream's ``validateChecksum`` with ``checksum.ParseAndValidate``'s errors."""
    text = str(checksum or "")
    if not text:
        return []
    field = "spec.source.HTTP.checksum"
    algorithm, sep, digest = text.partition(":")
    algorithm, digest = algorithm.strip().lower(), digest.strip().lower()
    error = ""
    if not sep:
        error = f"invalid checksum format: expected 'algorithm:hash', got '{text}'"
    elif not digest:
        error = "checksum hash value cannot be empty"
    elif algorithm not in _CHECKSUM_LENGTHS:
        error = (f"unsupported hash algorithm '{algorithm}': supported algorithms are: "
                 "md5, sha1, sha256, sha512")
    elif len(digest) != _CHECKSUM_LENGTHS[algorithm]:
        error = (f"invalid {algorithm} hash length: expected "
                 f"{_CHECKSUM_LENGTHS[algorithm]} hex characters, got {len(digest)}")
    else:
        bad = next((c for c in digest if not _HEX.fullmatch(c)), None)
        if bad is not None:
            error = ("checksum hash is not valid hexadecimal: encoding/hex: invalid byte: "
                     f"U+{ord(bad):04X} '{bad}'")
    return [_p(field, f"Invalid checksum format: {error}")] if error else []


def _registry_problems(body: Mapping[str, Any], content_type: str) -> list[str]:
    """Upstream's ``validateRegistrySource`` and ``validateDataVolumeSourceRegistry``."""
    if content_type not in ("", "kubevirt"):
        return [_p("spec.contentType", "ContentType must be kubevirt when Source is Registry")]
    url, stream = body.get("url"), body.get("imageStream")
    if (url is None) == (stream is None):
        return [_p("spec.source.Registry", "Source registry should have either URL or "
                                           "ImageStream")]
    if url is not None:
        scheme = urlsplit(str(url)).scheme
        if scheme not in ("docker", "oci-archive"):
            return [_p("spec.source.Registry.URL",
                       f"Illegal registry source URL scheme {url}")]
    method = body.get("pullMethod")
    if method is not None and method not in ("pod", "node"):
        return [_p("spec.source.Registry.importMethod",
                   f'ImportMethod {method} is neither pod, node or ""')]
    if stream is not None and stream == "":
        return [_p("spec.source.Registry.importMethod", "Source registry ImageStream is not "
                                                        "valid")]
    if stream is not None and method != "node":
        return [_p("spec.source.Registry.importMethod", "Source registry ImageStream is "
                                                        "supported only with node pull "
                                                        "import method")]
    return []


def _imageio_problems(body: Mapping[str, Any]) -> list[str]:
    field = "spec.source.Imageio"
    if not body.get("secretRef") or not body.get("diskId"):
        return [_p(field, f"{field} source Imageio is not valid")]
    if not body.get("certConfigMap") and not body.get("insecureSkipVerify"):
        return [_p(field, f"{field} source Imageio requires CertConfigMap or "
                          "InsecureSkipVerify")]
    return _url_problems(body.get("url"), "ImageIO")


def _rootdisk_problems(spec: Mapping[str, Any], exists: Exists) -> list[str]:
    """rootdisk's own checks, after upstream's passed (see the module docstring)."""
    problems: list[str] = []
    source = spec.get("source") or {}
    unknown = sorted(k for k in source if k not in sources.ALL_KINDS)
    if unknown:
        return [_p("spec.source", f"unknown source type(s) {', '.join(unknown)}")]
    target = spec.get("pvc") or spec.get("storage") or {}
    field = "spec.pvc" if spec.get("pvc") is not None else "spec.storage"
    if spec.get("contentType") == "archive" and target.get("volumeMode") == "Block":
        problems.append(_p(f"{field}.volumeMode",
                           "ContentType Archive cannot have block volumeMode"))
    for kind, body in source.items():
        if not isinstance(body, Mapping):
            continue
        where = f"spec.source.{kind}"
        for key, obj_kind in (("secretRef", "Secret"), ("certConfigMap", "ConfigMap")):
            name = body.get(key)
            if name and not exists(obj_kind, name):
                problems.append(_p(f"{where}.{key}", f"{obj_kind} {name!r} not found"))
        for i, name in enumerate(body.get("secretExtraHeaders") or []):
            if not exists("Secret", name):
                problems.append(_p(f"{where}.secretExtraHeaders[{i}]",
                                   f"Secret {name!r} not found"))
        for i, header in enumerate(body.get("extraHeaders") or []):
            if ":" not in str(header) or "\n" in str(header) or "\r" in str(header):
                problems.append(_p(f"{where}.extraHeaders[{i}]",
                                   "not a single 'Name: value' header"))
        if kind == sources.S3:
            scheme = urlsplit(str(body.get("url") or "")).scheme
            if scheme == "gs":
                problems.append(_p(f"{where}.url", "an S3 source needs an http or https URL"))
    return problems


def spec_problems(spec: Mapping[str, Any], exists: Exists, *, field: str = "spec") -> list[str]:
    """Upstream's ``validateDataVolumeSpec`` then rootdisk's checks, for a DataVolume spec
    found under ``field`` (a DataImportCron's ``Template``: the paths say so)."""
    problems = _spec_problems(spec) or _rootdisk_problems(spec, exists)
    if field == "spec":
        return problems
    return [f"{field}.{p[len('spec.'):]}" if p.startswith("spec.") else p for p in problems]
