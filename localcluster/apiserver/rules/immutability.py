"""Pure checks of the fields that built-in kinds forbid changing after create.

Only the rules a client can trip over in practice: a Pod's spec (except images, active
deadline, added tolerations, and binding to a node once), a claim's spec (except a larger
storage request and binding to a volume once), immutable ConfigMaps/Secrets, a Secret's
type, a StorageClass's provisioner and parameters, a binding's roleRef, a
Deployment/DaemonSet's selector.
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import Cause

Obj = dict[str, Any]

_IMMUTABLE = "Invalid value: field is immutable"


def _pod_spec_comparable(spec: Obj) -> Obj:
    out = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for c in out.get(key) or []:
            c.pop("image", None)
    out.pop("activeDeadlineSeconds", None)
    out.pop("tolerations", None)
    out.pop("nodeName", None)  # checked on its own: it may be set once
    return out


def immutable_changes(kind: str, old: Obj, new: Obj) -> list[Cause]:
    causes: list[Cause] = []
    old_spec = old.get("spec") or {}
    new_spec = new.get("spec") or {}
    if kind == "Pod":
        if _pod_spec_comparable(old_spec) != _pod_spec_comparable(new_spec):
            causes.append(Cause("FieldValueForbidden",
                                "Forbidden: pod updates may not change fields other than "
                                "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                "`spec.activeDeadlineSeconds`, `spec.tolerations`", "spec"))
        elif old_spec.get("nodeName") and new_spec.get("nodeName") != old_spec.get("nodeName"):
            causes.append(Cause("FieldValueInvalid", _IMMUTABLE, "spec.nodeName"))
    elif kind == "PersistentVolumeClaim":
        a, b = copy.deepcopy(old_spec), copy.deepcopy(new_spec)
        for s in (a, b):
            s.pop("resources", None)
            s.pop("volumeAttributesClassName", None)
        if not old_spec.get("volumeName"):
            a.pop("volumeName", None)
            b.pop("volumeName", None)
        if a != b:
            causes.append(Cause("FieldValueForbidden",
                                "Forbidden: spec is immutable after creation except "
                                "resources.requests and volumeAttributesClassName for bound "
                                "claims", "spec"))
    elif kind in ("ConfigMap", "Secret"):
        if old.get("immutable"):
            for fld in ("data", "binaryData", "stringData"):
                if old.get(fld) != new.get(fld) and fld in new:
                    causes.append(Cause("FieldValueForbidden",
                                        "Forbidden: field is immutable when `immutable` is set",
                                        fld))
            if not new.get("immutable"):
                causes.append(Cause("FieldValueForbidden",
                                    "Forbidden: field is immutable when `immutable` is set",
                                    "immutable"))
        if kind == "Secret" and old.get("type", "Opaque") != new.get("type", "Opaque"):
            causes.append(Cause("FieldValueInvalid", _IMMUTABLE, "type"))
    elif kind == "StorageClass":
        for fld in ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"):
            if old.get(fld) != new.get(fld):
                causes.append(Cause("FieldValueForbidden", "Forbidden: updates to "
                                    f"{fld} are forbidden.", fld))
    elif kind in ("RoleBinding", "ClusterRoleBinding") and old.get("roleRef") != new.get(
            "roleRef"):
        causes.append(Cause("FieldValueInvalid", "Invalid value: cannot change roleRef",
                            "roleRef"))
    elif kind in ("Deployment", "DaemonSet") and old_spec.get("selector") != new_spec.get(
            "selector"):
        causes.append(Cause("FieldValueInvalid", _IMMUTABLE, "spec.selector"))
    return causes
