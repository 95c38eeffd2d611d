"""Upstream's GetMemoryOverhead table (kubevirt/kubevirt d923fdb815cd,
``pkg/hypervisor/kvm/hypervisorbackend_test.go``), row by row, against
``vm.vmi.overhead``: a 1Gi request, no CPU given, is 290Mi (7Mi + 243Mi as upstream
splits it, + 32Mi video + 8Mi for one vCPU), and each row adds what upstream adds."""

from __future__ import annotations

from typing import Any

import pytest

from vm.vmi.config import launcher_config
from vm.vmi.overhead import (
    Mi,
    ResourceError,
    memory_overhead,
    multiply_memory,
    pod_memory_request,
    pod_resources,
    wants_guaranteed_qos,
)

Gi = 1024 * Mi
BASE = 7 * Mi + 243 * Mi + 32 * Mi + 8 * Mi  # upstream's base/static/video/one core
EXEC = {"exec": {"command": ["true"]}}


def _vmi(**spec: Any) -> dict[str, Any]:
    """Upstream's BeforeEach: requests.memory 1Gi, limits empty; ``domain`` keys merged."""
    domain = {"resources": {"requests": {"memory": "1Gi"}, "limits": {}}}
    domain.update(spec.pop("domain", {}))
    return {"domain": domain, **spec}


@pytest.mark.parametrize(("spec", "arch", "added"), [
    pytest.param(_vmi(), "amd64", 0, id="nothing-specific"),
    pytest.param(_vmi(domain={"cpu": {"cores": 2, "threads": 2, "sockets": 2}}), "amd64",
                 7 * 8 * Mi, id="cores*threads*sockets"),
    pytest.param(_vmi(domain={"resources": {"requests": {"memory": "1Gi", "cpu": "3"},
                                            "limits": {"cpu": "5"}}}), "amd64", 4 * 8 * Mi,
                 id="cpu-from-limits-if-both"),
    pytest.param(_vmi(domain={"resources": {"requests": {"memory": "1Gi", "cpu": "3"},
                                            "limits": {}}}), "amd64", 2 * 8 * Mi,
                 id="cpu-from-requests-if-only-requests"),
    pytest.param(_vmi(domain={"devices": {"autoattachGraphicsDevice": False}}), "amd64",
                 -32 * Mi, id="no-video"),
    pytest.param(_vmi(), "arm64", 128 * Mi, id="arm64"),
    pytest.param(_vmi(domain={"devices": {"hostDevices": [{"name": "test"}]}}), "amd64",
                 Gi, id="vfio-hostdev"),
    pytest.param(_vmi(domain={"devices": {"gpus": [{"name": "test"}]}}), "amd64", Gi,
                 id="vfio-gpu"),
    pytest.param(_vmi(domain={"devices": {"interfaces": [{"name": "test", "sriov": {}}]}}),
                 "amd64", Gi, id="vfio-sriov"),
    pytest.param(_vmi(volumes=[{"name": "m", "downwardMetrics": {}}]), "amd64", Mi,
                 id="downward-metrics"),
    pytest.param(_vmi(livenessProbe=EXEC), "amd64", 110 * Mi, id="liveness-probe"),
    pytest.param(_vmi(readinessProbe=EXEC), "amd64", 110 * Mi, id="readiness-probe"),
    pytest.param(_vmi(livenessProbe=EXEC, readinessProbe=EXEC), "amd64", 120 * Mi,
                 id="both-probes"),
    pytest.param(_vmi(livenessProbe={"httpGet": {"port": 80}}), "amd64", 0,
                 id="non-exec-probe"),
    pytest.param(_vmi(domain={"launchSecurity": {"sev": {}}}), "amd64", 256 * Mi, id="sev"),
    pytest.param(_vmi(domain={"devices": {"tpm": {}}}), "amd64", 53 * Mi, id="tpm"),
    pytest.param(_vmi(domain={"devices": {"tpm": {"enabled": False}}}), "amd64", 0,
                 id="tpm-disabled"),
    pytest.param(_vmi(domain={"cpu": {"cores": 1, "dedicatedCpuPlacement": True}}), "amd64",
                 100 * Mi, id="dedicated-cpu"),
    pytest.param(_vmi(domain={"cpu": {"cores": 1}, "resources": {
        "requests": {"memory": "1Gi", "cpu": "4"}, "limits": {"memory": "1Gi", "cpu": "4"}}}),
        "amd64", 100 * Mi, id="wants-qos-guaranteed"),
    pytest.param(_vmi(domain={"memory": {"reservedOverhead": {"addedOverhead": "100G"}}}),
                 "amd64", 100 * 10**9, id="reserved-overhead"),
    pytest.param(_vmi(domain={"memory": {"reservedOverhead": {"addedOverhead": "0"}}}),
                 "amd64", 0, id="reserved-overhead-zero"),
])
def test_upstream_table(spec: dict[str, Any], arch: str, added: int) -> None:
    assert memory_overhead(spec, arch=arch) == BASE + added


@pytest.mark.parametrize("ratio", ["3.2", "2.332", "1.234", "1.0"])
def test_ratio_multiplies_as_upstream(ratio: str) -> None:
    assert memory_overhead(_vmi(), ratio=ratio) == multiply_memory(BASE, float(ratio))


