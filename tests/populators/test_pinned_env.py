"""Pins what the populators render for each source kind: the importer pod's environment,
volumes and mounts and PVC′'s source annotations, and the upload server's environment, as
they were before the source declarations moved into ``vocab`` (issue 25). Compared as JSON
text, so order and spelling count: a refactoring that changes one byte fails here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from populators import import_source, importer_pod
from populators.cdiconfig import CdiConfig
from populators.importer_pod import Settings
from populators.upload_populator import UploadPopulator

UID = "0f0f0f0f-1111-2222-3333-444444444444"
SETTINGS = Settings(extra_env=(("IMPORTER_RETRY_ATTEMPTS", "2"),))
SHA = "sha256:" + "a" * 64
TARGET = {"metadata": {"name": "disk", "namespace": "ns", "uid": UID}}

SPECS: dict[str, dict[str, Any]] = {
    "http": {
        "source": {
            "http": {
                "url": "https://h/d.qcow2",
                "secretRef": "creds",
                "certConfigMap": "ca",
                "checksum": SHA,
                "extraHeaders": ["X-A: 1", "X-B: two"],
                "secretExtraHeaders": ["hdr1", "hdr2"],
                "insecureSkipVerify": True,
            }
        },
        "preallocation": True,
    },
    "http-archive": {"source": {"http": {"url": "http://h/t.tar"}}, "contentType": "archive"},
    "s3": {
        "source": {
            "s3": {
                "url": "http://127.0.0.1:8333/bucket/disk.qcow2",
                "secretRef": "s3creds",
                "certConfigMap": "s3ca",
            }
        }
    },
    "blank": {"source": {"blank": {}}, "preallocation": True},
    "registry-node": {
        "source": {
            "registry": {
                "url": "docker://reg.local:5000/golden/fedora:41",
                "secretRef": "pull",
                "certConfigMap": "reg-ca",
                "pullMethod": "node",
                "platform": {"architecture": "arm64"},
            }
        }
    },
    "registry-pod": {"source": {"registry": {"url": "docker://quay.io/containerdisks/fedora:41"}}},
}
"""One spec per source kind (the registry twice: pulled by the pod and by the node)."""

SHAPE: dict[str, tuple[str, tuple[str, ...]]] = {
    "http": ("Filesystem", ()),
    "http-archive": ("Filesystem", ()),
    "s3": ("Block", ()),
    "blank": ("Filesystem", ()),
    "registry-node": ("Filesystem", ("reg.local:5000",)),
    "registry-pod": ("Block", ()),
}
"""Volume mode of PVC′ and CDIConfig's insecure registries for each case."""

