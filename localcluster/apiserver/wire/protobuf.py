"""Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl sends that way.

kubectl's imperative commands (``create namespace|configmap|secret|serviceaccount|role|
rolebinding|clusterrole|clusterrolebinding|token|deployment|service|job``, ``auth can-i``,
``auth whoami``) post
built-in objects as ``application/vnd.kubernetes.protobuf`` and client-go has no fallback
to JSON, so a server that only reads JSON breaks them. This module decodes that envelope
(``k8s\\0`` + runtime.Unknown{typeMeta, raw}) and, for the kinds in ``MESSAGES``, the object
into the same dict its JSON form would be. Any other kind, and any field not listed (so
nothing is silently lost), is refused with a message saying to send JSON instead.
Pure: bytes in, dict out. Field numbers are those of the published ``generated.proto``
files of k8s.io/api, checked against what kubectl 1.32 sends.
"""

from __future__ import annotations

import base64
from typing import Any

Obj = dict[str, Any]

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """The body is not protobuf we can read (bad bytes, or a kind not listed here)."""


# A field: (json name, type, repeated). Types: "string", "bytes" (base64 in JSON), "int",
# "bool", "map" (string->string), "bytesmap" (string->base64), or a message name.
Field = tuple[str, str, bool]

_META: dict[int, Field] = {
    1: ("name", "string", False), 2: ("generateName", "string", False),
    3: ("namespace", "string", False), 5: ("uid", "string", False),
    6: ("resourceVersion", "string", False), 7: ("generation", "int", False),
    11: ("labels", "map", False), 12: ("annotations", "map", False),
    13: ("ownerReferences", "OwnerReference", True), 14: ("finalizers", "string", True),
}
_METADATA: Field = ("metadata", "ObjectMeta", False)

