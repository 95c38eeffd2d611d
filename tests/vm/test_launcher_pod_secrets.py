"""The launcher pod of a VMI with cloud-init Secrets, SSH keys and an ephemeral claim:
Secret volumes (never their content) and a read-only golden claim. Pure rendering, then
the VMI controller against a real API server holding the Secret."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from kubeclient import Client
from kubeclient.resources import EVENTS, NAMESPACES, PODS, PVCS, SECRETS, VMIS
from vm.vmi.claims import ClaimView, disk_claims
from vm.vmi.kube import sync_vmi
from vm.vmi.pod import LauncherConfig, launcher_pod
from vm.vmi.secret_volumes import SECRET_DIR, secret_volumes

CONTENT = "#cloud-config\npassword: SECRET-CONTENT-7f3a\n"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISECRETKEY user@host"


def spec(network_secret: str | None = "net") -> dict:  # noqa: S107 - a Secret name
    ci: dict = {"secretRef": {"name": "ud"}}
    if network_secret:
        ci["networkDataSecretRef"] = {"name": network_secret}
    return {
        "domain": {"resources": {"requests": {"memory": "128Mi"}},
                   "devices": {"disks": [{"name": "root"}, {"name": "ci", "cdrom": {}}]}},
        "volumes": [{"name": "root", "ephemeral": {"persistentVolumeClaim": {
                        "claimName": "golden"}}},
                    {"name": "ci", "cloudInitNoCloud": ci}],
        "accessCredentials": [
            {"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                              "propagationMethod": {"noCloud": {}}}}],
    }


def test_secret_volumes_and_mount_paths() -> None:
    assert secret_volumes(spec()) == [
        ("ci-udata", "ud", f"{SECRET_DIR}/ci"),
        ("ci-ndata", "net", f"{SECRET_DIR}/ci-ndata"),
        ("keys-access-cred", "keys", f"{SECRET_DIR}/keys-access-cred"),
    ]
    # one Secret for both, or network data alone: the volume's own directory
    assert secret_volumes(spec("ud"))[:2] == [("ci-udata", "ud", f"{SECRET_DIR}/ci"),
                                              ("keys-access-cred", "keys",
                                               f"{SECRET_DIR}/keys-access-cred")]
    only_net = {"volumes": [{"name": "ci", "cloudInitConfigDrive": {
        "networkDataSecretRef": {"name": "n"}}}]}
    assert secret_volumes(only_net) == [("ci-ndata", "n", f"{SECRET_DIR}/ci")]


def test_pod_mounts_secrets_read_only_and_the_golden_claim_read_only() -> None:
    s = spec()
    vmi = {"metadata": {"name": "v", "namespace": "ns", "uid": "u"}, "spec": s}
    pod = launcher_pod(vmi=vmi, claims=disk_claims(s),
                       views={"golden": ClaimView(exists=True, phase="Bound")},
                       config=LauncherConfig())
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["root"]["persistentVolumeClaim"] == {"claimName": "golden", "readOnly": True}
    for name, secret in (("ci-udata", "ud"), ("ci-ndata", "net"), ("keys-access-cred", "keys")):
        assert volumes[name]["secret"] == {"secretName": secret, "defaultMode": 0o440}
    assert volumes["secret-mounts"] == {"name": "secret-mounts", "emptyDir": {}}
    compute, sidecar = pod["spec"]["containers"]
    mounts = {m["name"]: m for m in compute["volumeMounts"]}
    assert mounts["root"]["readOnly"] is True
    assert mounts["ci-udata"] == {"name": "ci-udata", "mountPath": f"{SECRET_DIR}/ci",
                                  "readOnly": True}
    assert mounts["secret-mounts"]["mountPath"] == SECRET_DIR
    # the console-log sidecar sees none of them
    assert {m["name"] for m in sidecar["volumeMounts"]} == {"private"}


@pytest.fixture
def ns(api: Client) -> str:
    name = f"ci-{uuid.uuid4().hex[:8]}"
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def test_the_secret_content_is_nowhere_in_the_pod_or_events(api: Client, ns: str) -> None:
    for name, data in (("ud", {"userdata": CONTENT}), ("net", {"networkdata": CONTENT}),
                       ("keys", {"key1": KEY})):
        api.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                             "data": {k: base64.b64encode(v.encode()).decode()
                                      for k, v in data.items()}}, ns)
    api.create(PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": "golden"},
                      "spec": {"accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": "1Gi"}}}}, ns)
    api.create(VMIS, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                      "metadata": {"name": "v1", "annotations": {
                          "kubevirt.io/instancetype-name": "u1.small", "other": "x"}},
                      "spec": spec()}, ns)
    for _ in range(3):
        sync_vmi(api, ns, "v1")
    [pod] = api.list(PODS, ns)
    text = json.dumps(pod)
    assert "SECRET-CONTENT" not in text and "SECRETKEY" not in text
    assert base64.b64encode(CONTENT.encode()).decode() not in text
    names = {v["name"] for v in pod["spec"]["volumes"]}
    assert {"ci-udata", "ci-ndata", "keys-access-cred"} <= names
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    # the launcher gets the instance type annotation for meta-data, no other
    assert json.loads(env["VMI"])["metadata"]["annotations"] == {
        "kubevirt.io/instancetype-name": "u1.small"}
    events = json.dumps(api.list(EVENTS, ns))
    assert "SECRET-CONTENT" not in events and "SECRETKEY" not in events
    status = json.dumps(api.get_or_none(VMIS, "v1", ns))
    assert "SECRET-CONTENT" not in status
