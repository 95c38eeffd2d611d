"""Pods on the node: restarts, back-off, termination messages, logs, images, deletion,
environment and volumes from the API, service-account tokens, Services."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from localcluster.kube.addresses import networks_for
from localcluster.kubelet import eviction
from tests.localcluster.clusterkit import (
    SCALE,
    get,
    logs,
    main_status,
    needs_root,
    pod,
    running,
    try_logs,
    wait_for,
    wait_phase,
)

pytestmark = [needs_root, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("pods"))) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


def test_node_is_ready_with_capacity_and_heartbeat(kube: Client) -> None:
    node = kube.get(resources.NODES, "localcluster")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert int(node["status"]["capacity"]["cpu"]) >= 1
    lease = kube.get(resources.LEASES, "localcluster", "kube-node-lease")
    first = lease["spec"]["renewTime"]
    wait_for(lambda: kube.get(resources.LEASES, "localcluster", "kube-node-lease")["spec"][
        "renewTime"] != first, timeout=5, what="lease renewal")


def pod_prefix(cluster: Cluster) -> str:
    return networks_for(cluster.data_dir)[0].removesuffix("0.0/16")


def test_succeeded_pod_with_logs_and_termination_message(kube: Client, cluster: Cluster) -> None:
    kube.create(resources.PODS, pod("ok", "print", "hello", "stderr", "to stderr", "message",
                                 '{"reason": "Done"}', "exit", "0"), "default")
    p = wait_phase(kube, resources.PODS, "ok", "Succeeded")
    term = main_status(p)["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert term["message"] == '{"reason": "Done"}'
    assert p["status"]["podIP"].startswith(pod_prefix(cluster))
    assert logs(kube, "ok") == "hello\nto stderr\n"
    assert logs(kube, "ok", tailLines="1") == "to stderr\n"


def test_fallback_to_logs_on_error(kube: Client) -> None:
    kube.create(resources.PODS, pod("fallback", "print", "it broke", "exit", "4",
                                 terminationMessagePolicy="FallbackToLogsOnError"), "default")
    p = wait_phase(kube, resources.PODS, "fallback", "Failed")
    term = main_status(p)["state"]["terminated"]
    assert term["exitCode"] == 4 and term["reason"] == "Error"
    assert term["message"].strip() == "it broke"


def test_on_failure_restarts_with_backoff_until_success(kube: Client, cluster: Cluster) -> None:
    # An emptyDir survives container restarts: fail twice, then succeed.
    script = ("import os,sys; p='/scratch/n'; n=int(open(p).read()) if os.path.exists(p)"
              " else 0; open(p,'w').write(str(n+1)); print('run', n);"
              " sys.exit(0 if n >= 2 else 1)")
    p = pod("flaky", restart="OnFailure", command=["python", "-c", script],
            volumes=[{"name": "w", "emptyDir": {}}],
            mounts=[{"name": "w", "mountPath": "/scratch"}])
    t0 = time.monotonic()
    kube.create(resources.PODS, p, "default")
    done = wait_phase(kube, resources.PODS, "flaky", "Succeeded")
    elapsed = time.monotonic() - t0
    cs = main_status(done)
    assert cs["restartCount"] == 2
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    # Back-off 10 s then 20 s, scaled: at least 0.2 + 0.4 s between the three runs.
    assert elapsed >= 30 * SCALE
    assert logs(kube, "flaky") == "run 2\n"
    assert logs(kube, "flaky", previous="true") == "run 1\n"


def test_always_restarts_into_crash_loop_back_off(kube: Client) -> None:
    kube.create(resources.PODS, pod("crashy", "exit", "3", restart="Always"), "default")

    def crashloop() -> bool:
        cs = main_status(get(kube, resources.PODS, "crashy"))
        return cs.get("restartCount", 0) >= 3 and "waiting" in cs.get("state", {})

    wait_for(crashloop, timeout=30, what="CrashLoopBackOff")
    p = get(kube, resources.PODS, "crashy")
    cs = main_status(p)
    assert p["status"]["phase"] == "Running"
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["lastState"]["terminated"]["exitCode"] == 3
    reasons = [e["reason"] for e in kube.list(resources.EVENTS, "default")
               if e["involvedObject"]["name"] == "crashy"]
    assert {"Scheduled", "Started", "BackOff"} <= set(reasons)
    kube.delete(resources.PODS, "crashy", "default")


def test_never_does_not_restart(kube: Client, cluster: Cluster) -> None:
    kube.create(resources.PODS, pod("once", "print", "ran", "exit", "2", restart="Never"),
                "default")
    p = wait_phase(kube, resources.PODS, "once", "Failed")
    time.sleep(0.5)
    assert main_status(get(kube, resources.PODS, "once"))["restartCount"] == 0
    assert main_status(p)["state"]["terminated"]["exitCode"] == 2
    assert logs(kube, "once") == "ran\n"  # ran once, and its log outlives the run
    assert cluster.node is not None
    pod_dir = os.path.join(cluster.node.pods_dir, p["metadata"]["uid"])
    assert os.path.isdir(pod_dir)
    kube.delete(resources.PODS, "once", "default")
    wait_for(lambda: not os.path.exists(pod_dir), what="pod directory removal")


def test_an_emptydir_over_its_size_limit_evicts_the_pod(kube: Client, cluster: Cluster) -> None:
    """As the kubelet's eviction manager: a pod that writes more than its emptyDir's
    sizeLimit is killed and ends Failed, reason Evicted, not restarted (restartPolicy
    Always), with the kubelet's message and an Evicted event. One under its limit runs
    on. Without it, an emptyDir is a directory on the node's disk that nothing bounds."""
    def scratch_pod(name: str, limit: str, mib: int, *then: str, restart: str) -> dict:
        return pod(name, "fill", "/scratch/f", str(mib), *then, restart=restart,
                   volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": limit}}],
                   mounts=[{"name": "scratch", "mountPath": "/scratch"}])

    kube.create(resources.PODS, scratch_pod("hog", "4Mi", 8, "sleep", "300", restart="Always"),
                "default")
    kube.create(resources.PODS, scratch_pod("tidy", "16Mi", 4, "sleep", "6", "exit", "0",
                                         restart="Never"), "default")
    p = wait_phase(kube, resources.PODS, "hog", "Failed",
                   timeout=eviction.CHECK_EVERY + 30)
    assert p["status"]["reason"] == "Evicted", p["status"]
    assert p["status"]["message"] == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". '
    cs = main_status(p)
    assert "terminated" in cs["state"] and cs["restartCount"] == 0, cs
    time.sleep(eviction.CHECK_EVERY + 1)
    assert main_status(get(kube, resources.PODS, "hog"))["restartCount"] == 0
    events = [e for e in kube.list(resources.EVENTS, "default")
              if e["involvedObject"]["name"] == "hog" and e["reason"] == "Evicted"]
    assert events and events[0]["type"] == "Warning"
    assert wait_phase(kube, resources.PODS, "tidy", ("Succeeded", "Failed"),
                      timeout=60)["status"]["phase"] == "Succeeded"
    assert "filled /scratch/f" in logs(kube, "tidy")
    for name in ("hog", "tidy"):
        kube.delete(resources.PODS, name, "default")


