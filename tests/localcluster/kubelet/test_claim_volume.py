"""A claim's volume is mounted only when the volume is bound to that very claim: its
``claimRef`` names the claim's UID (upstream's volume manager). A claim's ``volumeName``
is written by whoever creates the claim, and its status by anyone who may write it, so
a claim naming someone else's volume and forged Bound must get nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster.kubelet import podvolumes


def _context(tmp_path: Path, ref: dict[str, Any] | None) -> podvolumes.PodContext:
    victim = tmp_path / "victim-volume"
    victim.mkdir(exist_ok=True)
    spec: dict[str, Any] = {"local": {"path": str(victim)}}
    if ref is not None:
        spec["claimRef"] = ref
    return podvolumes.PodContext(
        pod_dir=str(tmp_path / "pod"), pod_ip="127.1.0.2", host_ip="127.0.0.1",
        configmaps={}, secrets={}, token=lambda **_: "", ca_pem="CA", node_cpu_millis=1000,
        node_memory=1 << 30,
        claims={"mine": {"metadata": {"name": "mine", "namespace": "ns", "uid": "mine-uid"},
                         "spec": {"volumeName": "pv-victim"}, "status": {"phase": "Bound"}}},
        volumes={"pv-victim": {"metadata": {"name": "pv-victim"}, "spec": spec}})


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "automountServiceAccountToken": False, "containers": [{"name": "c", "image": "i"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "mine"}}]}}


@pytest.mark.parametrize("ref", [
    {"namespace": "victims", "name": "theirs", "uid": "their-uid"},   # someone else's
    {"namespace": "ns", "name": "mine", "uid": "an-older-mine"},       # a claim since gone
    {"namespace": "victims", "name": "theirs"},                        # no uid, other claim
    None,                                                              # bound to no one
])
def test_a_claim_naming_a_volume_not_bound_to_it_gets_nothing(tmp_path: Path,
                                                               ref: Any) -> None:
    with pytest.raises(podvolumes.VolumeNotReady, match="pv-victim"):
        podvolumes.prepare(_pod(), _context(tmp_path, ref))


@pytest.mark.parametrize("ref", [{"namespace": "ns", "name": "mine", "uid": "mine-uid"},
                                 {"namespace": "ns", "name": "mine"}])
def test_the_claims_own_volume_is_mounted(tmp_path: Path, ref: dict[str, Any]) -> None:
    got = podvolumes.prepare(_pod(), _context(tmp_path, ref))
    assert got["data"].host == str(tmp_path / "victim-volume")
