"""virt-api behind localcluster's aggregator: webhooks refuse bad VMs naming the field,
start/stop/restart change the VM as upstream, only allowed users get through."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeclient import Client, KubeError, Resource
from kubeclient.resources import SERVICEACCOUNTS, VMS

from .conftest import ROOT, kube_for
from .virtapi_harness import NAMESPACES, running

EXAMPLE = ROOT / "manifests" / "examples" / "vm-datavolume.yaml"
BASE = "/apis/subresources.kubevirt.io/v1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Client, int]]:
    with running(tmp_path_factory.mktemp("apiserver")) as cluster:
        yield cluster


@pytest.fixture
def ns(cluster: tuple[object, Client, int]) -> str:
    name = f"va-{uuid.uuid4().hex[:8]}"
    cluster[1].create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": name}})
    return name


def example(**spec: object) -> dict:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["spec"].update(spec)
    return vm


def put(kube: Client, ns: str, name: str, action: str, body: object = None) -> tuple[int, dict]:
    try:
        kube.request("PUT", f"{BASE}/namespaces/{ns}/virtualmachines/{name}/{action}",
                     body=body if body is not None else {})
        return 202, {}
    except KubeError as err:
        return err.status, err.body if isinstance(err.body, dict) else {"raw": err.body}


def test_webhook_refuses_with_the_field(cluster: tuple[object, Client, int], ns: str) -> None:
    kube = cluster[1]
    bad = example(running=True)
    with pytest.raises(KubeError) as err:
        kube.create(VMS, bad, ns)
    assert err.value.status in (400, 403, 422)
    assert "spec.running: Running and RunStrategy are mutually exclusive" in err.value.message
    vmi_bad = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
               "metadata": {"name": "x"}, "spec": {"domain": {"devices": {
                   "disks": [{"name": "d"}]}}}}
    with pytest.raises(KubeError) as err:
        kube.create(Resource("kubevirt.io", "v1", "virtualmachineinstances"), vmi_bad, ns)
    assert "spec.domain.devices.disks[0].name: volume 'd' not found" in err.value.message


def test_running_is_accepted_with_a_warning(cluster: tuple[object, Client, int], ns: str) -> None:
    kube, port = cluster[1], cluster[2]
    vm = example()
    del vm["spec"]["runStrategy"]
    vm["spec"]["running"] = False
    assert kube.create(VMS, vm, ns)["spec"]["running"] is False
    # what the webhook itself answers (test_kubectl_webhooks checks the Warning header
    # the API server makes of it, as kubectl shows it)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "CREATE", "namespace": ns, "object": vm,
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"}}}
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{port}/validate/virtualmachines",
                                 data=json.dumps(review).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        answer = json.loads(resp.read())["response"]
    assert answer["allowed"] is True
    # only upstream's warning: an interface without ports gets none (test_webhook_rules)
    assert answer["warnings"] == ["spec.running is deprecated, please use spec.runStrategy "
                                  "instead."]


def test_start_stop_restart(cluster: tuple[object, Client, int], ns: str) -> None:
    kube = cluster[1]
    kube.create(VMS, example(runStrategy="Halted"), ns)
    assert put(kube, ns, "demo", "start", {"dryRun": ["All"]})[0] == 202
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"
    assert put(kube, ns, "demo", "start")[0] == 202
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Always"
    code, body = put(kube, ns, "demo", "start")
    assert code == 409 and "Always does not support manual start requests" in body["message"]
    assert put(kube, ns, "demo", "stop")[0] == 202
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"
    code, body = put(kube, ns, "demo", "restart")
    assert code == 409 and "Halted does not support manual restart" in body["message"]
    code, body = put(kube, ns, "demo", "stop", {"gracePeriod": "now"})
    assert code == 400 and body["message"].startswith("StopOptions.gracePeriod")
    code, body = put(kube, ns, "ghost", "start")
    assert code == 404


def test_manual_start_writes_a_state_change_request(cluster: tuple[object, Client, int],
                                                   ns: str) -> None:
    kube = cluster[1]
    kube.create(VMS, example(runStrategy="Manual"), ns)
    assert put(kube, ns, "demo", "start")[0] == 202
    assert kube.get(VMS, "demo", ns)["status"]["stateChangeRequests"] == [{"action": "Start"}]
    code, body = put(kube, ns, "demo", "start")
    assert code == 409 and "already underway" in body["message"]


def test_users_need_rbac_on_the_subresource(cluster: tuple[object, Client, int], ns: str) -> None:
    server, kube, _ = cluster
    kube.create(VMS, example(runStrategy="Halted"), ns)
    kube.create(SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "robot"}}, ns)
    token = server.token_for_service_account(ns, "robot")  # type: ignore[attr-defined]
    robot = kube_for(server, token)
    try:
        code, body = put(robot, ns, "demo", "start")
        assert code == 403 and "virtualmachines/start" in body["message"]
        rbac = Resource("rbac.authorization.k8s.io", "v1", "roles")
        kube.create(rbac, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                           "metadata": {"name": "starter"}, "rules": [{
                               "apiGroups": ["subresources.kubevirt.io"],
                               "resources": ["virtualmachines/start"], "verbs": ["update"]}]}, ns)
        kube.create(Resource("rbac.authorization.k8s.io", "v1", "rolebindings"), {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "starter"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "starter"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]}, ns)
        deadline = time.monotonic() + 10
        while (code := put(robot, ns, "demo", "start")[0]) == 403 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 202
        assert put(robot, ns, "demo", "stop")[0] == 403
    finally:
        robot.api.close()


def test_direct_calls_without_the_front_proxy_are_refused(cluster: tuple[object, Client, int],
                                                         ns: str) -> None:
    port = cluster[2]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}{BASE}/namespaces/{ns}/virtualmachines/demo/start",
        data=b"{}", method="PUT", headers={"X-Remote-User": "system:admin",
                                           "X-Remote-Group": "system:masters"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    err.value.close()
    assert err.value.code == 401


def _cli(server: object, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootdisk", *argv, "--kubeconfig",
                           str(server.kubeconfig_path)],  # type: ignore[attr-defined]
                          capture_output=True, text=True, timeout=120, check=False)


def test_cli_start_stop_restart(cluster: tuple[object, Client, int], ns: str) -> None:
    server, kube, _ = cluster
    kube.create(VMS, example(runStrategy="Halted"), ns)
    out = _cli(server, "start", "demo", "-n", ns, "--dry-run")
    assert out.returncode == 0 and "(dry run)" in out.stdout
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"
    out = _cli(server, "start", "demo", "-n", ns)
    assert out.returncode == 0, out.stderr
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Always"
    out = _cli(server, "restart", "demo", "-n", ns)
    assert out.returncode == 1 and "VM is not running" in out.stderr
    out = _cli(server, "start", "demo", "-n", ns, "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["code"] == 409
    out = _cli(server, "stop", "demo", "-n", ns, "--grace-period", "-3")
    assert out.returncode == 1 and "StopOptions.gracePeriod" in out.stderr
    assert _cli(server, "stop", "demo", "-n", ns).returncode == 0
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"


def test_virt_api_authorizes_the_proxied_user_itself(cluster: tuple[object, Client, int],
                                                     ns: str) -> None:
    """Past the front proxy's certificate, virt-api still asks a SubjectAccessReview for
    the user named in X-Remote-User (delegated authorization), as upstream's does."""
    server, kube, port = cluster
    kube.create(VMS, example(runStrategy="Halted"), ns)
    pki = Path(server.data_dir) / "pki"  # type: ignore[attr-defined]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(pki / "front-proxy-client.crt"), str(pki / "front-proxy-client.key"))

    def put_as(user: str, groups: list[str]) -> int:
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}{BASE}/namespaces/{ns}/virtualmachines/demo/start",
            data=b"{}", method="PUT", headers={"X-Remote-User": user,
                                               "X-Remote-Group": ",".join(groups)})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            err.close()
            return int(err.code)

    assert put_as("nobody", ["system:authenticated"]) == 403
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"
    assert put_as("admin", ["system:masters"]) == 202
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Always"