PINNED: dict[str, dict[str, Any]] = {
    "http": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "http"},
            {"name": "IMPORTER_ENDPOINT", "value": "https://h/d.qcow2"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0.06"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "true"},
            {"name": "INSECURE_TLS", "value": "true"},
            {"name": "IMPORTER_CERT_DIR", "value": "/certs"},
            {
                "name": "IMPORTER_CHECKSUM",
                "value": SHA,
            },
            {"name": "IMPORTER_EXTRA_HEADER_0", "value": "X-A: 1"},
            {"name": "IMPORTER_EXTRA_HEADER_1", "value": "X-B: two"},
            {
                "name": "IMPORTER_ACCESS_KEY_ID",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "accessKeyId"}},
            },
            {
                "name": "IMPORTER_SECRET_KEY",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "secretKey"}},
            },
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": [
            {"name": "cdi-data-vol", "mountPath": "/data"},
            {
                "name": "cdi-secret-extra-headers-vol-0",
                "mountPath": "/extraheaders/0",
                "readOnly": True,
            },
            {
                "name": "cdi-secret-extra-headers-vol-1",
                "mountPath": "/extraheaders/1",
                "readOnly": True,
            },
            {"name": "cdi-cert-vol", "mountPath": "/certs", "readOnly": True},
        ],
        "devices": None,
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            },
            {"name": "cdi-secret-extra-headers-vol-0", "secret": {"secretName": "hdr1"}},
            {"name": "cdi-secret-extra-headers-vol-1", "secret": {"secretName": "hdr2"}},
            {"name": "cdi-cert-vol", "configMap": {"name": "ca"}},
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "http",
            "cdi.kubevirt.io/storage.contentType": "kubevirt",
            "cdi.kubevirt.io/storage.preallocation.requested": "true",
            "cdi.kubevirt.io/storage.import.endpoint": "https://h/d.qcow2",
            "cdi.kubevirt.io/storage.import.secretName": "creds",
            "cdi.kubevirt.io/storage.import.certConfigMap": "ca",
            "cdi.kubevirt.io/storage.import.checksum": SHA,
        },
    },
    "http-archive": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "http"},
            {"name": "IMPORTER_ENDPOINT", "value": "http://h/t.tar"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "archive"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0.06"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "false"},
            {"name": "INSECURE_TLS", "value": "false"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": [{"name": "cdi-data-vol", "mountPath": "/data"}],
        "devices": None,
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            }
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "http",
            "cdi.kubevirt.io/storage.contentType": "archive",
            "cdi.kubevirt.io/storage.preallocation.requested": "false",
            "cdi.kubevirt.io/storage.import.endpoint": "http://h/t.tar",
        },
    },
    "s3": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "s3"},
            {"name": "IMPORTER_ENDPOINT", "value": "http://127.0.0.1:8333/bucket/disk.qcow2"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "false"},
            {"name": "INSECURE_TLS", "value": "false"},
            {"name": "IMPORTER_CERT_DIR", "value": "/certs"},
            {
                "name": "IMPORTER_ACCESS_KEY_ID",
                "valueFrom": {"secretKeyRef": {"name": "s3creds", "key": "accessKeyId"}},
            },
            {
                "name": "IMPORTER_SECRET_KEY",
                "valueFrom": {"secretKeyRef": {"name": "s3creds", "key": "secretKey"}},
            },
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": [{"name": "cdi-cert-vol", "mountPath": "/certs", "readOnly": True}],
        "devices": [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}],
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            },
            {"name": "cdi-cert-vol", "configMap": {"name": "s3ca"}},
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "s3",
            "cdi.kubevirt.io/storage.contentType": "kubevirt",
            "cdi.kubevirt.io/storage.preallocation.requested": "false",
            "cdi.kubevirt.io/storage.import.endpoint": "http://127.0.0.1:8333/bucket/disk.qcow2",
            "cdi.kubevirt.io/storage.import.secretName": "s3creds",
            "cdi.kubevirt.io/storage.import.certConfigMap": "s3ca",
        },
    },
    "blank": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "blank"},
            {"name": "IMPORTER_ENDPOINT", "value": ""},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0.06"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "true"},
            {"name": "INSECURE_TLS", "value": "false"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": [{"name": "cdi-data-vol", "mountPath": "/data"}],
        "devices": None,
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            }
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "none",
            "cdi.kubevirt.io/storage.contentType": "kubevirt",
            "cdi.kubevirt.io/storage.preallocation.requested": "true",
        },
    },
    "registry-node": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "registry"},
            {"name": "IMPORTER_ENDPOINT", "value": "docker://reg.local:5000/golden/fedora:41"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0.06"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "false"},
            {"name": "INSECURE_TLS", "value": "true"},
            {"name": "IMPORTER_CERT_DIR", "value": "/certs"},
            {"name": "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE", "value": "arm64"},
            {"name": "IMPORTER_REGISTRY_IMAGE_DIR", "value": "/var/run/cdi/registry-image"},
            {
                "name": "IMPORTER_ACCESS_KEY_ID",
                "valueFrom": {"secretKeyRef": {"name": "pull", "key": "accessKeyId"}},
            },
            {
                "name": "IMPORTER_SECRET_KEY",
                "valueFrom": {"secretKeyRef": {"name": "pull", "key": "secretKey"}},
            },
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": [
            {"name": "cdi-data-vol", "mountPath": "/data"},
            {
                "name": "registry-image",
                "mountPath": "/var/run/cdi/registry-image",
                "readOnly": True,
            },
            {"name": "cdi-cert-vol", "mountPath": "/certs", "readOnly": True},
        ],
        "devices": None,
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            },
            {
                "name": "registry-image",
                "image": {
                    "reference": "reg.local:5000/golden/fedora:41",
                    "pullPolicy": "IfNotPresent",
                },
            },
            {"name": "cdi-cert-vol", "configMap": {"name": "reg-ca"}},
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "registry",
            "cdi.kubevirt.io/storage.contentType": "kubevirt",
            "cdi.kubevirt.io/storage.preallocation.requested": "false",
            "cdi.kubevirt.io/storage.import.endpoint": "docker://reg.local:5000/golden/fedora:41",
            "cdi.kubevirt.io/storage.import.secretName": "pull",
            "cdi.kubevirt.io/storage.import.certConfigMap": "reg-ca",
            "cdi.kubevirt.io/storage.import.registryImportMethod": "node",
            "cdi.kubevirt.io/storage.import.registryImageArchitecture": "arm64",
        },
    },
    "registry-pod": {
        "env": [
            {"name": "IMPORTER_SOURCE", "value": "registry"},
            {"name": "IMPORTER_ENDPOINT", "value": "docker://quay.io/containerdisks/fedora:41"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "false"},
            {"name": "INSECURE_TLS", "value": "false"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
        ],
        "mounts": None,
        "devices": [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}],
        "volumes": [
            {
                "name": "cdi-data-vol",
                "persistentVolumeClaim": {
                    "claimName": "prime-0f0f0f0f-1111-2222-3333-444444444444",
                    "readOnly": False,
                },
            }
        ],
        "annotations": {
            "cdi.kubevirt.io/storage.import.source": "registry",
            "cdi.kubevirt.io/storage.contentType": "kubevirt",
            "cdi.kubevirt.io/storage.preallocation.requested": "false",
            "cdi.kubevirt.io/storage.import.endpoint": "docker://quay.io/containerdisks/fedora:41",
            "cdi.kubevirt.io/storage.import.registryImportMethod": "pod",
        },
    },
    "upload": {
        "env": [
            {"name": "IMPORTER_DESTINATION", "value": "/data/disk.img"},
            {"name": "IMPORTER_CONTENTTYPE", "value": "kubevirt"},
            {"name": "IMPORTER_IMAGE_SIZE", "value": "2Gi"},
            {"name": "FILESYSTEM_OVERHEAD", "value": "0.06"},
            {"name": "OWNER_UID", "value": "0f0f0f0f-1111-2222-3333-444444444444"},
            {"name": "PREALLOCATION", "value": "true"},
            {"name": "UPLOAD_TLS_DIR", "value": "/etc/cdi-upload"},
            {"name": "UPLOAD_CLIENT_NAME", "value": "cdi-uploadproxy"},
            {"name": "UPLOAD_PORT", "value": "8443"},
            {"name": "UPLOAD_SCRATCH_DIR", "value": "/scratch"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
    },
}


def _prime(mode: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"prime-{UID}", "namespace": "ns", "uid": "puid", "annotations": {}},
        "spec": {
            "storageClassName": "local",
            "volumeMode": mode,
            "resources": {"requests": {"storage": "2Gi"}},
        },
    }


