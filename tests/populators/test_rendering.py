"""Table tests of the pure parts around the pod: the importer pod as upstream renders it,
the VolumeImportSource, CDIConfig's status, the progress metric."""

from __future__ import annotations

import re
from typing import Any

import pytest

from importer.config import from_env
from localcluster.apiserver.admission import podsecurity_checks as psa
from populators import cdiconfig, import_source, importer_pod, progress
from populators.cdiconfig import CdiConfig
from populators.errors import SourceError
from populators.import_populator import ImportPopulator
from populators.importer_pod import Settings
from vocab import sources

UID = "0f0f0f0f-1111-2222-3333-444444444444"


def _prime(*, mode: str = "Filesystem", node: str | None = None) -> dict[str, Any]:
    ann = {"volume.kubernetes.io/selected-node": node} if node else {}
    return {"metadata": {"name": f"prime-{UID}", "namespace": "ns", "uid": "puid",
                         "annotations": ann},
            "spec": {"storageClassName": "local", "volumeMode": mode,
                     "resources": {"requests": {"storage": "2Gi"}}}}


def _target(**ann: str) -> dict[str, Any]:
    return {"metadata": {"name": "disk", "namespace": "ns", "uid": UID, "annotations": ann}}


def _render(source: dict[str, Any], *, mode: str = "Filesystem", node: str | None = None,
            config: CdiConfig | None = None, settings: Settings | None = None,
            **target_ann: str) -> dict[str, Any]:
    return importer_pod.render(
        source=import_source.parse({"spec": source}), prime=_prime(mode=mode, node=node),
        target=_target(**target_ann), config=config or CdiConfig(),
        settings=settings or Settings())


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in pod["spec"]["containers"][0]["env"]}


HTTP = {"source": {"http": {"url": "https://h/d.qcow2", "secretRef": "creds",
                            "certConfigMap": "ca", "checksum": "sha256:" + "a" * 64,
                            "extraHeaders": ["X-A: 1", "X-B: two"]}}}


def test_importer_pod_matches_upstream() -> None:
    pod = _render(HTTP, node="n1", **{"cdi.kubevirt.io/storage.pod.priorityclassname": "hi",
                                      "k8s.v1.cni.cncf.io/networks": "net1"})
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == f"importer-prime-{UID}" and meta["namespace"] == "ns"
    # admissible in a namespace enforcing "restricted", as upstream's (issue 24)
    assert psa.evaluate(psa.RESTRICTED, None, meta, spec) == []
    assert meta["ownerReferences"][0]["uid"] == "puid"
    assert meta["labels"]["app"] == "containerized-data-importer"
    assert meta["annotations"]["k8s.v1.cni.cncf.io/networks"] == "net1"
    assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert spec["restartPolicy"] == "OnFailure" and spec["enableServiceLinks"] is False
    assert spec["nodeName"] == "n1" and spec["priorityClassName"] == "hi"
    assert spec["securityContext"]["fsGroup"] == 107
    c = spec["containers"][0]
    assert c["image"] == "rootdisk/importer"
    assert c["ports"] == [{"name": "metrics", "containerPort": 8443, "protocol": "TCP"}]
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True, "runAsUser": 107, "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["resources"] == {"limits": {"cpu": "750m", "memory": "600M"},
                              "requests": {"cpu": "100m", "memory": "60M"}}
    assert {"name": "cdi-data-vol", "mountPath": "/data"} in c["volumeMounts"]
    assert {"name": "cdi-cert-vol", "mountPath": "/certs", "readOnly": True} \
        in c["volumeMounts"]
    assert {"name": "cdi-cert-vol", "configMap": {"name": "ca"}} in spec["volumes"]
    env = _env(pod)
    assert env["IMPORTER_SOURCE"] == "http"
    assert env["IMPORTER_ENDPOINT"] == "https://h/d.qcow2"
    assert env["IMPORTER_CONTENTTYPE"] == "kubevirt"
    assert env["IMPORTER_IMAGE_SIZE"] == "2Gi"
    assert env["IMPORTER_CERT_DIR"] == "/certs"
    assert env["IMPORTER_CHECKSUM"] == "sha256:" + "a" * 64
    assert (env["IMPORTER_EXTRA_HEADER_0"], env["IMPORTER_EXTRA_HEADER_1"]) == (
        "X-A: 1", "X-B: two")
    assert env["OWNER_UID"] == UID and env["FILESYSTEM_OVERHEAD"] == "0.06"
    assert env["PREALLOCATION"] == "false"


