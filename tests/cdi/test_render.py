"""Rendering the target claim and the VolumeImportSource of a DataVolume."""

from __future__ import annotations

from typing import Any

import pytest

from cdi import config, profiles
from cdi.render import RenderError, pick_storage_class, render
from tests.cdi.builders import dv, sc

GiB, MiB = 1024**3, 1024**2
LOCAL = sc("local", annotations={"localcluster.rootdisk.io/filesystem-overhead": "0.03",
                                 "storageclass.kubernetes.io/is-default-class": "true"})
EBS = sc("ebs", provisioner="ebs.csi.aws.com")
UNKNOWN = sc("odd", provisioner="example.com/odd")
CONFIG = config.compute_status(spec={}, storage_classes=[LOCAL, EBS, UNKNOWN]).status


def profile_of(cls: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": cls["metadata"]["name"], **meta},
            "status": profiles.compute_status(storage_class=cls, spec=None)}


def storage(size: str | None = "1Gi", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(kw)
    if size is not None:
        out["resources"] = {"requests": {"storage": size}}
    return out


def go(d: dict[str, Any], cls: dict[str, Any] | None = LOCAL,
       profile: dict[str, Any] | None = None) -> dict[str, Any]:
    prof = profile if profile is not None else (profile_of(cls) if cls else None)
    return render(dv=d, storage_class=cls, profile=prof, config_status=CONFIG).claim


@pytest.mark.parametrize(("d", "cls", "mode", "modes", "size"), [
    # Filesystem: the class's own overhead (0.03) inflates; the profile gives access modes
    (dv(storage=storage()), LOCAL, "Filesystem", ["ReadWriteOnce"], "1105954079"),
    # global 0.06 where neither CDIConfig nor the class says otherwise (upstream's figure)
    (dv(storage=storage("6Gi")), EBS, "Block", ["ReadWriteOnce"], "6Gi"),
    (dv(storage=storage("6Gi", volumeMode="Filesystem")), EBS, "Filesystem",
     ["ReadWriteOnce"], "6828998001"),
    (dv(storage=storage(volumeMode="Block")), LOCAL, "Block", ["ReadWriteOnce"], "1Gi"),
    (dv(storage=storage(volumeMode="FromStorageProfile")), LOCAL, "Filesystem",
     ["ReadWriteOnce"], "1105954079"),
    (dv(storage=storage(accessModes=["ReadWriteMany"])), UNKNOWN, "Filesystem",
     ["ReadWriteMany"], "1138166334"),
    (dv(storage=storage(), contentType="archive"), EBS, "Filesystem", ["ReadWriteOnce"],
     "1138166334"),
])
def test_storage_is_completed_and_inflated(d: Any, cls: Any, mode: str, modes: list[str],
                                           size: str) -> None:
    claim = go(d, cls)
    assert claim["spec"]["volumeMode"] == mode
    assert claim["spec"]["accessModes"] == modes
    assert claim["spec"]["resources"]["requests"]["storage"] == size
    assert claim["spec"]["storageClassName"] == cls["metadata"]["name"]


def test_pvc_is_verbatim() -> None:
    pvc = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
           "volumeMode": "Block", "dataSource": {"kind": "PersistentVolumeClaim", "name": "x"}}
    claim = go(dv(pvc=pvc))
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "volumeMode": "Block",
        "dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource",
                          "name": "volume-import-source-dv-uid"}}


def test_minimum_size_raises() -> None:
    prof = profile_of(EBS, annotations={"cdi.kubevirt.io/minimumSupportedPvcSize": "4Gi"})
    claim = go(dv(storage=storage("1Gi", volumeMode="Block")), EBS, prof)
    assert claim["spec"]["resources"]["requests"]["storage"] == str(4 * GiB)