def test_ephemeral_storage_limits_evict_a_container_or_a_pod_over_them(kube: Client) -> None:
    """As the kubelet's eviction manager: a container that writes more into its own
    writable layer (its /tmp, in the node's memory) than its ``limits.ephemeral-storage``
    is evicted with the kubelet's message and not restarted; a pod whose containers and
    emptyDirs together hold more than the sum of its containers' limits is evicted too
    (checked first, as upstream: a pod of one container over its limit gets this
    message); one under its limits runs to the end."""
    def limited(name: str, limit: str, *args: str, restart: str = "Always",
                **kw: object) -> dict:
        return pod(name, *args, restart=restart, **kw,
                   resources={"limits": {"ephemeral-storage": limit}})

    # a second, idle container whose limit keeps the pod's total (68Mi) above the first
    # one's 8 MiB: the container's own limit is what it is over
    hog = limited("layer-hog", "4Mi", "fill", "/tmp/f", "8", "sleep", "300")
    idle = limited("idle", "64Mi", "sleep", "300")["spec"]["containers"][0]
    hog["spec"]["containers"].append({**idle, "name": "idle"})
    kube.create(resources.PODS, hog, "default")
    kube.create(resources.PODS, limited(
        "pod-hog", "16Mi", "fill", "/scratch/f", "20", "sleep", "300",
        volumes=[{"name": "scratch", "emptyDir": {}}],
        mounts=[{"name": "scratch", "mountPath": "/scratch"}]), "default")
    kube.create(resources.PODS, limited("layer-tidy", "16Mi", "fill", "/tmp/f", "4",
                                     "sleep", "6", "exit", "0", restart="Never"), "default")
    for name, message in (
            ("layer-hog", 'Container main exceeded its local ephemeral storage limit "4Mi". '),
            ("pod-hog", "Pod ephemeral local storage usage exceeds the total limit of"
                        " containers 16Mi. ")):
        p = wait_phase(kube, resources.PODS, name, "Failed", timeout=eviction.CHECK_EVERY + 30)
        assert p["status"]["reason"] == "Evicted", p["status"]
        assert p["status"]["message"] == message
        assert main_status(p)["restartCount"] == 0
        events = [e for e in kube.list(resources.EVENTS, "default")
                  if e["involvedObject"]["name"] == name and e["reason"] == "Evicted"]
        assert events and events[0]["message"] == message
    assert wait_phase(kube, resources.PODS, "layer-tidy", ("Succeeded", "Failed"),
                      timeout=60)["status"]["phase"] == "Succeeded"
    assert "filled /tmp/f" in logs(kube, "layer-tidy")
    for name in ("layer-hog", "pod-hog", "layer-tidy"):
        kube.delete(resources.PODS, name, "default")