def test_credentials_only_by_reference() -> None:
    pod = _render(HTTP)
    env = _env(pod)
    assert env["IMPORTER_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "creds",
                                                              "key": "accessKeyId"}}
    assert env["IMPORTER_SECRET_KEY"] == {"secretKeyRef": {"name": "creds",
                                                           "key": "secretKey"}}


def test_secret_extra_headers_are_mounted_secrets_not_env() -> None:
    """upstream's layout: Secret i at /extraheaders/i; the pod names the Secrets only."""
    pod = _render({"source": {"http": {"url": "https://h/d.qcow2",
                                       "secretExtraHeaders": ["tok", "tenant"]}}})
    spec = pod["spec"]
    c = spec["containers"][0]
    assert {"name": "cdi-secret-extra-headers-vol-0", "secret": {"secretName": "tok"}} \
        in spec["volumes"]
    assert {"name": "cdi-secret-extra-headers-vol-1", "secret": {"secretName": "tenant"}} \
        in spec["volumes"]
    assert {"name": "cdi-secret-extra-headers-vol-0", "mountPath": "/extraheaders/0",
            "readOnly": True} in c["volumeMounts"]
    assert {"name": "cdi-secret-extra-headers-vol-1", "mountPath": "/extraheaders/1",
            "readOnly": True} in c["volumeMounts"]
    assert not [e for e in c["env"] if "HEADER" in e["name"]]
    # Block volumes get the mounts too (a block pod has no /data mount otherwise)
    block = _render({"source": {"http": {"url": "https://h/d.qcow2",
                                         "secretExtraHeaders": ["tok"]}}}, mode="Block")
    assert [m["mountPath"] for m in block["spec"]["containers"][0]["volumeMounts"]] == [
        "/extraheaders/0"]


def test_block_volume_is_a_device_without_overhead() -> None:
    pod = _render({"source": {"http": {"url": "http://h/d"}}}, mode="Block",
                  config=CdiConfig(global_overhead="0.1"))
    c = pod["spec"]["containers"][0]
    assert c["volumeDevices"] == [{"name": "cdi-data-vol",
                                   "devicePath": "/dev/cdi-block-volume"}]
    assert "volumeMounts" not in c
    assert _env(pod)["FILESYSTEM_OVERHEAD"] == "0"


def test_class_overhead_and_resources_from_cdiconfig() -> None:
    config = cdiconfig.parse({"status": {
        "filesystemOverhead": {"global": "0.1", "storageClass": {"local": "0.03"}},
        "defaultPodResourceRequirements": {"limits": {"cpu": "2", "memory": "1Gi"}},
        "importRetryLimit": 5}})
    pod = _render({"source": {"blank": {}}}, config=config)
    assert _env(pod)["FILESYSTEM_OVERHEAD"] == "0.03"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "2",
                                                                    "memory": "1Gi"}}
    assert config.retry_limit == 5


def test_operator_settings_reach_the_pod() -> None:
    settings = Settings.from_env({"IMPORTER_IMAGE": "reg/rootdisk/importer:v2",
                                  "IMPORTER_RETRY_ATTEMPTS": "2", "UNRELATED": "x"})
    pod = _render({"source": {"blank": {}}}, settings=settings)
    assert pod["spec"]["containers"][0]["image"] == "reg/rootdisk/importer:v2"
    env = _env(pod)
    assert env["IMPORTER_RETRY_ATTEMPTS"] == "2" and "UNRELATED" not in env


