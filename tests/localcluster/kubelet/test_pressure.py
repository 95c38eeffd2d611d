"""Node-pressure eviction for memory, the pure part (pressure.py) and the measurements
(memstats.py): threshold parsing, upstream's ranking, eviction and admission messages,
the condition's transition period, requests and QoS as upstream computes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from localcluster.kubelet import memstats, pressure
from localcluster.kubelet.pressure import ContainerUse, PodUse, Threshold

MiB = 1 << 20
GiB = 1 << 30


@pytest.mark.parametrize(("raw", "want"), [
    ("100Mi", Threshold("100Mi", 100 * MiB)),
    ("memory.available<100Mi", Threshold("100Mi", 100 * MiB)),
    ("memory.available < 1Gi", Threshold("1Gi", GiB)),
    ("500M", Threshold("500M", 500_000_000)),
    ("10%", Threshold("400Mi", 400 * MiB)),
    ("", None), (None, None), ("0", None), ("0%", None), ("memory.available<0", None),
])
def test_threshold_parsing(raw: str | None, want: Threshold | None) -> None:
    assert pressure.parse_threshold(raw, capacity=4000 * MiB) == want


@pytest.mark.parametrize("raw", ["nodefs.available<10%", "memory.available>1Gi", "lots",
                                 "150%", "-1Mi", "x%"])
def test_bad_thresholds_are_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        pressure.parse_threshold(raw, capacity=GiB)


def test_under_is_strictly_less_than() -> None:
    t = Threshold("100Mi", 100 * MiB)
    assert pressure.under(t, 100 * MiB - 1)
    assert not pressure.under(t, 100 * MiB)
    assert not pressure.under(None, 0)


def test_pressure_holds_for_the_transition_period() -> None:
    state = pressure.PressureState(transition_period=10)
    assert not state.observe(met=False, now=0)
    assert state.observe(met=True, now=1)
    assert state.observe(met=False, now=10.9)
    assert not state.observe(met=False, now=11)
    assert state.observe(met=True, now=12)


def _use(key: str, used: int, request: int = 0, prio: int = 0) -> PodUse:
    return PodUse(key, prio, request, (ContainerUse("c", used, request),))


def test_ranking_is_upstreams_rank_memory_pressure() -> None:
    """Over its request first (even a smaller one), then lower priority, then the larger
    use above the request."""
    big_within = _use("big-within-request", 900 * MiB, request=GiB)
    small_over = _use("small-over", 10 * MiB)
    large_over = _use("large-over", 300 * MiB)
    important_over = _use("important-over", 800 * MiB, prio=1000)
    burst_over = _use("burstable-over", 500 * MiB, request=300 * MiB)
    got = [p.key for p in pressure.rank([big_within, small_over, important_over,
                                         burst_over, large_over])]
    assert got == ["large-over", "burstable-over", "small-over", "important-over",
                   "big-within-request"]
    # within their requests: by priority, then by how far below the request
    a = _use("a", 100 * MiB, request=200 * MiB)
    b = _use("b", 100 * MiB, request=500 * MiB)
    c = _use("c", 10 * MiB, request=20 * MiB, prio=-5)
    assert [p.key for p in pressure.rank([b, a, c])] == ["c", "a", "b"]


def test_eviction_message_is_upstreams() -> None:
    pod = PodUse("x", 0, 64 * MiB, (ContainerUse("big", 200 * MiB, 0),
                                    ContainerUse("small", 1 * MiB, 64 * MiB),
                                    ContainerUse("odd", 12345, 0)))
    assert pressure.eviction_message(Threshold("100Mi", 100 * MiB), 50 * MiB, pod) == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available:"
        " 50Mi. Container big was using 200Mi, request is 0, has larger consumption of"
        " memory. Container odd was using 12345, request is 0, has larger consumption of"
        " memory. ")
    assert pressure.eviction_message(Threshold("1Gi", GiB), 51200 * 1024 + 1024,
                                     _use("y", 1, request=2)) == (
        "The node was low on resource: memory. Threshold quantity: 1Gi, available:"
        " 51201Ki. ")


def _pod(*containers: dict, inits: tuple[dict, ...] = (), **spec: object) -> dict:
    return {"spec": {"containers": list(containers), "initContainers": list(inits),
                     **spec}}


def _c(name: str = "c", requests: dict | None = None, limits: dict | None = None,
       **extra: object) -> dict:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}},
            **extra}


def test_requests_and_qos_as_upstream() -> None:
    pod = _pod(_c("a", {"memory": "64Mi"}), _c("b", limits={"memory": "32Mi"}),
               inits=(_c("init", {"memory": "1Gi"}),
                      _c("sidecar", {"memory": "16Mi"}, restartPolicy="Always")),
               overhead={"memory": "1Mi"})
    assert pressure.pod_memory_request(pod) == GiB + MiB
    small_init = _pod(_c("a", {"memory": "64Mi"}), inits=(_c("i", {"memory": "8Mi"}),))
    assert pressure.pod_memory_request(small_init) == 64 * MiB
    assert pressure.best_effort(_pod(_c(), _c("d", {"ephemeral-storage": "1Gi"})))
    assert not pressure.best_effort(_pod(_c(), _c("d", {"cpu": "100m"})))
    assert not pressure.best_effort(_pod(_c(), inits=(_c("i", limits={"memory": "1Mi"}),)))
    use = pressure.pod_use("k", _pod(_c("a", {"memory": "64Mi"}), _c("idle"), priority=7),
                           {"a": 100 * MiB})
    assert use == PodUse("k", 7, 64 * MiB, (ContainerUse("a", 100 * MiB, 64 * MiB),))
    assert use.bytes == 100 * MiB


def test_admission_refuses_only_best_effort_under_pressure() -> None:
    refusal = ("Evicted", "The node had condition: [MemoryPressure]. ")
    best = _pod(_c())
    assert pressure.admit(best, pressure=True) == refusal
    assert pressure.admit(best, pressure=False) is None
    assert pressure.admit(_pod(_c("c", {"memory": "1Mi"})), pressure=True) is None
    assert pressure.admit(_pod(_c(), priority=2_000_000_000), pressure=True) is None
    tolerant = _pod(_c(), tolerations=[{"key": "node.kubernetes.io/memory-pressure",
                                        "operator": "Exists", "effect": "NoSchedule"}])
    assert pressure.admit(tolerant, pressure=True) is None
    other = _pod(_c(), tolerations=[{"key": "node.kubernetes.io/disk-pressure",
                                     "operator": "Exists", "effect": "NoSchedule"}])
    assert pressure.admit(other, pressure=True) == refusal


def test_condition_fields_are_upstreams() -> None:
    assert pressure.condition_fields(True) == {
        "status": "True", "reason": "KubeletHasInsufficientMemory",
        "message": "kubelet has insufficient memory available"}
    assert pressure.condition_fields(False)["reason"] == "KubeletHasSufficientMemory"


def test_available_reads_mem_available(tmp_path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   51200 kB\n")
    assert memstats.available(str(path)) == 50 * MiB
    path.write_text("MemTotal: 100 kB\n")
    assert memstats.available(str(path)) is None
    assert memstats.available(str(tmp_path / "missing")) is None
    assert (memstats.available() or 0) > 0


def test_cgroup_working_set_drops_inactive_file(tmp_path) -> None:
    (tmp_path / "memory.current").write_text("1000000\n")
    (tmp_path / "memory.stat").write_text("anon 5\ninactive_file 300000\nactive_file 1\n")
    assert memstats.cgroup_working_set([str(tmp_path)], 2) == 700000
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.usage_in_bytes").write_text("4096\n")
    assert memstats.cgroup_working_set([str(tmp_path / "cpu"), str(v1)], 1) == 4096
    assert memstats.cgroup_working_set([str(tmp_path / "none")], 2) is None


def test_tree_rss_counts_the_tree_of_a_child_only() -> None:
    """A child that holds 64 MiB of anonymous memory, in a grandchild: counted from the
    child when the parent is right, nothing when it is not."""
    code = ("import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    b = bytearray(64 << 20)\n"
            "    for i in range(0, len(b), 4096): b[i] = 1\n"
            "    print('ready', flush=True); time.sleep(30); os._exit(0)\n"
            "os.wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        assert memstats.tree_anon_rss(proc.pid, parent=os.getpid()) >= 64 * MiB
        assert memstats.tree_anon_rss(proc.pid, parent=1) == 0
        assert memstats.tree_anon_rss(os.getpid(), parent=os.getpid()) == 0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the grandchild and its 64 MiB too
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