def test_unknown_image_is_err_image_pull(kube: Client) -> None:
    kube.create(resources.PODS, pod("nginx", image="docker.io/library/nginx:1.27"), "default")

    def waiting() -> dict:
        return main_status(get(kube, resources.PODS, "nginx")).get("state", {}).get("waiting", {})

    w = wait_for(lambda: waiting().get("reason") in ("ErrImagePull", "ImagePullBackOff") and
                 waiting(), what="ErrImagePull")
    assert 'image "docker.io/library/nginx:1.27" is not available' in w["message"]
    assert get(kube, resources.PODS, "nginx")["status"]["phase"] == "Pending"
    wait_for(lambda: waiting().get("reason") == "ImagePullBackOff", what="ImagePullBackOff")
    kube.delete(resources.PODS, "nginx", "default")


def test_image_that_names_a_missing_program_crashes(kube: Client) -> None:
    kube.create(resources.PODS, pod("launcher", image="rootdisk/launcher:v0",
                                 command=["python", "-m", "no_such_program_yet"]), "default")
    p = wait_phase(kube, resources.PODS, "launcher", "Failed")
    assert main_status(p)["state"]["terminated"]["exitCode"] == 1
    assert "No module named no_such_program_yet" in logs(kube, "launcher")


def test_graceful_deletion_sigterm_then_final_delete(kube: Client) -> None:
    kube.create(resources.PODS, pod("polite", "trap-term", "0", "print", "up", "sleep", "600",
                                 restart="Always"), "default")
    wait_for(lambda: "up" in try_logs(kube, "polite"), what="pod running")
    t0 = time.monotonic()
    kube.delete(resources.PODS, "polite", "default", grace_period=30)
    wait_for(lambda: kube.get_or_none(resources.PODS, "polite", "default") is None,
             what="pod removal")
    assert time.monotonic() - t0 < 10  # it stopped on SIGTERM, long before 30 s


