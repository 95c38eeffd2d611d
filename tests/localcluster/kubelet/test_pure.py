"""Table tests of the kubelet's pure decisions: images, argv, restarts, phases, IPs."""

from __future__ import annotations

import pytest

from localcluster.kube.addresses import AddressExhausted, AddressPool
from localcluster.kubelet import images, restarts, status, worker
from localcluster.kubelet.probes import ProbeTracker
from localcluster.kubelet.status import ContainerRecord, Running, Terminated, Waiting
from rootdisk.images import IMAGES


@pytest.mark.parametrize(("ref", "name"), [
    ("rootdisk/importer", "rootdisk/importer"),
    ("rootdisk/importer:v1.2", "rootdisk/importer"),
    ("quay.io/rootdisk/importer:latest", "rootdisk/importer"),
    ("localhost:5000/rootdisk/cloner", "rootdisk/cloner"),
    ("localhost:5000/x/rootdisk/launcher:1@sha256:abcd", "rootdisk/launcher"),
    ("busybox", "busybox"),
    ("docker.io/library/busybox:1.36", "library/busybox"),
])
def test_image_name(ref: str, name: str) -> None:
    assert images.image_name(ref) == name


def test_image_table() -> None:
    table = images.ImageTable.merged(IMAGES, {"rootdisk/testbox": ["python", "box.py"]})
    assert table.entry_point("reg:5000/rootdisk/importer:v1") == ("python", "-m", "importer")
    assert table.entry_point("rootdisk/operator") == ("python", "-m", "rootdisk.operator")
    assert table.entry_point("rootdisk/testbox:t") == ("python", "box.py")
    with pytest.raises(images.ImageNotFound, match='image "nginx:1" is not available'):
        table.entry_point("nginx:1")


def test_extra_images_from_env() -> None:
    assert images.load_extra_images('{"rootdisk/x": ["a", "b"]}') == {"rootdisk/x": ("a", "b")}
    assert images.load_extra_images(None) == {}
    with pytest.raises(ValueError, match="LOCALCLUSTER_IMAGES"):
        images.load_extra_images('{"rootdisk/x": "a"}')
    with pytest.raises(ValueError, match="LOCALCLUSTER_IMAGES"):
        images.load_extra_images("{nope")


ENTRY = ("python", "-m", "importer")


@pytest.mark.parametrize(("command", "args", "argv"), [
    (None, None, ["python", "-m", "importer"]),
    (None, ["--x", "$(A)"], ["python", "-m", "importer", "--x", "1"]),
    (["sh", "-c"], None, ["sh", "-c"]),
    (["sh", "-c"], ["echo $(A) $$(A) $(NOPE)"], ["sh", "-c", "echo 1 $(A) $(NOPE)"]),
    (["$(A)"], [], ["1"]),
])
def test_container_argv(command, args, argv) -> None:
    assert images.container_argv(entry_point=ENTRY, command=command, args=args,
                                 env={"A": "1"}) == argv


@pytest.mark.parametrize(("policy", "code", "restart"), [
    ("Always", 0, True), ("Always", 1, True),
    ("OnFailure", 0, False), ("OnFailure", 137, True),
    ("Never", 0, False), ("Never", 2, False),
])
def test_should_restart(policy: str, code: int, restart: bool) -> None:
    assert restarts.should_restart(policy=policy, exit_code=code) is restart


def test_should_restart_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="restartPolicy"):
        restarts.should_restart(policy="Sometimes", exit_code=0)


S = restarts.BackoffSettings()


@pytest.mark.parametrize(("previous", "ran_for", "delay"), [
    (None, 1, 10), (10, 1, 20), (20, 1, 40), (160, 1, 300), (300, 1, 300),
    (300, 599, 300), (300, 600, 10), (300, 3600, 10),
])
def test_backoff(previous: float | None, ran_for: float, delay: float) -> None:
    assert restarts.next_backoff(previous=previous, ran_for=ran_for, settings=S) == delay


def test_backoff_scaled_for_tests() -> None:
    fast = restarts.BackoffSettings(scale=0.01)
    assert restarts.next_backoff(previous=None, ran_for=0, settings=fast) == pytest.approx(0.1)
    assert restarts.next_backoff(previous=2.9, ran_for=0, settings=fast) == pytest.approx(3.0)
    assert restarts.next_backoff(previous=3.0, ran_for=6, settings=fast) == pytest.approx(0.1)


T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"
CREATING = Waiting("ContainerCreating")
RUN = Running(T0)
OK = Terminated(0, T0, T1)
BAD = Terminated(2, T0, T1)


def rec(state, last=None, done=False, restarts_=0) -> ContainerRecord:
    return ContainerRecord(name="c", image="rootdisk/x", state=state, last_state=last,
                           done=done, restart_count=restarts_)


@pytest.mark.parametrize(("policy", "records", "phase"), [
    ("Never", [], "Pending"),
    ("Never", [rec(CREATING)], "Pending"),
    ("Never", [rec(Waiting("ErrImagePull"))], "Pending"),
    ("Never", [rec(RUN)], "Running"),
    ("Never", [rec(OK, done=True)], "Succeeded"),
    ("Never", [rec(BAD, done=True)], "Failed"),
    ("Never", [rec(OK, done=True), rec(BAD, done=True)], "Failed"),
    ("Never", [rec(OK, done=True), rec(RUN)], "Running"),
    ("OnFailure", [rec(OK, done=True)], "Succeeded"),
    ("OnFailure", [rec(Waiting("CrashLoopBackOff"), last=BAD, restarts_=1)], "Running"),
    ("Always", [rec(Waiting("CrashLoopBackOff"), last=OK, restarts_=3)], "Running"),
    ("Always", [rec(RUN), rec(CREATING)], "Pending"),
])
def test_pod_phase(policy: str, records: list[ContainerRecord], phase: str) -> None:
    assert status.pod_phase(policy=policy, records=records) == phase


