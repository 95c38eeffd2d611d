"""AdmissionReview in, AdmissionReview out, for the VM and VMI validating webhooks.

A refusal is what KubeVirt's webhooks send (``pkg/util/webhooks``
``ToAdmissionResponse``): 422, reason ``Invalid``, one ``details.causes`` entry per
problem (``field``, ``message``), and a message joining the first 10 causes with ``, ``
(``, and N more validation errors`` after them), each written ``field: message`` here, as
kubectl prints a cause, so the message names the field too (``admission webhook "…"
denied the request: spec.runStrategy: Invalid RunStrategy 'Sometimes'``). kubectl shows
the causes (``The request is invalid: spec.runStrategy: …``). Warnings travel in
``response.warnings``, refused or not.

VirtualMachines are checked whole on CREATE and UPDATE alike; a VMI's spec on CREATE,
and a VMI's UPDATE against the object it replaces (``vmi_update``: only KubeVirt's
service accounts, those of virt-api's namespace, ``POD_NAMESPACE``, may change its spec).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vm.errors import VmError
from vm.webhooks.net_rules import network_problems
from vm.webhooks.vm_rules import validate_vm
from vm.webhooks.vmi_rules import Problem, validate_vmi_spec
from vm.webhooks.vmi_update import reserved_labels_created, validate_vmi_update
from vocab import kubevirt as names

DEFAULT_NAMESPACE = "kubevirt"
MESSAGE_CAUSES = 10


def rejection(problems: tuple[Problem, ...]) -> dict[str, Any]:
    """The Status of a refusal: every problem a cause, the first 10 in the message."""
    message = ", ".join(str(p) for p in problems[:MESSAGE_CAUSES])
    if len(problems) > MESSAGE_CAUSES:
        message += f", and {len(problems) - MESSAGE_CAUSES} more validation errors"
    return {"code": 422, "reason": "Invalid", "message": message, "details": {"causes": [
        {"reason": "FieldValueInvalid", "message": p.message, "field": p.field}
        for p in problems]}}


class BadReview(VmError, ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview request."""


def _request(review: Any) -> Mapping[str, Any]:
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        raise BadReview("expected an AdmissionReview")
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise BadReview("AdmissionReview.request.uid is required")
    return request


def respond(review: Any, *, namespace: str | None = None) -> dict[str, Any]:
    """The answer to ``review``; ``namespace`` is KubeVirt's (its service accounts'),
    by default virt-api's own (``POD_NAMESPACE``, else ``kubevirt``)."""
    request = _request(review)
    obj = request.get("object") or {}
    resource = (request.get("resource") or {}).get("resource")
    operation = request.get("operation")
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()
    if operation in ("CREATE", "UPDATE") and isinstance(obj, Mapping):
        user = str((request.get("userInfo") or {}).get("username") or "")
        kubevirt_ns = namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
        if resource == names.VM_PLURAL:
            obj = dict(obj)
            meta = dict(obj.get("metadata") or {})
            meta.setdefault("namespace", request.get("namespace") or "")
            obj["metadata"] = meta
            verdict = validate_vm(obj)
            spec = obj.get("spec")
            template = spec.get("template") if isinstance(spec, Mapping) else None
            problems = verdict.problems + tuple(reserved_labels_created(
                template.get("metadata") if isinstance(template, Mapping) else None,
                username=user, namespace=kubevirt_ns, at="spec.template.metadata.labels"))
            warnings = verdict.warnings
            tspec = template.get("spec") if isinstance(template, Mapping) else None
            problems += tuple(network_problems(tspec, at="spec.template.spec"))
        elif resource == names.VMI_PLURAL and operation == "CREATE":
            problems = tuple(validate_vmi_spec(obj.get("spec"))) + tuple(
                reserved_labels_created(obj.get("metadata"), username=user,
                                        namespace=kubevirt_ns, at="metadata.labels"))
            problems += tuple(network_problems(obj.get("spec")))
        elif resource == names.VMI_PLURAL:
            problems = tuple(validate_vmi_update(request.get("oldObject"), obj,
                                                 username=user, namespace=kubevirt_ns))
    response: dict[str, Any] = {"uid": request["uid"], "allowed": not problems}
    if problems:
        response["status"] = rejection(problems)
    if warnings:
        response["warnings"] = list(warnings)
    return {"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview", "response": response}