def test_upload_certificate_lifetimes_default_to_upstreams_and_are_checked() -> None:
    default = Settings.from_env({})
    assert (default.upload_ca_lifetime, default.upload_cert_lifetime) == (48 * 3600, 24 * 3600)
    short = Settings.from_env({"UPLOAD_CA_CERT_LIFETIME": "48",
                               "UPLOAD_SERVER_CERT_LIFETIME": "24"})
    assert (short.upload_ca_lifetime, short.upload_cert_lifetime) == (48, 24)
    for env, said in (({"UPLOAD_SERVER_CERT_LIFETIME": "tomorrow"},
                       "UPLOAD_SERVER_CERT_LIFETIME: 'tomorrow' is not a number"),
                      ({"UPLOAD_CA_CERT_LIFETIME": "nan"}, "UPLOAD_CA_CERT_LIFETIME: 'nan'"),
                      ({"UPLOAD_SERVER_CERT_LIFETIME": "5"}, "lifetime 5 s is not between"),
                      ({"UPLOAD_CA_CERT_LIFETIME": "40", "UPLOAD_SERVER_CERT_LIFETIME": "24"},
                       "must be at most half the CA lifetime")):
        with pytest.raises(ValueError, match=said):
            Settings.from_env(env)


@pytest.mark.parametrize("source", [
    {"source": {"http": {"url": "http://h/d.img", "insecureSkipVerify": True}}},
    {"source": {"s3": {"url": "http://127.0.0.1:8333/bucket/disk.qcow2"}}},
    {"source": {"blank": {}}, "preallocation": True},
    {"source": {"http": {"url": "http://h/t.tar"}}, "contentType": "archive"},
    {"source": {"registry": {"url": "docker://quay.io/containerdisks/fedora:41",
                             "platform": {"architecture": "arm64"}}}},
])
def test_importer_accepts_the_rendered_environment(source: dict[str, Any]) -> None:
    """The importer's own parser reads what the pod is given (values, not references)."""
    env = {k: v for k, v in _env(_render(source)).items() if isinstance(v, str)}
    config = from_env(env)
    assert config.source == next(iter(source["source"]))
    assert config.image_size == 2 * 2**30
    assert config.owner_uid == UID


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "spec.source:"),
    ({"source": {}}, "spec.source:"),
    ({"source": {"http": {"url": "x"}, "s3": {"url": "y"}}}, "exactly one"),
    ({"source": {"gcs": {"url": "gs://x/y"}}}, "spec.source.gcs"),
    ({"source": {"gopher": {}}}, "spec.source.gopher"),
    ({"source": {"http": {}}}, "spec.source.http.url"),
    ({"source": {"s3": {"url": ""}}}, "spec.source.s3.url"),
    ({"source": {"http": {"url": "u", "extraHeaders": ["NoColon"]}}},
     "spec.source.http.extraHeaders[0]"),
    ({"source": {"http": {"url": "u", "extraHeaders": ["A: b\r\nEvil: 1"]}}},
     "spec.source.http.extraHeaders[0]"),
    ({"source": {"http": {"url": "u", "secretRef": {"name": "x"}}}},
     "spec.source.http.secretRef"),
    ({"source": {"http": {"url": "u", "secretExtraHeaders": "tok"}}},
     "spec.source.http.secretExtraHeaders"),
    ({"source": {"http": {"url": "u", "secretExtraHeaders": [""]}}},
     "spec.source.http.secretExtraHeaders"),
    ({"source": {"blank": {}}, "contentType": "tarball"}, "spec.contentType"),
    ({"source": {"registry": {"imageStream": "fedora"}}}, "spec.source.registry.imageStream"),
    ({"source": {"registry": {"url": "oci-archive:///a.tar"}}}, "spec.source.registry.url"),
    ({"source": {"registry": {"url": "docker://r/i", "pullMethod": "kubelet"}}},
     "spec.source.registry.pullMethod"),
    ({"source": {"registry": {"url": "docker://r/i", "platform": {"architecture": 1}}}},
     "spec.source.registry.platform.architecture"),
    ({"source": {"registry": {"url": "docker://r/i", "secretRef": {"name": "x"}}}},
     "spec.source.registry.secretRef"),
])
def test_bad_sources_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SourceError, match=re.escape(field)):
        import_source.parse({"spec": spec})


REGISTRY = {"source": {"registry": {"url": "docker://reg.local:5000/golden/fedora:41",
                                    "secretRef": "pull", "certConfigMap": "reg-ca",
                                    "pullMethod": "node",
                                    "platform": {"architecture": "arm64"}}}}