MESSAGES: dict[str, dict[int, Field]] = {
    "ObjectMeta": _META,
    "OwnerReference": {1: ("kind", "string", False), 3: ("name", "string", False),
                       4: ("uid", "string", False), 5: ("apiVersion", "string", False),
                       6: ("controller", "bool", False),
                       7: ("blockOwnerDeletion", "bool", False)},
    "ObjectReference": {1: ("kind", "string", False), 2: ("namespace", "string", False),
                        3: ("name", "string", False), 4: ("uid", "string", False),
                        5: ("apiVersion", "string", False),
                        6: ("resourceVersion", "string", False),
                        7: ("fieldPath", "string", False)},
    "LocalObjectReference": {1: ("name", "string", False)},
    "Namespace": {1: _METADATA, 2: ("spec", "NamespaceSpec", False),
                  3: ("status", "NamespaceStatus", False)},
    "NamespaceSpec": {1: ("finalizers", "string", True)},
    "NamespaceStatus": {1: ("phase", "string", False)},
    "ConfigMap": {1: _METADATA, 2: ("data", "map", False), 3: ("binaryData", "bytesmap", False),
                  4: ("immutable", "bool", False)},
    "Secret": {1: _METADATA, 2: ("data", "bytesmap", False), 3: ("type", "string", False),
               4: ("stringData", "map", False), 5: ("immutable", "bool", False)},
    "ServiceAccount": {1: _METADATA, 2: ("secrets", "ObjectReference", True),
                       3: ("imagePullSecrets", "LocalObjectReference", True),
                       4: ("automountServiceAccountToken", "bool", False)},
    "TokenRequest": {1: _METADATA, 2: ("spec", "TokenRequestSpec", False)},
    "TokenRequestSpec": {1: ("audiences", "string", True),
                         3: ("boundObjectRef", "BoundObjectReference", False),
                         4: ("expirationSeconds", "int", False)},
    "BoundObjectReference": {1: ("kind", "string", False), 2: ("apiVersion", "string", False),
                             3: ("name", "string", False), 4: ("uid", "string", False)},
    "PolicyRule": {1: ("verbs", "string", True), 2: ("apiGroups", "string", True),
                   3: ("resources", "string", True), 4: ("resourceNames", "string", True),
                   5: ("nonResourceURLs", "string", True)},
    "LabelSelector": {1: ("matchLabels", "map", False),
                      2: ("matchExpressions", "LabelSelectorRequirement", True)},
    "LabelSelectorRequirement": {1: ("key", "string", False), 2: ("operator", "string", False),
                                 3: ("values", "string", True)},
    "AggregationRule": {1: ("clusterRoleSelectors", "LabelSelector", True)},
    "Role": {1: _METADATA, 2: ("rules", "PolicyRule", True)},
    "ClusterRole": {1: _METADATA, 2: ("rules", "PolicyRule", True),
                    3: ("aggregationRule", "AggregationRule", False)},
    "Subject": {1: ("kind", "string", False), 2: ("apiGroup", "string", False),
                3: ("name", "string", False), 4: ("namespace", "string", False)},
    "RoleRef": {1: ("apiGroup", "string", False), 2: ("kind", "string", False),
                3: ("name", "string", False)},
    "RoleBinding": {1: _METADATA, 2: ("subjects", "Subject", True),
                    3: ("roleRef", "RoleRef", False)},
    "ClusterRoleBinding": {1: _METADATA, 2: ("subjects", "Subject", True),
                           3: ("roleRef", "RoleRef", False)},
    "ResourceAttributes": {1: ("namespace", "string", False), 2: ("verb", "string", False),
                           3: ("group", "string", False), 4: ("version", "string", False),
                           5: ("resource", "string", False),
                           6: ("subresource", "string", False), 7: ("name", "string", False)},
    "NonResourceAttributes": {1: ("path", "string", False), 2: ("verb", "string", False)},
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes", False),
        2: ("nonResourceAttributes", "NonResourceAttributes", False)},
    "SelfSubjectAccessReview": {1: _METADATA, 2: ("spec", "SelfSubjectAccessReviewSpec",
                                                  False)},
    "SelfSubjectReview": {1: _METADATA},
    "SelfSubjectRulesReview": {1: _METADATA, 2: ("spec", "SelfSubjectRulesReviewSpec", False)},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string", False)},
    # What `kubectl create deployment|service|job` send (nothing more: see IGNORED).
    "Deployment": {1: _METADATA, 2: ("spec", "DeploymentSpec", False)},
    "DeploymentSpec": {1: ("replicas", "int", False), 2: ("selector", "LabelSelector", False),
                       3: ("template", "PodTemplateSpec", False),
                       4: ("strategy", "DeploymentStrategy", False)},
    "DeploymentStrategy": {1: ("type", "string", False)},
    "Job": {1: _METADATA, 2: ("spec", "JobSpec", False)},
    "JobSpec": {6: ("template", "PodTemplateSpec", False)},
    "PodTemplateSpec": {1: _METADATA, 2: ("spec", "PodSpec", False)},
    "PodSpec": {2: ("containers", "Container", True), 3: ("restartPolicy", "string", False)},
    "Container": {1: ("name", "string", False), 2: ("image", "string", False),
                  3: ("command", "string", True), 6: ("ports", "ContainerPort", True)},
    "ContainerPort": {1: ("name", "string", False), 2: ("hostPort", "int", False),
                      3: ("containerPort", "int", False), 4: ("protocol", "string", False)},
    "Service": {1: _METADATA, 2: ("spec", "ServiceSpec", False)},
    "ServiceSpec": {1: ("ports", "ServicePort", True), 2: ("selector", "map", False),
                    3: ("clusterIP", "string", False), 4: ("type", "string", False)},
    "ServicePort": {1: ("name", "string", False), 2: ("protocol", "string", False),
                    3: ("port", "int", False), 4: ("targetPort", "intorstring", False),
                    5: ("nodePort", "int", False)},
}

# Fields that are read and dropped because the server sets them (timestamps, status,
# managedFields). Any other field not in MESSAGES is refused rather than lost, unless it
# holds the zero value (kubectl sends unset optional fields as "" or 0).
IGNORED: dict[str, frozenset[int]] = {
    "ObjectMeta": frozenset({4, 8, 9, 10, 17}),
    **{kind: frozenset({3}) for kind in ("Namespace", "TokenRequest",
                                         "SelfSubjectAccessReview", "Deployment", "Job",
                                         "Service", "SelfSubjectRulesReview")},
    "SelfSubjectReview": frozenset({2}),
}

