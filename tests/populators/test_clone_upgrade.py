"""A copy begun by an earlier rootdisk (PVC', its pod and the target's TLS Secret in the
target's namespace) is retired by this one, which keeps a copy's PVC' beside the source:
against a real API server, the clone populator's observation deletes what the earlier
copy made for this target (its PVC', its pod, the source pod, both Secrets) and nothing
that is not ours; a copy of this version is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client
from kubeclient.resources import CLONE_SOURCES, DATAVOLUMES, PODS, PVCS, SECRETS
from populators import names
from populators.clone_populator import ClonePopulator, CloneReconciler
from populators.importer_pod import Settings
from tests.cdi.conftest import cdi_client

A = "cdi.kubevirt.io/"
TARGET_NS, SOURCE_NS = "vms", "golden-images"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Client]:
    with cdi_client(tmp_path / "api", crds=("volumeclonesources.yaml", "datavolumes.yaml"),
                    served="/apis/cdi.kubevirt.io/v1beta1/volumeclonesources",
                    namespaces=(TARGET_NS, SOURCE_NS)) as c:
        yield c


def _claim(name: str, ns: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, **meta},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                     "resources": {"requests": {"storage": "1Gi"}}}}


def _owner(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True}


def _pod(name: str, ns: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
                                                            **meta},
            "spec": {"containers": [{"name": "c", "image": "rootdisk/importer"}]}}


def _secret(name: str, ns: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, **meta}, "data": {}}


def _copy_target(kube: Client) -> dict[str, Any]:
    """The golden claim, the DataVolume, the VolumeCloneSource made for it, and its target
    claim naming that, its strategy chosen: ``copy`` (every owner exists: the API
    server's garbage collector removes what an absent owner owned)."""
    kube.create(PVCS, _claim("golden", SOURCE_NS), SOURCE_NS)
    dv = kube.create(DATAVOLUMES, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "disk", "namespace": TARGET_NS},
        "spec": {"source": {"pvc": {"namespace": SOURCE_NS, "name": "golden"}},
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}, TARGET_NS)
    dv_uid = dv["metadata"]["uid"]
    kube.create(CLONE_SOURCES, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "VolumeCloneSource",
        "metadata": {"name": "volume-clone-source-x", "namespace": SOURCE_NS,
                     "labels": {A + "clone-for-datavolume": dv_uid},
                     "annotations": {A + "clone-for-claim": f"{TARGET_NS}/disk"}},
        "spec": {"source": {"kind": "PersistentVolumeClaim", "name": "golden"}}},
        SOURCE_NS)
    claim = _claim("disk", TARGET_NS, annotations={A + "clone.strategy": "copy"},
                   ownerReferences=[{"apiVersion": "cdi.kubevirt.io/v1beta1",
                                     "kind": "DataVolume", "name": "disk", "uid": dv_uid,
                                     "controller": True}])
    claim["spec"]["dataSourceRef"] = {"apiGroup": "cdi.kubevirt.io",
                                      "kind": "VolumeCloneSource",
                                      "name": "volume-clone-source-x",
                                      "namespace": SOURCE_NS}
    made: dict[str, Any] = kube.create(PVCS, claim, TARGET_NS)
    return made


def _earlier_copy(kube: Client, target: dict[str, Any], *, ours: bool = True,
                  ) -> dict[str, str]:
    """What the earlier version made for ``target`` (or, not ``ours``, namesakes someone
    else made): {kind/namespace/name: uid}."""
    uid = target["metadata"]["uid"]
    ref = f"{TARGET_NS}/disk/{uid}" if ours else "elsewhere/other/0000"
    prime_name = names.prime_name(uid)
    owner = [_owner(target, "PersistentVolumeClaim")] if ours else []
    prime = kube.create(PVCS, _claim(prime_name, TARGET_NS, ownerReferences=owner),
                        TARGET_NS)
    made = [
        (PODS, TARGET_NS, kube.create(PODS, _pod(
            names.cloner_pod_name(prime_name), TARGET_NS,
            ownerReferences=[_owner(prime, "PersistentVolumeClaim")] if ours else []),
            TARGET_NS)),
        (PODS, SOURCE_NS, kube.create(PODS, _pod(
            names.clone_source_pod_name(uid), SOURCE_NS,
            annotations={"populators.rootdisk.io/target": ref}), SOURCE_NS)),
        *[(SECRETS, ns, kube.create(SECRETS, _secret(
            name, ns, annotations={"populators.rootdisk.io/target": ref}), ns))
          for ns, name in zip((TARGET_NS, SOURCE_NS), names.clone_secret_names(uid),
                              strict=True)],
        (PVCS, TARGET_NS, prime)]
    return {f"{res.plural}/{ns}/{obj['metadata']['name']}": obj["metadata"]["uid"]
            for res, ns, obj in made}


def _left(kube: Client, made: dict[str, str]) -> set[str]:
    """Which of ``made`` still exist and are not being deleted."""
    resources = {"persistentvolumeclaims": PVCS, "pods": PODS, "secrets": SECRETS}
    left = set()
    for key in made:
        plural, ns, name = key.split("/")
        obj = kube.get_or_none(resources[plural], name, ns)
        if obj is not None and not obj["metadata"].get("deletionTimestamp"):
            left.add(key)
    return left


def test_a_copy_begun_by_an_earlier_version_is_retired(kube: Client) -> None:
    target = _copy_target(kube)
    made = _earlier_copy(kube, target)
    assert _left(kube, made) == set(made)
    CloneReconciler(kube, ClonePopulator(), Settings())._observe(target)
    assert _left(kube, made) == set()


def test_namesakes_someone_else_made_are_left_alone(kube: Client) -> None:
    target = _copy_target(kube)
    made = _earlier_copy(kube, target, ours=False)
    CloneReconciler(kube, ClonePopulator(), Settings())._observe(target)
    assert _left(kube, made) == set(made)