def test_minimum_first_then_the_overhead() -> None:
    """As current upstream: a Filesystem claim below the minimum is raised to it, and the
    overhead comes on top (so the image the user asked room for still fits)."""
    prof = profile_of(LOCAL, annotations={"cdi.kubevirt.io/minimumSupportedPvcSize": "4Gi"})
    claim = go(dv(storage=storage("1Gi")), LOCAL, prof)
    # localcluster's class states 0.03: ceil(4 GiB x 1.03)
    assert claim["spec"]["resources"]["requests"]["storage"] == str(-(-4 * GiB * 103 // 100))
    above = go(dv(storage=storage("5Gi")), LOCAL, prof)
    assert above["spec"]["resources"]["requests"]["storage"] == str(-(-5 * GiB * 103 // 100))


def test_metadata_as_upstream() -> None:
    d = dv(storage=storage(), labels={"team": "a"}, annotations={"note": "x"},
           preallocation=True)
    target = render(dv=d, storage_class=LOCAL, profile=profile_of(LOCAL), config_status=CONFIG)
    meta = target.claim["metadata"]
    assert meta["name"] == "disk" and meta["namespace"] == "ns"
    assert meta["labels"] == {"team": "a", "app": "containerized-data-importer",
                              "alerts.k8s.io/KubePersistentVolumeFillingUp": "disabled"}
    assert meta["annotations"] == {
        "note": "x", "cdi.kubevirt.io/storage.pod.restarts": "0",
        "cdi.kubevirt.io/storage.contentType": "kubevirt",
        "cdi.kubevirt.io/storage.preallocation.requested": "true",
        "cdi.kubevirt.io/createdForDataVolume": "dv-uid"}
    assert meta["ownerReferences"] == [{
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "name": "disk",
        "uid": "dv-uid", "controller": True, "blockOwnerDeletion": True}]
    src = target.import_source
    assert src is not None
    assert src["metadata"]["name"] == "volume-import-source-dv-uid"
    assert src["metadata"]["ownerReferences"] == meta["ownerReferences"]
    assert src["spec"] == {"source": d["spec"]["source"], "contentType": "kubevirt",
                           "preallocation": True}


# upstream's GetPreallocation: the DataVolume's own setting, else CDIConfig's
# status.preallocation (the cluster default)
@pytest.mark.parametrize(("own", "cluster", "expected"), [
    (None, None, None), (None, True, True), (False, True, False), (True, None, True),
])
def test_preallocation_defaults_to_the_cluster_setting(own: bool | None, cluster: bool | None,
                                                       expected: bool | None) -> None:
    extra = {} if own is None else {"preallocation": own}
    status = {**CONFIG, "preallocation": cluster} if cluster is not None else CONFIG
    target = render(dv=dv(storage=storage(), **extra), storage_class=LOCAL,
                    profile=profile_of(LOCAL), config_status=status)
    assert target.import_source is not None
    assert target.import_source["spec"].get("preallocation") == expected
    requested = target.claim["metadata"]["annotations"][
        "cdi.kubevirt.io/storage.preallocation.requested"]
    assert requested == ("true" if expected else "false")


@pytest.mark.parametrize(("d", "cls", "reason", "text"), [
    (dv(storage=storage()), None, "StorageClassNotFound", "no default storage class"),
    (dv(storage=storage()), UNKNOWN, "ErrClaimNotValid", "no accessMode specified in "
     "StorageProfile odd"),
    (dv(storage=storage(None)), LOCAL, "ErrClaimNotValid", "storage is missing"),
    (dv(storage=storage("lots")), LOCAL, "ErrClaimNotValid", "'lots' is not a Kubernetes"),
    (dv(storage=storage(volumeMode="Block"), contentType="archive"), LOCAL,
     "InvalidVolumeMode", "ContentType Archive cannot have block volumeMode"),
    (dv(storage=storage(), source={"pvc": {"name": "a", "namespace": "b"}}), LOCAL,
     "UnsupportedSource", "'pvc' is not supported"),
])
def test_render_errors(d: Any, cls: Any, reason: str, text: str) -> None:
    with pytest.raises(RenderError) as err:
        go(d, cls)
    assert err.value.reason == reason and text in err.value.message


def test_default_class_choice() -> None:
    virt = sc("virt", annotations={"storageclass.kubevirt.io/is-default-virt-class": "true"})
    classes = [LOCAL, EBS, virt]
    assert pick_storage_class(requested=None, classes=classes, content_type="kubevirt") is virt
    assert pick_storage_class(requested=None, classes=classes, content_type="archive") is LOCAL
    assert pick_storage_class(requested="ebs", classes=classes, content_type="kubevirt") is EBS
    assert pick_storage_class(requested="gone", classes=classes, content_type="kubevirt") is None
    assert pick_storage_class(requested=None, classes=[EBS], content_type="kubevirt") is None