def test_grace_period_ends_in_sigkill(kube: Client) -> None:
    kube.create(resources.PODS, pod("stubborn", "ignore-term", "print", "up", "sleep", "600",
                                 restart="Always"), "default")
    wait_for(lambda: "up" in try_logs(kube, "stubborn"), what="pod running")
    t0 = time.monotonic()
    kube.delete(resources.PODS, "stubborn", "default", grace_period=2)
    p = wait_for(lambda: (lambda o: o if o and o["metadata"].get("deletionTimestamp") else None)(
        kube.get_or_none(resources.PODS, "stubborn", "default")), what="deletionTimestamp")
    assert p["metadata"]["deletionGracePeriodSeconds"] == 2
    wait_for(lambda: kube.get_or_none(resources.PODS, "stubborn", "default") is None,
             what="pod removal")
    assert 1.8 <= time.monotonic() - t0 < 10


def test_env_and_volumes_from_configmaps_secrets_and_downward_api(kube: Client) -> None:
    kube.create(resources.CONFIGMAPS, {"metadata": {"name": "cfg"}, "data": {"mode": "fast",
                                                                          "file.txt": "cm"}},
                "default")
    kube.create(resources.SECRETS, {"metadata": {"name": "creds"}, "data": {
        "password": base64.b64encode(b"s3cret").decode()}}, "default")
    env = [
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                           "divisor": "1Mi"}}},
        {"name": "COMBINED", "value": "$(MODE)-$(NS)"},
    ]
    vols = [{"name": "c", "configMap": {"name": "cfg"}},
            {"name": "s", "secret": {"secretName": "creds"}},
            {"name": "d", "downwardAPI": {"items": [
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]
    mounts = [{"name": "c", "mountPath": "/etc/cfg"}, {"name": "s", "mountPath": "/secret"},
              {"name": "d", "mountPath": "/info"}]
    p = pod("envy", "env", "MODE", "env", "PASSWORD", "env", "NS", "env", "MEM",
            "env", "COMBINED", "read", "/etc/cfg/file.txt", "read", "/secret/password",
            "read", "/info/name", "env", "MY_IP", env=env, volumes=vols, mounts=mounts,
            resources={"limits": {"memory": "256Mi"}})
    kube.create(resources.PODS, p, "default")
    done = wait_phase(kube, resources.PODS, "envy", ("Succeeded", "Failed"))
    out = logs(kube, "envy").splitlines()
    assert done["status"]["phase"] == "Succeeded", out
    assert out[:8] == ["MODE=fast", "PASSWORD=s3cret", "NS=default", "MEM=256",
                       "COMBINED=fast-default", "read: cm", "read: s3cret", "read: envy"]
    assert out[8] == f"MY_IP={done['status']['podIP']}"


def test_missing_secret_key_is_create_container_config_error(kube: Client) -> None:
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]
    kube.create(resources.PODS, pod("noconf", "exit", "0", env=env), "default")

    def waiting() -> dict:
        return main_status(get(kube, resources.PODS, "noconf")).get("state", {}).get("waiting", {})

    w = wait_for(lambda: waiting().get("reason") == "CreateContainerConfigError" and waiting(),
                 what="CreateContainerConfigError")
    assert w["message"] == 'secret "nope" not found'
    kube.delete(resources.PODS, "noconf", "default")


def test_pod_talks_to_the_api_with_its_own_token_under_rbac(kube: Client) -> None:
    kube.create(resources.PODS, pod("denied", "whoami"), "default")
    wait_phase(kube, resources.PODS, "denied", "Succeeded")
    assert logs(kube, "denied").strip() == "whoami: 403"
    rbac = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "roles")
    bindings = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
    kube.create(rbac, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, "default")
    kube.create(bindings, {"metadata": {"name": "default-reads-pods"},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                       "name": "pod-reader"},
                           "subjects": [{"kind": "ServiceAccount", "name": "default",
                                         "namespace": "default"}]}, "default")
    kube.create(resources.PODS, pod("allowed", "whoami"), "default")
    wait_phase(kube, resources.PODS, "allowed", "Succeeded")
    assert logs(kube, "allowed").strip() == "whoami: 200 allowed"