@pytest.mark.parametrize(("insecure", "expected"), [
    ((), "false"), (("reg.local",), "false"), (("reg.local:5000",), "true"),
])
def test_registry_importer_pod(insecure: tuple[str, ...], expected: str) -> None:
    """As upstream: INSECURE_TLS when the url's host:port is in CDIConfig
    insecureRegistries (exactly), the architecture variable, credentials by reference."""
    env = _env(_render(REGISTRY, config=CdiConfig(insecure_registries=insecure)))
    assert env["IMPORTER_SOURCE"] == "registry"
    assert env["IMPORTER_ENDPOINT"] == "docker://reg.local:5000/golden/fedora:41"
    assert env["INSECURE_TLS"] == expected
    assert env["IMPORTER_REGISTRY_IMAGE_ARCHITECTURE"] == "arm64"
    assert env["IMPORTER_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "pull",
                                                              "key": "accessKeyId"}}
    assert env["IMPORTER_CERT_DIR"]
    ann = import_source.prime_annotations(import_source.parse({"spec": REGISTRY}))
    assert ann["cdi.kubevirt.io/storage.import.source"] == "registry"
    assert ann["cdi.kubevirt.io/storage.import.registryImportMethod"] == "node"
    assert ann["cdi.kubevirt.io/storage.import.registryImageArchitecture"] == "arm64"


def test_node_pull_mounts_the_image_for_the_importer() -> None:
    """``pullMethod: node``: the node pulls the image (an image volume, as upstream's node
    pull has the node's runtime pull it); the importer reads its /disk file there. The
    pod stays admissible under "restricted" (image volumes are allowed there)."""
    pod = _render(REGISTRY)
    assert {"name": "registry-image", "image": {
        "reference": "reg.local:5000/golden/fedora:41", "pullPolicy": "IfNotPresent"}} in \
        pod["spec"]["volumes"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "registry-image", "mountPath": "/var/run/cdi/registry-image",
            "readOnly": True} in mounts
    assert _env(pod)["IMPORTER_REGISTRY_IMAGE_DIR"] == "/var/run/cdi/registry-image"
    assert psa.evaluate(psa.RESTRICTED, None, pod["metadata"], pod["spec"]) == []
    by_pod = _render({"source": {"registry": {"url": "docker://r/x:1", "pullMethod": "pod"}}})
    assert "IMPORTER_REGISTRY_IMAGE_DIR" not in _env(by_pod)
    assert not any("image" in v for v in by_pod["spec"]["volumes"])


def test_insecure_registries_come_from_the_cdiconfig_spec() -> None:
    config = cdiconfig.parse({"spec": {"insecureRegistries": ["a:5000", 7, "b"]}})
    assert config.insecure_registries == ("a:5000", "b")
    assert cdiconfig.parse({"spec": {"insecureRegistries": "a"}}).insecure_registries == ()


def test_archive_into_block_is_refused() -> None:
    with pytest.raises(SourceError, match=r"spec\.contentType"):
        ImportPopulator().pod(
            target=_target(), prime=_prime(mode="Block"),
            source={"metadata": {"name": "s"}, "spec": {
                "source": {"http": {"url": "http://h/t.tar"}}, "contentType": "archive"}},
            config=CdiConfig(), settings=Settings(), previous_restarts=0)


@pytest.mark.parametrize(("status", "glob", "cls", "limit"), [
    (None, "0.06", {}, 5),
    ({"filesystemOverhead": {"global": "0.055"}}, "0.055", {}, 5),
    ({"filesystemOverhead": {"global": "1"}}, "1", {}, 5),
    ({"filesystemOverhead": {"global": "1.0"}}, "0.06", {}, 5),  # not a Percent
    ({"filesystemOverhead": {"global": "-0.1", "storageClass": {"a": "0.1", "b": "x"}}},
     "0.06", {"a": "0.1"}, 5),
    ({"importRetryLimit": 0}, "0.06", {}, 0),
    ({"importRetryLimit": -1}, "0.06", {}, 5),
    ({"importRetryLimit": "5"}, "0.06", {}, 5),
    ({"importRetryLimit": True}, "0.06", {}, 5),
])
def test_cdiconfig_defaults(status: dict[str, Any] | None, glob: str, cls: dict[str, str],
                            limit: int) -> None:
    config = cdiconfig.parse({"status": status} if status is not None else None)
    assert (config.global_overhead, dict(config.class_overheads), config.retry_limit) == (
        glob, cls, limit)


