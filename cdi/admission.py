"""AdmissionReview in, AdmissionReview out, for the DataVolume and DataImportCron
validating webhooks (pure).

kube-apiserver sends ``admission.k8s.io/v1`` AdmissionReviews; the answer echoes the
request's uid, allows or refuses. A refusal is what CDI's webhooks send
(``toRejectedAdmissionResponse``): code 422 and no reason, one ``details.causes`` entry
per problem (``field`` and ``message``), and the message every cause prefixed with a
space (so kube-apiserver's ``denied the request:`` is followed by two spaces). Each cause
is written there as ``field: message`` (upstream's texts leave the field out), since
kubectl prints only that message for a refusal without a reason.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from cdi.authorize import requester_annotation
from cdi.config import CLAIM_ADOPTION_GATE
from cdi.validate import validate_create, validate_update
from cdi.validate_cron import validate_cron_create, validate_cron_update
from vocab import cdi as api

Exists = Callable[[str, str, str], bool]
"""``exists(kind, name, namespace)``."""
Metadata = Callable[[str, str, str], "dict[str, Any] | None"]
"""``metadata(kind, name, namespace)``: an object's metadata, None when not found."""
FeatureGates = Callable[[], "frozenset[str]"]
"""The feature gates CDIConfig enables."""


def review(body: Mapping[str, Any], *, exists: Exists, metadata: Metadata | None = None,
           feature_gates: FeatureGates | None = None) -> dict[str, Any]:
    """``metadata`` (when given) looks up the claim of the DataVolume's name: upstream
    refuses a DataVolume whose claim exists and is not for it, unless it may adopt it
    (``feature_gates``: CDIConfig's, read only then)."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    problems: list[str]
    kind = (request.get("kind") or {}).get("kind")
    obj = request.get("object") or {}
    ns = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
    if kind == api.DATAIMPORTCRON_KIND:
        if request.get("operation") == "CREATE":
            problems = validate_cron_create(cron=obj, exists=lambda k, n: exists(k, n, ns))
        elif request.get("operation") == "UPDATE":
            problems = validate_cron_update(old=request.get("oldObject") or {}, new=obj)
        else:
            problems = []
    elif kind != "DataVolume":
        problems = []
    elif request.get("operation") == "CREATE":
        claim = None
        name = (obj.get("metadata") or {}).get("name")
        if metadata is not None and name:
            claim = metadata("PersistentVolumeClaim", name, ns)
        gate = (claim is not None and feature_gates is not None
                and CLAIM_ADOPTION_GATE in feature_gates())
        problems = validate_create(dv=obj, exists=lambda k, n: exists(k, n, ns), claim=claim,
                                   adoption_gate=gate)
    elif request.get("operation") == "UPDATE":
        problems = validate_update(old=request.get("oldObject") or {}, new=obj)
    else:
        problems = []
    response: dict[str, Any] = {"uid": uid, "allowed": not problems}
    if problems:
        response["status"] = rejection(problems)
    return {"apiVersion": body.get("apiVersion") or "admission.k8s.io/v1",
            "kind": "AdmissionReview", "response": response}


def rejection(problems: list[str]) -> dict[str, Any]:
    """The Status of a refusal, from problems written ``field: message``."""
    causes = []
    for problem in problems:
        field, sep, message = problem.partition(": ")
        causes.append({"reason": "FieldValueInvalid", "message": message if sep else problem,
                       "field": field if sep else ""})
    return {"code": 422, "message": "".join(f" {p}" for p in problems),
            "details": {"causes": causes}}


def mutate(body: Mapping[str, Any], *, exists: Exists, metadata: Metadata | None = None,
           feature_gates: FeatureGates | None = None) -> dict[str, Any]:
    """The mutating webhook: on CREATE, record the requesting user on the DataVolume
    (``cdi.kubevirt.io/storage.clone.requester``), replacing whatever the user wrote
    there, so the controller can authorise a cross-namespace clone for that user."""
    del exists, metadata, feature_gates
    request = body.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    obj = request.get("object") or {}
    if (request.get("kind") or {}).get("kind") == "DataVolume" and request.get(
            "operation") == "CREATE":
        value = requester_annotation(request.get("userInfo") or {})
        if (obj.get("metadata") or {}).get("annotations") is None:
            patch = [{"op": "add", "path": "/metadata/annotations",
                      "value": {api.CLONE_REQUESTER: value}}]
        else:
            key = api.CLONE_REQUESTER.replace("~", "~0").replace("/", "~1")
            patch = [{"op": "add", "path": f"/metadata/annotations/{key}", "value": value}]
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": body.get("apiVersion") or "admission.k8s.io/v1",
            "kind": "AdmissionReview", "response": response}