def test_service_gets_cluster_ip_endpoints_and_resolves(kube: Client, cluster: Cluster) -> None:
    for name in ("web-a", "web-b"):
        p = pod(name, "serve", "8080", restart="Always")
        p["metadata"]["labels"] = {"app": "web"}
        p["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8080}]
        kube.create(resources.PODS, p, "default")
    kube.create(resources.SERVICES, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}, "default")
    svc = wait_for(lambda: (lambda s: s if s["spec"].get("clusterIP") else None)(
        get(kube, resources.SERVICES, "web")), what="clusterIP")
    assert svc["spec"]["clusterIP"].startswith(
        networks_for(cluster.data_dir)[1].removesuffix("0.0/16"))

    def addresses() -> list[str]:
        ep = kube.get_or_none(resources.ENDPOINTS, "web", "default") or {}
        return sorted(a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or [])

    ips = wait_for(lambda: len(addresses()) == 2 and addresses(), what="two endpoints")
    assert all(ip.startswith(pod_prefix(cluster)) for ip in ips) and ips[0] != ips[1]
    # Both pods serve port 8080 at once: each on its own pod IP.
    wait_for(lambda: all("serving" in try_logs(kube, n) for n in ("web-a", "web-b")),
             what="servers up")
    bodies = set()
    for ip in ips:
        with urllib.request.urlopen(f"http://{ip}:8080/", timeout=5) as resp:
            bodies.add(resp.read().decode())
    assert bodies == {"hello from web-a", "hello from web-b"}
    assert cluster.api is not None
    resolver = cluster.api.server.backend.webhooks.resolver  # what webhook calls go through
    assert resolver is not None
    host, port = resolver("default", "web", 80)
    assert host in ips and port == 8080
    kube.delete(resources.PODS, "web-a", "default", grace_period=1)
    wait_for(lambda: len(addresses()) == 1, what="endpoint removal")
    kube.delete(resources.PODS, "web-b", "default", grace_period=1)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_logs(kube: Client, cluster: Cluster) -> None:
    kube.create(resources.PODS, pod("kl", "print", "line one", "print", "line two"), "default")
    wait_phase(kube, resources.PODS, "kl", "Succeeded")
    out = subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig, "logs", "kl"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout == "line one\nline two\n"