METRICS = f'''# HELP kubevirt_cdi_import_progress_total Import progress in percent
# TYPE kubevirt_cdi_import_progress_total counter
kubevirt_cdi_import_progress_total{{ownerUID="other"}} 99.0
kubevirt_cdi_import_progress_total{{ownerUID="{UID}"}} 45.678
kubevirt_cdi_import_progress_created{{ownerUID="{UID}"}} 1.7e9
'''


@pytest.mark.parametrize(("text", "want"), [
    (METRICS, 45.678),
    (METRICS.replace("45.678", "100.0"), 100.0),
    (METRICS.replace("45.678", "1.5e-05"), 1.5e-05),
    (METRICS.replace(UID, "nobody"), None),
    ("", None),
    ("garbage\n", None),
])
def test_progress_parse(text: str, want: float | None) -> None:
    assert progress.parse(text, metric=progress.IMPORT_METRIC, owner_uid=UID) == want


@pytest.mark.parametrize(("value", "text"), [(45.678, "45.68%"), (0.0, "0.00%"),
                                             (100.0, "100.00%")])
def test_progress_render(value: float, text: str) -> None:
    assert progress.render(value) == text


@pytest.mark.parametrize(("storage_class", "block", "expected"), [
    ("local", False, "0.03"), ("other", False, "0.1"), (None, False, "0.1"),
    ("", False, "0"),          # no class (a static volume): no overhead, as upstream
    ("local", True, "0"),
])
def test_overhead_per_class(storage_class: str | None, block: bool, expected: str) -> None:
    config = cdiconfig.parse({"status": {
        "filesystemOverhead": {"global": "0.1", "storageClass": {"local": "0.03"}}}})
    assert config.overhead(storage_class=storage_class, block=block) == expected


def _spec_setting_every_option(kind: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A spec of ``kind`` giving each declared option a value (the first choice of those
    it limits), and the variables those values are expected in."""
    declared = sources.DECLARATIONS[kind]
    body: dict[str, Any] = {"url": f"{(declared.spec_schemes or declared.schemes)[0]}"
                                   "://host.example/bucket/key:1"}
    expected: dict[str, str] = {}
    for i, option in enumerate(o for o in declared.options if o.field):
        value = option.choices[0] if option.choices else f"value-{i}"
        *parents, last = option.field.split(".")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        if option.variable:
            expected[option.variable] = value
    return {"source": {kind: body}}, expected


@pytest.mark.parametrize("kind", sorted(k for k, d in sources.DECLARATIONS.items()
                                        if any(o.field for o in d.options)))
def test_each_declared_option_travels_from_the_spec_to_the_importer(kind: str) -> None:
    """The populator reads every option's field and renders its variable; the importer
    reads the variable back (both from ``vocab.sources``)."""
    spec, expected = _spec_setting_every_option(kind)
    env = {k: v for k, v in _env(_render(spec)).items() if isinstance(v, str)}
    assert {k: env.get(k) for k in expected} == expected
    config = from_env(env)
    assert {k: config.option(k) for k in expected} == expected
    annotations = import_source.prime_annotations(import_source.parse({"spec": spec}))
    for option in sources.DECLARATIONS[kind].options:
        if option.annotation:
            assert annotations[option.annotation]


@pytest.mark.parametrize("kind", sorted(importer_pod.PLUMBING))
def test_plumbing_sets_only_declared_variables(kind: str) -> None:
    """A variable the plumbing sets is declared, so the importer reads it back (one it
    did not declare would be dropped from the pod)."""
    spec, _ = _spec_setting_every_option(kind)
    declared = {o.variable for o in sources.DECLARATIONS[kind].options}
    for choice in {c for o in sources.DECLARATIONS[kind].options for c in o.choices}:
        body = spec["source"][kind]
        for option in sources.DECLARATIONS[kind].options:
            if choice in option.choices:
                body[option.field] = choice
        extra = importer_pod.plumbing(import_source.parse({"spec": spec}), CdiConfig())
        assert set(extra.env) <= declared
