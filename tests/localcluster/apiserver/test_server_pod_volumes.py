"""Pod volume names, checked as kube-apiserver checks them: each a DNS-1123 label and
unique, and every volumeMount and volumeDevice naming one of them. The kubelet makes a
directory or a device node of each name under the pod's directory, as root, so a name
such as ``../../x`` or ``/etc/x`` must be refused at the door, with upstream's message."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from localcluster.apiserver.rules import validation

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
             "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
             "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def _pod(name: str, *, device: bool = True) -> dict:
    ref = ({"volumeDevices": [{"name": name, "devicePath": "/dev/disk"}]} if device
           else {"volumeMounts": [{"name": name, "mountPath": "/data"}]})
    return {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", **ref}],
        "volumes": [{"name": name, "persistentVolumeClaim": {"claimName": "mine"}}]}}


@pytest.mark.parametrize("name", ["../x", "/etc/x", "UPPER", "../../etc/ld.so.preload",
                                  "a" * 64])
def test_server_refuses_a_pod_whose_volume_name_is_not_a_label(api, namespace, name):
    with pytest.raises(k8s.ApiException) as err:
        k8s.CoreV1Api(api).create_namespaced_pod(namespace, _pod(name))
    assert err.value.status == 422
    status = json.loads(err.value.body)
    why = "must be no more than 63 characters" if len(name) > 63 else LABEL_MSG
    # upstream's own text: the volume's name, then the device that names it (not found,
    # as the invalid volume does not count)
    assert status["message"] == (
        f'Pod "p" is invalid: [spec.volumes[0].name: Invalid value: "{name}": {why}, '
        f'spec.containers[0].volumeDevices[0].name: Not found: "{name}"]')
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
        ("FieldValueInvalid", "spec.volumes[0].name"),
        ("FieldValueNotFound", "spec.containers[0].volumeDevices[0].name")]
    assert k8s.CoreV1Api(api).list_namespaced_pod(namespace).items == []


def test_server_refuses_mounts_of_volumes_that_do_not_exist(api, namespace):
    pod = _pod("data", device=False)
    pod["spec"]["containers"][0]["volumeMounts"][0]["name"] = "x"
    pod["spec"]["initContainers"] = [{"name": "i", "image": "busybox", "volumeDevices": [
        {"name": "y", "devicePath": "/dev/y"}]}]
    with pytest.raises(k8s.ApiException) as err:
        k8s.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        'Pod "p" is invalid: [spec.initContainers[0].volumeDevices[0].name: Not found: "y", '
        'spec.containers[0].volumeMounts[0].name: Not found: "x"]')


def test_server_refuses_duplicate_volumes_and_a_device_of_a_directory(api, namespace):
    pod = _pod("disk")
    pod["spec"]["volumes"] += [{"name": "disk", "emptyDir": {}}, {"name": "s", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeDevices"].append({"name": "s", "devicePath": "/dev/s"})
    with pytest.raises(k8s.ApiException) as err:
        k8s.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    assert json.loads(err.value.body)["message"] == (
        'Pod "p" is invalid: [spec.volumes[1].name: Duplicate value: "disk", '
        'spec.containers[0].volumeDevices[1].name: Invalid value: "s": can only use volume '
        'source type of PersistentVolumeClaim or Ephemeral for block mode]')


def test_server_refuses_a_workload_template_with_a_bad_volume_name(api, namespace):
    labels = {"app": "a"}
    dep = {"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": _pod("/etc/x")["spec"]}}}
    with pytest.raises(k8s.ApiException) as err:
        k8s.AppsV1Api(api).create_namespaced_deployment(namespace, dep)
    causes = json.loads(err.value.body)["details"]["causes"]
    assert causes[0] == {"reason": "FieldValueInvalid", "field":
                         "spec.template.spec.volumes[0].name",
                         "message": f'Invalid value: "/etc/x": {LABEL_MSG}'}


def test_server_accepts_label_names_that_are_mounted_and_used_as_devices(api, namespace):
    pod = _pod("root-disk")
    pod["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/s"}]
    created = k8s.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    assert [v.name for v in created.spec.volumes] == ["root-disk", "scratch"]


@pytest.mark.parametrize(("spec", "fields"), [
    ({"volumes": [{"emptyDir": {}}]}, ["spec.volumes[0].name"]),
    ({"volumes": [{"name": 7, "emptyDir": {}}]}, ["spec.volumes[0].name"]),
    ({"containers": [{"name": "c", "image": "i", "volumeMounts": [{"mountPath": "/m"}]}]},
     ["spec.containers[0].volumeMounts[0].name"] * 2),  # required, and not found
    ({"volumes": [{"name": "v", "ephemeral": {}}], "containers": [{
        "name": "c", "image": "i", "volumeDevices": [{"name": "v", "devicePath": "/d"}]}]},
     []),
])
def test_volume_rules_are_pure(spec, fields):
    spec.setdefault("containers", [{"name": "c", "image": "i"}])
    assert [c.field for c in validation.validate("Pod", {"spec": spec})] == fields