def test_init_containers_run_first_and_a_failure_fails_the_pod(kube: Client) -> None:
    vols = [{"name": "w", "emptyDir": {}}]
    mounts = [{"name": "w", "mountPath": "/shared"}]
    p = pod("inited", "read", "/shared/ready", volumes=vols, mounts=mounts)
    p["spec"]["initContainers"] = [{"name": "prep", "image": p["spec"]["containers"][0]["image"],
                                    "args": ["write", "/shared/ready", "yes"],
                                    "volumeMounts": mounts}]
    kube.create(resources.PODS, p, "default")
    done = wait_phase(kube, resources.PODS, "inited", ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert logs(kube, "inited") == "read: yes\n"
    bad = pod("badinit", "print", "never")
    bad["spec"]["initContainers"] = [{"name": "prep", "image": bad["spec"]["containers"][0][
        "image"], "args": ["exit", "5"]}]
    kube.create(resources.PODS, bad, "default")
    failed = wait_phase(kube, resources.PODS, "badinit", "Failed")
    assert failed["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 5
    assert main_status(failed)["state"]["waiting"]["reason"] == "PodInitializing"


def test_follow_logs_streams_until_the_container_exits(kube: Client) -> None:
    kube.create(resources.PODS, pod("chatty", "print", "one", "sleep", "1", "print", "two"),
                "default")
    wait_for(lambda: "one" in try_logs(kube, "chatty"), what="first line")
    t0 = time.monotonic()
    out = logs(kube, "chatty", follow="true")
    assert out == "one\ntwo\n"
    assert time.monotonic() - t0 < 10  # the stream ended with the container


def test_projected_and_host_path_volumes(kube: Client, tmp_path) -> None:
    host_dir = tmp_path / "host"
    vols = [
        {"name": "api", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                                   "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
        {"name": "host", "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"}},
    ]
    mounts = [{"name": "api", "mountPath": "/var/run/secrets/tokens"},
              {"name": "host", "mountPath": "/hostdir"}]
    kube.create(resources.PODS, pod("proj", "read", "/var/run/secrets/tokens/namespace",
                                 "read", "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                                 "write", "/hostdir/out", "from pod", volumes=vols,
                                 mounts=mounts), "default")
    done = wait_phase(kube, resources.PODS, "proj", ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", try_logs(kube, "proj")
    assert logs(kube, "proj") == "read: default\nread: default\n"
    assert (host_dir / "out").read_text() == "from pod"


def test_readiness_probe_gates_ready_and_endpoints(kube: Client) -> None:
    p = pod("slowweb", "sleep", "1.5", "serve", "8081", restart="Always",
            readinessProbe={"httpGet": {"path": "/", "port": 8081}, "periodSeconds": 1})
    p["metadata"]["labels"] = {"app": "slowweb"}
    kube.create(resources.PODS, p, "default")
    kube.create(resources.SERVICES, {"metadata": {"name": "slowweb"}, "spec": {
        "selector": {"app": "slowweb"}, "ports": [{"port": 80, "targetPort": 8081}]}},
        "default")
    wait_for(lambda: main_status(get(kube, resources.PODS, "slowweb")).get("state", {}).get(
        "running"), what="running")
    cs = main_status(get(kube, resources.PODS, "slowweb"))
    assert cs["ready"] is False  # running, but the server is not listening yet
    wait_for(lambda: main_status(get(kube, resources.PODS, "slowweb"))["ready"], what="ready")
    # the endpoints controller follows the pod's readiness a moment later: until then the
    # subset lists the address as not ready
    ep = wait_for(lambda: [s for s in (kube.get_or_none(resources.ENDPOINTS, "slowweb", "default")
                                       or {}).get("subsets") or [] if s.get("addresses")],
                  what="a ready endpoint address")
    assert ep[0]["addresses"][0]["ip"] == get(kube, resources.PODS, "slowweb")["status"]["podIP"]
    kube.delete(resources.PODS, "slowweb", "default", grace_period=1)


def test_liveness_probe_failure_restarts_the_container(kube: Client) -> None:
    p = pod("unhealthy", "print", "up", "sleep", "600", restart="Always",
            livenessProbe={"tcpSocket": {"port": 9}, "periodSeconds": 1,
                           "failureThreshold": 1})
    p["spec"]["terminationGracePeriodSeconds"] = 1
    kube.create(resources.PODS, p, "default")
    wait_for(lambda: main_status(get(kube, resources.PODS, "unhealthy")).get("restartCount", 0)
             >= 1, what="restart after liveness failure")
    reasons = [e["reason"] for e in kube.list(resources.EVENTS, "default")
               if e["involvedObject"]["name"] == "unhealthy"]
    assert "Unhealthy" in reasons
    kube.delete(resources.PODS, "unhealthy", "default", grace_period=1)


def test_logs_with_timestamps_and_since(kube: Client) -> None:
    kube.create(resources.PODS, pod("stamped", "print", "early", "sleep", "2", "print", "late"),
                "default")
    wait_phase(kube, resources.PODS, "stamped", "Succeeded")
    lines = logs(kube, "stamped", timestamps="true").splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["early", "late"]
    assert lines[0].split(" ")[0].endswith("Z")
    assert logs(kube, "stamped", sinceSeconds="1") == "late\n"


def test_node_selector_that_does_not_match_leaves_the_pod_pending(kube: Client) -> None:
    p = pod("elsewhere", "exit", "0")
    p["spec"]["nodeSelector"] = {"kubernetes.io/os": "windows"}
    kube.create(resources.PODS, p, "default")

    def unschedulable() -> dict | None:
        conds = get(kube, resources.PODS, "elsewhere").get("status", {}).get("conditions") or []
        return next((c for c in conds if c.get("reason") == "Unschedulable"), None)

    cond = wait_for(unschedulable, what="Unschedulable")
    assert "didn't match Pod's node affinity/selector" in cond["message"]
    assert not get(kube, resources.PODS, "elsewhere")["spec"].get("nodeName")
    linux = pod("linux", "exit", "0")
    linux["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    kube.create(resources.PODS, linux, "default")
    wait_phase(kube, resources.PODS, "linux", "Succeeded")
    kube.delete(resources.PODS, "elsewhere", "default")