@pytest.mark.parametrize(("value", "ratio", "want"), [
    # MultiplyMemory: ceil(value / 1000) × (ratio − 1), truncated, in kilobytes, added
    (BASE, 1.0, BASE),
    (BASE, 3.2, BASE + int(304088 * 2.2) * 1000),   # BASE = 304087040 B → 304088 kB
    (1000, 1.5, 1000),                               # half a kilobyte truncated away
    (1001, 2.0, 1001 + 2000),
])
def test_multiply_memory(value: int, ratio: float, want: int) -> None:
    assert multiply_memory(value, ratio) == want


@pytest.mark.parametrize("ratio", ["no_float", "0.5", "nan", "inf"])
def test_a_bad_ratio_names_the_field(ratio: str) -> None:
    # Upstream's KubeVirt webhook refuses these before they reach GetMemoryOverhead
    # (which would ignore an unparsable one); rootdisk has no KubeVirt webhook, so the
    # launcher pod is not made and the VMI says why (FailedCreate).
    with pytest.raises(ResourceError, match="additionalGuestMemoryOverheadRatio"):
        memory_overhead(_vmi(), ratio=ratio)


@pytest.mark.parametrize(("resources", "want"), [
    ({"requests": {"memory": "1Gi", "cpu": "4"}, "limits": {"memory": "1Gi", "cpu": "4"}},
     True),
    ({"requests": {"cpu": "4"}, "limits": {"memory": "1Gi", "cpu": "4"}}, True),
    ({"requests": {"memory": "1Gi", "cpu": "4"}, "limits": {"memory": "2Gi", "cpu": "4"}},
     False),
    ({"requests": {"memory": "1Gi", "cpu": "2"}, "limits": {"memory": "1Gi", "cpu": "4"}},
     False),
    ({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}, False),
    ({"requests": {"memory": "1Gi", "cpu": "4000m"}, "limits": {"memory": "1Gi", "cpu": "4"}},
     True),
])
def test_wants_guaranteed_qos(resources: dict[str, Any], want: bool) -> None:
    assert wants_guaranteed_qos({"domain": {"resources": resources}}) is want


def test_the_pod_gets_it() -> None:
    """The launcher pod's memory request and limit carry the overhead (upstream's
    renderresources: request = memory request + overhead, limit = limit + overhead)."""
    spec = _vmi(domain={"resources": {"requests": {"memory": "1Gi", "cpu": "4"},
                                      "limits": {"memory": "1Gi", "cpu": "4"}}})
    res = pod_resources(spec, ratio=None, kvm=False)
    want = Gi + BASE + 4 * 8 * Mi - 8 * Mi + 100 * Mi  # 4 vCPUs from the limit, Guaranteed
    assert res.requests["memory"] == str(want)
    assert res.limits["memory"] == str(want)
    assert res.requests["cpu"] == "4" and res.limits["cpu"] == "4"


# upstream's "should honor memoryOvercommit when set in the CR" table (template_test.go):
# only a VMI that gives its guest's memory alone is overcommitted (hugepages rows left
# out: rootdisk's webhook refuses hugepages)
@pytest.mark.parametrize(("requests", "limits", "guest", "overcommitted"), [
    (None, "1Gi", None, False),
    ("1Gi", None, None, False),
    (None, None, "1Gi", True),
    ("1Gi", "1Gi", None, False),
    ("1Gi", None, "1Gi", False),
    (None, "1Gi", "1Gi", False),
    ("1Gi", "1Gi", "1Gi", False),
])
def test_memory_overcommit(requests: str | None, limits: str | None, guest: str | None,
                           overcommitted: bool) -> None:
    domain: dict[str, Any] = {"resources": {"requests": {}, "limits": {}}}
    if requests:
        domain["resources"]["requests"]["memory"] = requests
    if limits:
        domain["resources"]["limits"]["memory"] = limits
    if guest:
        domain["memory"] = {"guest": guest}
    spec = {"domain": domain}
    at100 = pod_memory_request(spec)
    at110 = pod_memory_request(spec, overcommit=110)
    assert at110 == (at100 * 100 // 110 if overcommitted else at100)
    mem100 = int(pod_resources(spec, ratio=None, kvm=False).requests["memory"])
    mem110 = int(pod_resources(spec, ratio=None, kvm=False, overcommit=110)
                 .requests["memory"])
    overhead = memory_overhead(spec)
    assert (mem100 - overhead) * 100 // 110 == mem110 - overhead if overcommitted else \
        mem100 == mem110


@pytest.mark.parametrize(("value", "want"), [(110, 110), (None, 100), (0, 100), (-5, 100),
                                             ("150", 100), (True, 100)])
def test_memory_overcommit_is_read_from_the_kubevirt_object(value: Any, want: int) -> None:
    dev: dict[str, Any] = {} if value is None else {"memoryOvercommit": value}
    kv = {"metadata": {"name": "kubevirt", "creationTimestamp": "2026-01-01T00:00:00Z"},
          "spec": {"configuration": {"developerConfiguration": dev}}}
    assert launcher_config(kubevirts=[kv], nodes=[], image="x").memory_overcommit == want