def test_pod_status_shape() -> None:
    st = status.pod_status(
        policy="Never", records=[rec(Terminated(1, T0, T1, message="boom"), done=True)],
        pod_ip="127.1.0.1", host_ip="127.0.0.1", start_time=T0, now=T1)
    assert st["phase"] == "Failed"
    assert st["podIP"] == "127.1.0.1" and st["podIPs"] == [{"ip": "127.1.0.1"}]
    cs = st["containerStatuses"][0]
    assert cs["state"]["terminated"] == {"exitCode": 1, "reason": "Error", "startedAt": T0,
                                         "finishedAt": T1, "message": "boom"}
    assert cs["ready"] is False and cs["lastState"] == {}
    ready = {c["type"]: c["status"] for c in st["conditions"]}
    assert ready == {"PodScheduled": "True", "Initialized": "True",
                     "ContainersReady": "False", "Ready": "False"}
    running = status.pod_status(policy="Always", records=[rec(RUN)], pod_ip="", host_ip="h",
                                start_time=T0, now=T1)
    assert {c["type"]: c["status"] for c in running["conditions"]}["Ready"] == "True"
    assert "podIP" not in running


def test_terminated_reason() -> None:
    assert status.terminated_reason(0) == "Completed"
    assert status.terminated_reason(1) == "Error"
    assert status.terminated_reason(137, oom_killed=True) == "OOMKilled"


def test_address_pool() -> None:
    pool = AddressPool("127.1.0.0/30")
    a = pool.allocate("pod-a")
    assert a == "127.1.0.1" and pool.allocate("pod-a") == a
    b = pool.allocate("pod-b")
    assert b == "127.1.0.2"
    with pytest.raises(AddressExhausted):
        pool.allocate("pod-c")
    pool.release("pod-a")
    assert pool.allocate("pod-c") == "127.1.0.1"
    assert pool.reserve("127.1.0.2", "pod-b") and not pool.reserve("127.1.0.2", "pod-z")
    assert not pool.reserve("127.9.0.1", "pod-z")
    with pytest.raises(ValueError, match="not inside 127"):
        AddressPool("10.0.0.0/8")


def test_address_pool_skips_addresses_in_use_on_the_machine() -> None:
    # Another cluster whose pods share this range already listens on 127.1.0.1.
    pool = AddressPool("127.1.0.0/29", busy=lambda: {"127.1.0.1", "127.0.0.1"})
    assert pool.allocate("pod-a") == "127.1.0.2"


def test_proc_net_tables_give_bound_addresses() -> None:
    from localcluster.kube.addresses import parse_proc_net

    table = [
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid",
        "   0: 0100017F:20FB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   107",
        "   1: 0100007F:1F90 0200007F:D431 01 00000000:00000000 00:00000000 00000000     0",
        "garbage",
    ]
    assert parse_proc_net(table) == {"127.1.0.1", "127.0.0.1"}


def test_a_listening_socket_is_seen_as_busy() -> None:
    import socket

    from localcluster.kube.addresses import listening_addresses

    with socket.socket() as sock:
        sock.bind(("127.1.0.77", 0))
        sock.listen()
        assert "127.1.0.77" in listening_addresses()


def test_networks_for_data_dirs() -> None:
    from localcluster.kube.addresses import networks_for

    pods, services = networks_for("/var/lib/a")
    assert networks_for("/var/lib/a") == (pods, services)
    first = int(pods.split(".")[1])
    assert first % 2 == 0 and 16 <= first <= 238
    assert services == f"127.{first + 1}.0.0/16"
    seen = {networks_for(f"/tmp/cluster-{i}")[0] for i in range(20)}
    assert len(seen) > 10  # spread out


def _slot(*, probes: tuple[float | None, float | None] = (None, None),
          done: bool = False) -> worker.Slot:
    s = worker.Slot(spec={"name": "c"}, record=ContainerRecord(
        name="c", image="i", state=Running("t"), done=done))
    readiness, liveness = probes
    if readiness is not None:
        s.readiness = ProbeTracker({"initialDelaySeconds": readiness}, started=0.0)
    if liveness is not None:
        s.liveness = ProbeTracker({"initialDelaySeconds": liveness}, started=0.0)
    return s


@pytest.mark.parametrize(("slots", "steady", "wait"), [
    ([_slot()], False, worker.TICK),  # something under way: the short tick
    ([_slot(probes=(100.2, None))], False, worker.TICK),
    ([_slot()], True, worker.IDLE_TICK),  # steady, no probe: once a second
    ([_slot(probes=(100.25, 100.5))], True, 0.25),  # the first probe due
    ([_slot(probes=(None, 100.5)), _slot(probes=(100.75, None))], True, 0.5),
    ([_slot(probes=(99.0, None))], True, 0.0),  # overdue: look now
    ([_slot(probes=(100.1, None), done=True), _slot()], True, worker.IDLE_TICK),
    ([_slot(probes=(105.0, None))], True, worker.IDLE_TICK),
])
def test_next_look(slots: list[worker.Slot], steady: bool, wait: float) -> None:
    """How long a pod worker sleeps unwoken: probes are run on time, a steady pod is not
    looked at ten times a second (an idle cluster's CPU), anything under way is."""
    assert worker.next_look(slots, now=100.0, steady=steady) == pytest.approx(wait)
