"""Clone DataVolumes: the target's size from the source, the smaller-target rule, the
VolumeCloneSource and the claim's dataSourceRef (table tests of cdi.clone and render)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from cdi import clone
from cdi.render import RenderError, render
from sizes import parse_bytes, required_space, usable_space
from tests.cdi.builders import dv
from tests.cdi.test_render import CONFIG, LOCAL, profile_of, storage

MiB, GiB = 1024**2, 1024**3


def source_claim(size: str = "1Gi", mode: str = "Filesystem", ns: str = "ns",
                 capacity: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": "golden", "namespace": ns},
                           "spec": {"volumeMode": mode, "storageClassName": "local",
                                    "resources": {"requests": {"storage": size}}}}
    if capacity:
        out["status"] = {"phase": "Bound", "capacity": {"storage": capacity}}
    return out


def src(size: str = "1Gi", mode: str = "Filesystem", overhead: str = "0.06",
        **kw: Any) -> clone.Source:
    return clone.Source(claim=source_claim(size, mode, **kw), overhead=Fraction(overhead))


def cloning(name: str = "copy", ns: str = "ns", **kw: Any) -> dict[str, Any]:
    return dv(name, source={"pvc": {"namespace": ns, "name": "golden"}}, **kw)


@pytest.mark.parametrize(("source", "mode", "expected"), [
    # same mode: the source's request, as it is
    (src("1Gi"), "Filesystem", GiB),
    (src("1Gi", "Block"), "Block", GiB),
    # Block → Filesystem: the device's capacity, plus the target's overhead
    (src("1Gi", "Block", capacity="1Gi"), "Filesystem",
     required_space(size=GiB, overhead=Fraction("0.03"))),
    # Filesystem → Block: the image the importer grew (usable space of the request)
    (src("1Gi"), "Block", usable_space(capacity=GiB, overhead=Fraction("0.06"))),
])
def test_default_size(source: clone.Source, mode: str, expected: int) -> None:
    overhead = Fraction(0) if mode == "Block" else Fraction("0.03")
    assert clone.default_size(source=source, target_mode=mode,
                              target_overhead=overhead) == expected


def test_smaller_target_refused_with_upstreams_message_unless_permissive() -> None:
    with pytest.raises(clone.CloneError) as err:
        clone.check_size(dv=cloning(), source=src("1Gi"), requested=GiB - 1)
    assert err.value.message == "target resources requests storage size is smaller than " \
        "the source"
    clone.check_size(dv=cloning(annotations={"cdi.kubevirt.io/permissiveClone": "true"}),
                     source=src("1Gi"), requested=GiB - 1)
    clone.check_size(dv=cloning(), source=src("1Gi"), requested=GiB)
    clone.check_size(dv=cloning(), source=src("1Gi"), requested=None)


def test_render_without_size_takes_the_sources() -> None:
    target = render(dv=cloning(storage=storage(None)), storage_class=LOCAL,
                    profile=profile_of(LOCAL), config_status=CONFIG,
                    clone_from=(clone.SourceRef("ns", "golden"), src("3Gi")))
    spec = target.claim["spec"]
    assert spec["resources"]["requests"]["storage"] == "3Gi"
    assert spec["dataSourceRef"] == {"apiGroup": "cdi.kubevirt.io",
                                     "kind": "VolumeCloneSource",
                                     "name": "volume-clone-source-dv-uid"}
    assert target.import_source is None
    vcs = target.clone_source
    assert vcs is not None and vcs["metadata"]["namespace"] == "ns"
    assert vcs["spec"]["source"] == {"kind": "PersistentVolumeClaim", "name": "golden"}
    assert vcs["metadata"]["ownerReferences"][0]["uid"] == "dv-uid"


def test_render_across_namespaces_and_modes() -> None:
    target = render(dv=cloning(ns="gold", storage=storage(None, volumeMode="Block")),
                    storage_class=LOCAL, profile=profile_of(LOCAL), config_status=CONFIG,
                    clone_from=(clone.SourceRef("gold", "golden"), src("1Gi")))
    spec = target.claim["spec"]
    assert spec["dataSourceRef"]["namespace"] == "gold"
    assert spec["resources"]["requests"]["storage"] == str(
        usable_space(capacity=GiB, overhead=Fraction("0.06")))
    vcs = target.clone_source
    assert vcs is not None and vcs["metadata"]["namespace"] == "gold"
    assert "ownerReferences" not in vcs["metadata"]  # they cannot cross namespaces
    assert vcs["metadata"]["labels"]["cdi.kubevirt.io/clone-for-datavolume"] == "dv-uid"
    dv_meta = cloning(ns="gold")["metadata"]
    assert vcs["metadata"]["annotations"]["cdi.kubevirt.io/clone-for-claim"] == \
        f"{dv_meta['namespace']}/{dv_meta['name']}"


def test_render_refuses_a_smaller_target() -> None:
    with pytest.raises(RenderError) as err:
        render(dv=cloning(storage=storage("512Mi")), storage_class=LOCAL,
               profile=profile_of(LOCAL), config_status=CONFIG,
               clone_from=(clone.SourceRef("ns", "golden"), src("1Gi")))
    assert err.value.reason == "CloneValidationFailed"


def test_data_source_targets() -> None:
    ds = {"metadata": {"namespace": "g"}, "spec": {"source": {"pvc": {"name": "fedora"}}}}
    assert clone.data_source_target(ds) == ("pvc", clone.SourceRef("g", "fedora"))
    ds = {"metadata": {"namespace": "g"},
          "spec": {"source": {"dataSource": {"name": "x", "namespace": "h"}}}}
    assert clone.data_source_target(ds) == ("dataSource", clone.SourceRef("h", "x"))
    assert clone.data_source_target({"metadata": {}, "spec": {"source": {}}}) is None
    assert clone.data_source_ref(dv(sourceRef={"kind": "DataSource", "name": "f"})) == \
        clone.SourceRef("ns", "f")


def _fs_overhead() -> Fraction:
    from cdi.render import overhead_for
    return overhead_for(status=CONFIG, storage_class=LOCAL["metadata"]["name"],
                        volume_mode="Filesystem")


def _golden_request(size: str) -> str:
    """The claim a spec.storage DataVolume of ``size`` gets (the overhead on top)."""
    return str(required_space(size=parse_bytes(size), overhead=_fs_overhead()))


# upstream's validateClone table (pvc-clone-controller_test.go, "Validation mechanism
# rejects or accepts the clone depending on the source and target size combination", a
# Block source and a Filesystem target profile), then the golden-image rows this rule is
# for: a spec.storage clone of a spec.storage golden DataVolume of the same size
@pytest.mark.parametrize(("source", "target", "explicit_pvc", "accepted"), [
    (src("1Gi", "Block"), "1Gi", True, True),
    (src("1Gi", "Block"), "2Gi", True, True),
    (src("2Gi", "Block"), "1Gi", True, False),
    (src("1Gi", "Block"), "1Gi", False, True),
    (src("1Gi", "Block"), "2Gi", False, True),
    (src("2Gi", "Block"), "1Gi", False, False),
    (src("1Gi", "Block"), None, False, True),
    (src(_golden_request("1Gi")), "1Gi", False, True),
    (src(_golden_request("2Gi")), "1Gi", False, False),
    (src(_golden_request("1Gi")), "1Gi", True, False),   # spec.pvc: as written
    (src("1Gi"), "1Gi", True, True),
])
def test_clone_size_validation_as_upstream(source: clone.Source, target: str | None,
                                           explicit_pvc: bool, accepted: bool) -> None:
    if explicit_pvc:
        d = cloning(pvc={"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                         "resources": {"requests": {"storage": target}}})
    else:
        d = cloning(storage=storage(target, volumeMode="Filesystem"))
    run = lambda: render(dv=d, storage_class=LOCAL, profile=profile_of(LOCAL),  # noqa: E731
                         config_status=CONFIG,
                         clone_from=(clone.SourceRef("ns", "golden"), source))
    if not accepted:
        with pytest.raises(RenderError) as err:
            run()
        assert err.value.reason == "CloneValidationFailed"
        assert "target resources requests storage size is smaller than the source" in \
            err.value.message
        return
    claim = run().claim
    got = parse_bytes(str(claim["spec"]["resources"]["requests"]["storage"]))
    assert got >= clone.capacity(source.claim)