@pytest.mark.parametrize("case", sorted(SPECS))
def test_the_importer_pod_of_each_source_is_pinned(case: str) -> None:
    mode, insecure = SHAPE[case]
    source = import_source.parse({"spec": SPECS[case]})
    pod = importer_pod.render(
        source=source,
        prime=_prime(mode),
        target=TARGET,
        config=CdiConfig(insecure_registries=insecure),
        settings=SETTINGS,
    )
    [container] = pod["spec"]["containers"]
    got = {
        "env": container["env"],
        "mounts": container.get("volumeMounts"),
        "devices": container.get("volumeDevices"),
        "volumes": pod["spec"]["volumes"],
        "annotations": import_source.prime_annotations(source),
    }
    assert json.dumps(got) == json.dumps(PINNED[case])


def test_the_upload_server_env_is_pinned() -> None:
    pod = UploadPopulator().pod(
        target=TARGET,
        prime=_prime("Filesystem"),
        source={
            "metadata": {"name": "s"},
            "spec": {"contentType": "kubevirt", "preallocation": True},
        },
        config=CdiConfig(),
        settings=SETTINGS,
        previous_restarts=0,
    )
    [container] = pod["spec"]["containers"]
    assert json.dumps({"env": container["env"]}) == json.dumps(PINNED["upload"])
