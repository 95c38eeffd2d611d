"""The volume snapshot API (pure data): its three CRDs and the default class.

A real cluster gets ``snapshot.storage.k8s.io/v1`` from kubernetes-csi/external-snapshotter;
localcluster installs the same kinds at start (snapshot_controller.install_snapshot_api).
The schemas keep upstream's field names, types and validation rules, trimmed of
descriptions and of the fields nothing here reads or writes (``sourceVolumeMode`` and
``volumeSnapshotClassName`` are kept: restores check the former).
"""

from __future__ import annotations

from typing import Any

from kubeclient.resources import SNAPSHOT_CLASSES as SNAPSHOT_CLASSES
from kubeclient.resources import SNAPSHOT_CONTENTS as CONTENTS
from kubeclient.resources import SNAPSHOT_GROUP as GROUP
from kubeclient.resources import SNAPSHOTS as SNAPSHOTS
from localcluster.storage.classes import PROVISIONER

__all__ = ["CONTENTS", "GROUP", "SNAPSHOTS", "SNAPSHOT_CLASSES"]  # and the names below
VERSION = SNAPSHOTS.version
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_SNAPSHOT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
SNAPSHOT_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
CONTENT_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
LOCAL_SNAPSHOTS = "local-snapshots"
CONTENT_PREFIX = "snapcontent-"

Schema = dict[str, Any]
_STRING: Schema = {"type": "string"}
_BOOL: Schema = {"type": "boolean"}
_INT64: Schema = {"type": "integer", "format": "int64"}
_TIME: Schema = {"type": "string", "format": "date-time"}
_QUANTITY: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
               r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "x-kubernetes-int-or-string": True,
}
_POLICY: Schema = {"type": "string", "enum": ["Delete", "Retain"]}
_ERROR: Schema = {"type": "object", "properties": {"message": _STRING, "time": _TIME}}


def _obj(properties: dict[str, Schema], *required: str, **extra: Any) -> Schema:
    out: Schema = {"type": "object", "properties": properties, **extra}
    if required:
        out["required"] = list(required)
    return out


def _immutable(schema: Schema, what: str) -> Schema:
    return {**schema, "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": f"{what} is immutable"}]}


def _one_of(a: str, b: str) -> list[dict[str, str]]:
    """Upstream's rules on ``source``: exactly one of ``a``/``b``, never unset again."""
    return [
        {"rule": f"!has(oldSelf.{a}) || has(self.{a})", "message": f"{a} is required once set"},
        {"rule": f"!has(oldSelf.{b}) || has(self.{b})", "message": f"{b} is required once set"},
        {"rule": f"(has(self.{a}) && !has(self.{b})) || (!has(self.{a}) && has(self.{b}))",
         "message": f"exactly one of {a} and {b} must be set"},
    ]


def _crd(kind: str, plural: str, *, scope: str, schema: Schema,
         columns: list[dict[str, str]], status: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "versions": [version],
        },
    }


def _top(**properties: Schema) -> dict[str, Schema]:
    return {"apiVersion": _STRING, "kind": _STRING, "metadata": {"type": "object"},
            **properties}


def _col(name: str, type_: str, path: str) -> dict[str, str]:
    return {"name": name, "type": type_, "jsonPath": path}


_AGE = _col("Age", "date", ".metadata.creationTimestamp")


def snapshot_class_crd() -> dict[str, Any]:
    return _crd("VolumeSnapshotClass", "volumesnapshotclasses", scope="Cluster", status=False,
                schema=_obj(_top(driver=_STRING, deletionPolicy=_POLICY,
                                 parameters={"type": "object",
                                             "additionalProperties": _STRING}),
                            "deletionPolicy", "driver"),
                columns=[_col("Driver", "string", ".driver"),
                         _col("DeletionPolicy", "string", ".deletionPolicy"), _AGE])


def snapshot_crd() -> dict[str, Any]:
    source = _obj({"persistentVolumeClaimName": _immutable(_STRING, "persistentVolumeClaimName"),
                   "volumeSnapshotContentName": _immutable(_STRING, "volumeSnapshotContentName")},
                  **{"x-kubernetes-validations": _one_of("persistentVolumeClaimName",
                                                         "volumeSnapshotContentName")})
    spec = _obj({"source": source, "volumeSnapshotClassName": _STRING}, "source")
    status = _obj({"boundVolumeSnapshotContentName": _STRING, "creationTime": _TIME,
                   "readyToUse": _BOOL, "restoreSize": _QUANTITY, "error": _ERROR})
    return _crd("VolumeSnapshot", "volumesnapshots", scope="Namespaced",
                schema=_obj(_top(spec=spec, status=status), "spec"),
                columns=[_col("ReadyToUse", "boolean", ".status.readyToUse"),
                         _col("SourcePVC", "string", ".spec.source.persistentVolumeClaimName"),
                         _col("RestoreSize", "string", ".status.restoreSize"),
                         _col("SnapshotClass", "string", ".spec.volumeSnapshotClassName"),
                         _col("SnapshotContent", "string",
                              ".status.boundVolumeSnapshotContentName"), _AGE])


def content_crd() -> dict[str, Any]:
    ref = _obj({k: _STRING for k in ("apiVersion", "kind", "namespace", "name", "uid",
                                     "resourceVersion", "fieldPath")})
    source = _obj({"volumeHandle": _immutable(_STRING, "volumeHandle"),
                   "snapshotHandle": _immutable(_STRING, "snapshotHandle")},
                  **{"x-kubernetes-validations": _one_of("volumeHandle", "snapshotHandle")})
    spec = _obj({"volumeSnapshotRef": ref, "driver": _STRING, "deletionPolicy": _POLICY,
                 "volumeSnapshotClassName": _STRING, "source": source,
                 "sourceVolumeMode": _immutable({"type": "string", "enum": ["Block", "Filesystem"]},
                                                     "sourceVolumeMode")},
                "deletionPolicy", "driver", "source", "volumeSnapshotRef")
    status = _obj({"snapshotHandle": _STRING, "readyToUse": _BOOL,
                   "restoreSize": {**_INT64, "minimum": 0}, "creationTime": _INT64,
                   "error": _ERROR})
    return _crd("VolumeSnapshotContent", "volumesnapshotcontents", scope="Cluster",
                schema=_obj(_top(spec=spec, status=status), "spec"),
                columns=[_col("ReadyToUse", "boolean", ".status.readyToUse"),
                         _col("RestoreSize", "integer", ".status.restoreSize"),
                         _col("DeletionPolicy", "string", ".spec.deletionPolicy"),
                         _col("Driver", "string", ".spec.driver"),
                         _col("VolumeSnapshot", "string", ".spec.volumeSnapshotRef.name"), _AGE])


def crds() -> list[dict[str, Any]]:
    return [snapshot_class_crd(), snapshot_crd(), content_crd()]


def snapshot_class() -> dict[str, Any]:
    """The default class for :data:`PROVISIONER`: every localcluster StorageClass's
    volumes can be snapshotted without naming a class."""
    return {
        "apiVersion": API_VERSION,
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": LOCAL_SNAPSHOTS, "annotations": {DEFAULT_SNAPSHOT_CLASS: "true"}},
        "driver": PROVISIONER,
        "deletionPolicy": "Delete",
    }
