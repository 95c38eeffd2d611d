"""CustomResourceDefinitions: validating them and turning them into served types.

Pure: the server calls :func:`validate_crd` before storing a CRD, :func:`crd_status` for
the status it reports (Established at once: there is nothing to wait for here), and
:func:`served_types` to (re)register its versions.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import Cause
from ..kinds.registry import ResourceType
from ..kinds.scale import ScaleError, crd_paths
from ..schema import cel_rules
from ..schema.structural import validate_structural

Obj = dict[str, Any]
CRD_GR = "apiextensions.k8s.io/customresourcedefinitions"

DEFAULT_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
_VERSION = re.compile(r"v[0-9]+((alpha|beta)[0-9]+)?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_PLURAL = re.compile(r"[a-z][-a-z0-9]*")


def validate_crd(crd: Obj) -> list[Cause]:
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "Required value", "spec")]
    causes: list[Cause] = []

    def bad(path: str, message: str) -> None:
        causes.append(Cause("FieldValueInvalid", message, path))

    group = spec.get("group")
    raw_names = spec.get("names")
    names: Obj = raw_names if isinstance(raw_names, dict) else {}
    if not isinstance(group, str) or "." not in group:
        bad("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot')
    plural = names.get("plural")
    if not isinstance(plural, str) or not _PLURAL.fullmatch(plural):
        bad("spec.names.plural", f'Invalid value: "{plural}": must be a lowercase DNS-1035 label')
    kind = names.get("kind")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        bad("spec.names.kind", f'Invalid value: "{kind}": must be a valid kind name')
    for key in ("singular", "listKind"):
        value = names.get(key)
        if value is not None and not isinstance(value, str):
            bad(f"spec.names.{key}", "Invalid value: must be a string")
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(Cause("FieldValueNotSupported",
                            f'Unsupported value: "{spec.get("scope")}": supported values: '
                            '"Cluster", "Namespaced"', "spec.scope"))
    name = (crd.get("metadata") or {}).get("name")
    if isinstance(plural, str) and isinstance(group, str) and name != f"{plural}.{group}":
        bad("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(Cause("FieldValueRequired", "Required value: must have exactly one "
                                                  "version marked as storage version",
                            "spec.versions"))
        return causes
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        bad("spec.versions", "Invalid value: must have exactly one version marked as storage "
                             "version")
    seen: set[str] = set()
    for i, version in enumerate(versions):
        if not isinstance(version, dict):
            bad(f"spec.versions[{i}]", "Invalid value: must be an object")
            continue
        vname = version.get("name")
        if not isinstance(vname, str) or not _VERSION.fullmatch(vname):
            bad(f"spec.versions[{i}].name", f'Invalid value: "{vname}": must match v[0-9]+'
                                            "((alpha|beta)[0-9]+)?")
        elif vname in seen:
            causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{vname}"',
                                f"spec.versions[{i}].name"))
        else:
            seen.add(vname)
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            causes.append(Cause("FieldValueRequired", "Required value: schemas are required",
                                f"spec.versions[{i}].schema.openAPIV3Schema"))
        else:
            for problem in validate_structural(schema):
                bad(f"spec.versions[{i}].schema.openAPIV3Schema", problem)
            for problem in cel_rules.check_schema(schema):
                where, _, message = problem.partition(": ")
                causes.append(Cause("FieldValueInvalid", message,
                                    f"spec.versions[{i}].schema.openAPIV3Schema.{where}"))
        scale = (version.get("subresources") or {}).get("scale")
        if scale is not None:
            try:
                crd_paths(scale if isinstance(scale, dict) else {})
            except ScaleError as err:
                causes += [Cause(c.reason, c.message,
                                 c.field.replace("versions[]", f"versions[{i}]"))
                           for c in err.causes]
        for j, col in enumerate(version.get("additionalPrinterColumns") or []):
            if not isinstance(col, dict) or not col.get("name") or not col.get("jsonPath"):
                causes.append(Cause("FieldValueRequired", "Required value: name and jsonPath",
                                    f"spec.versions[{i}].additionalPrinterColumns[{j}]"))
    return causes


def immutable_changes(old: Obj, new: Obj) -> list[Cause]:
    causes = []
    for fld in ("group", "scope"):
        if (old.get("spec") or {}).get(fld) != (new.get("spec") or {}).get(fld):
            causes.append(Cause("FieldValueInvalid", "Invalid value: field is immutable",
                                f"spec.{fld}"))
    return causes


def accepted_names(crd: Obj) -> Obj:
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    return names


def crd_status(crd: Obj, *, now: str) -> Obj:
    status = dict(crd.get("status") or {})
    stored = list(status.get("storedVersions") or [])
    for version in crd["spec"]["versions"]:
        if version.get("storage") and version["name"] not in stored:
            stored.append(version["name"])
    conditions = []
    for ctype, reason, message in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted")):
        previous = [c for c in status.get("conditions") or [] if c.get("type") == ctype]
        when = previous[0].get("lastTransitionTime", now) if previous else now
        conditions.append({"type": ctype, "status": "True", "reason": reason,
                           "message": message, "lastTransitionTime": when})
    status.update({"acceptedNames": accepted_names(crd), "storedVersions": stored,
                   "conditions": conditions})
    return status


def storage_version(crd: Obj) -> str:
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return str(version["name"])
    return str(crd["spec"]["versions"][0]["name"])


def served_types(crd: Obj) -> list[ResourceType]:
    spec = crd["spec"]
    names = accepted_names(crd)
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        columns = version.get("additionalPrinterColumns")
        out.append(ResourceType(
            group=spec["group"], version=version["name"], resource=names["plural"],
            kind=names["kind"], namespaced=spec["scope"] == "Namespaced",
            singular=names["singular"], short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=tuple(s for s in ("status", "scale") if s in subresources),
            scale=crd_paths(subresources["scale"]) if "scale" in subresources else None,
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=tuple(columns) if columns else DEFAULT_COLUMNS,
            custom=True,
            selectable_fields=tuple(str(f.get("jsonPath", "")).lstrip(".")
                                    for f in version.get("selectableFields") or []
                                    if isinstance(f, dict)),
            deprecation_warning=deprecation_warning(spec["group"], names["kind"], version),
        ))
    return out


def deprecation_warning(group: str, kind: str, version: Obj) -> str | None:
    """What a request to a ``deprecated`` served version is warned (upstream's default
    text unless the version sets ``deprecationWarning``)."""
    if not version.get("deprecated"):
        return None
    custom = version.get("deprecationWarning")
    if isinstance(custom, str) and custom:
        return custom
    return f"{group}/{version.get('name')} {kind} is deprecated"
