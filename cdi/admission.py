"""AdmissionReview in, AdmissionReview out, for the DataVolume validating webhook (pure).

kube-apiserver sends ``admission.k8s.io/v1`` AdmissionReviews; the answer echoes the
request's uid, allows or refuses, and on refusal carries every problem (each naming its
field) in ``status.message`` with code 422, as the API server's own validation does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cdi.validate import validate_create, validate_update

Exists = Callable[[str, str, str], bool]
"""``exists(kind, name, namespace)``."""


def review(body: Mapping[str, Any], *, exists: Exists) -> dict[str, Any]:
    request = body.get("request") or {}
    uid = request.get("uid", "")
    problems: list[str]
    kind = (request.get("kind") or {}).get("kind")
    obj = request.get("object") or {}
    if kind != "DataVolume":
        problems = []
    elif request.get("operation") == "CREATE":
        ns = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
        problems = validate_create(dv=obj, exists=lambda k, n: exists(k, n, ns))
    elif request.get("operation") == "UPDATE":
        problems = validate_update(old=request.get("oldObject") or {}, new=obj)
    else:
        problems = []
    response: dict[str, Any] = {"uid": uid, "allowed": not problems}
    if problems:
        response["status"] = {"code": 422, "reason": "Invalid", "message": "; ".join(problems)}
    return {"apiVersion": body.get("apiVersion") or "admission.k8s.io/v1",
            "kind": "AdmissionReview", "response": response}