# Kinds a request body may carry (the top-level messages above).
TOP_LEVEL = frozenset({"Namespace", "ConfigMap", "Secret", "ServiceAccount", "TokenRequest",
                       "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
                       "SelfSubjectAccessReview", "SelfSubjectReview", "Deployment", "Job",
                       "Service", "SelfSubjectRulesReview"})


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message: ints for varints, bytes otherwise."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated length-delimited field")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, value))
    return out


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a length-delimited field")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise ProtobufError("a string field is not UTF-8") from None


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "string":
        return _text(value)
    if kind == "bytes":
        if not isinstance(value, bytes):
            raise ProtobufError("expected bytes")
        return base64.b64encode(value).decode()
    if kind == "intorstring":  # IntOrString {1: type (0 int, 1 string), 2: int, 3: str}
        if not isinstance(value, bytes):
            raise ProtobufError("expected an IntOrString message")
        parts = dict(fields(value))
        if parts.get(1, 0) == 1:
            return _text(parts.get(3, b""))
        number = parts.get(2, 0)
        return number if isinstance(number, int) else 0
    if not isinstance(value, int):
        raise ProtobufError(f"expected a varint for a {kind}")
    if kind == "bool":
        return bool(value)
    return value - (1 << 64) if value >= 1 << 63 else value


def _entry(value: int | bytes, *, binary: bool) -> tuple[str, str]:
    """One map entry (message {1: key, 2: value})."""
    if not isinstance(value, bytes):
        raise ProtobufError("expected a map entry")
    key, raw = "", b""
    for number, item in fields(value):
        if not isinstance(item, bytes):
            raise ProtobufError("expected length-delimited map entry fields")
        if number == 1:
            key = _text(item)
        elif number == 2:
            raw = item
    return key, base64.b64encode(raw).decode() if binary else _text(raw)


def _empty(value: Any) -> bool:
    return value in ("", 0, False, None) or value == {} or value == []


def decode_message(name: str, data: bytes) -> Obj:
    """One message as its JSON form (zero values dropped, as Go's omitempty does)."""
    schema = MESSAGES[name]
    out: Obj = {}
    for number, value in fields(data):
        spec = schema.get(number)
        if spec is None:
            if number in IGNORED.get(name, ()) or value in (b"", 0):
                continue  # server-set, or an unset optional field (proto2 sends those)
            raise ProtobufError(f"field {number} of {name} is not understood here; send this "
                                "object as JSON (e.g. kubectl create ... --dry-run=client "
                                "-o yaml | kubectl apply -f -)")
        key, kind, repeated = spec
        if kind in ("map", "bytesmap"):
            k, v = _entry(value, binary=kind == "bytesmap")
            out.setdefault(key, {})[k] = v
            continue
        if kind in MESSAGES:
            if not isinstance(value, bytes):
                raise ProtobufError(f"{name}.{key}: expected a message")
            decoded: Any = decode_message(kind, value)
        else:
            decoded = _scalar(kind, value)
        if repeated:
            out.setdefault(key, []).append(decoded)
        else:
            out[key] = decoded
    return {k: v for k, v in out.items() if not _empty(v) or isinstance(v, list)}


def decode_request(body: bytes) -> Obj:
    """A protobuf request body as the object's JSON form, with apiVersion and kind."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC):]):
        if number == 1 and isinstance(value, bytes):
            for sub, item in fields(value):
                if sub == 1:
                    api_version = _text(item)
                elif sub == 2:
                    kind = _text(item)
        elif number == 2 and isinstance(value, bytes):
            raw = value
        elif number == 3 and value:
            raise ProtobufError("compressed protobuf bodies are not supported")
    if kind not in TOP_LEVEL:
        raise ProtobufError(
            f"protobuf bodies are read for {', '.join(sorted(TOP_LEVEL))}; send {kind or 'this'}"
            " as JSON (e.g. kubectl create ... --dry-run=client -o yaml | kubectl apply -f -)")
    obj = decode_message(kind, raw)
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj
