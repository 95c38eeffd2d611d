"""Table output: CRD printer columns, JSONPath, built-in column sets, ages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localcluster.apiserver.tables.convert import TableError, human_age, to_table
from localcluster.apiserver.tables.jsonpath import JSONPathError, find

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


def ts(**ago: float) -> str:
    return (NOW - timedelta(**ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "creationTimestamp": ts(minutes=5), **extra}


def cells(kind: str, obj: dict[str, Any], columns: Any = None) -> dict[str, Any]:
    table = to_table([obj], kind=kind, columns=columns, list_meta={}, now=NOW)
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


# ------------------------------------------------------------------ ages

@pytest.mark.parametrize(("delta", "text"), [
    (timedelta(seconds=-5), "<invalid>"),
    (timedelta(seconds=-1), "0s"),
    (timedelta(seconds=0), "0s"),
    (timedelta(seconds=59), "59s"),
    (timedelta(seconds=119), "119s"),
    (timedelta(minutes=2), "2m"),
    (timedelta(minutes=3, seconds=20), "3m20s"),
    (timedelta(minutes=10, seconds=20), "10m"),
    (timedelta(minutes=179), "179m"),
    (timedelta(hours=3), "3h"),
    (timedelta(hours=5, minutes=7), "5h7m"),
    (timedelta(hours=30), "30h"),
    (timedelta(days=3), "3d"),
    (timedelta(days=3, hours=4), "3d4h"),
    (timedelta(days=100), "100d"),
    (timedelta(days=365 * 2 + 10), "2y10d"),
    (timedelta(days=365 * 3), "3y"),
    (timedelta(days=365 * 9 + 20), "9y"),
])
def test_human_age(delta: timedelta, text: str) -> None:
    assert human_age(NOW - delta, NOW) == text


# ------------------------------------------------------------------ JSONPath

DOC = {
    "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}},
    "spec": {"replicas": 3, "items": [{"n": "a", "v": 1}, {"n": "b", "v": 2}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"},
                              {"type": "Synced", "status": "False"}]},
}


@pytest.mark.parametrize(("path", "expected"), [
    (".spec.replicas", [3]),
    ("{.spec.replicas}", [3]),
    ("$.spec.replicas", [3]),
    (".spec.items[0].n", ["a"]),
    (".spec.items[-1].n", ["b"]),
    (".spec.items[5].n", []),
    (".spec.items[*].n", ["a", "b"]),
    (".spec.items[0:1].n", ["a"]),
    (".spec.items.*.v", [1, 2]),
    ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
    (".status.conditions[?(@.type=='Synced')].status", ["False"]),
    ('.status.conditions[?(@.type!="Ready")].type', ["Synced"]),
    (".spec.items[?(@.v > 1)].n", ["b"]),
    (".spec.items[?(@.v)].n", ["a", "b"]),
    (r".metadata.labels.app\.kubernetes\.io/name", ["web"]),
    (".metadata.labels['app.kubernetes.io/name']", ["web"]),
    (".missing.deep", []),
    (".spec.replicas.deeper", []),
])
def test_jsonpath(path: str, expected: list[Any]) -> None:
    assert find(path, DOC) == expected


@pytest.mark.parametrize(("path", "fragment"), [
    ("spec.replicas", "must start with"),
    (".spec[", "unclosed"),
    (".spec[?(foo)]", "unsupported filter"),
    (".spec[?@.a]", "filter must be"),
    (".spec[a-b]", "unsupported subscript"),
    (".spec..x", "empty field name"),
    (".spec[?(@.a == nope)]", "bad literal"),
])
def test_jsonpath_errors(path: str, fragment: str) -> None:
    with pytest.raises(JSONPathError, match=None) as err:
        find(path, DOC)
    assert fragment in str(err.value)


# ------------------------------------------------------------------ custom resources

CRD_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress", "priority": 1},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
    {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
    {"name": "Synced", "type": "string",
     "jsonPath": '.status.conditions[?(@.type=="Synced")].status'},
    {"name": "Started", "type": "date", "jsonPath": ".status.startTime",
     "description": "When it started"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Sizes", "type": "string", "jsonPath": ".spec.sizes"},
]


def test_crd_table() -> None:
    obj = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
           "metadata": meta("dv1", uid="u1", resourceVersion="7"),
           "spec": {"replicas": 2.0, "ratio": 1, "sizes": [1, 2]},
           "status": {"phase": "Succeeded", "ready": True, "startTime": ts(hours=2),
                      "conditions": [{"type": "Synced", "status": "True"}]}}
    table = to_table([obj], kind="DataVolume", columns=CRD_COLUMNS,
                     list_meta={"resourceVersion": "9", "continue": "abc"}, now=NOW)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "9", "continue": "abc"}
    defs = table["columnDefinitions"]
    assert [d["name"] for d in defs] == ["Name", *(c["name"] for c in CRD_COLUMNS)]
    assert defs[0] == {"name": "Name", "type": "string", "format": "name",
                       "description": defs[0]["description"], "priority": 0}
    assert defs[2]["priority"] == 1
    assert defs[7]["description"] == "When it started"
    assert defs[1]["description"] == ("Custom resource definition column (in JSONPath "
                                      "format): .status.phase")
    row = table["rows"][0]
    assert row["cells"] == ["dv1", "Succeeded", None, 2, 1.0, True, "True", "120m", "5m", "[1,2]"]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}


def test_crd_wrong_typed_and_bad_dates() -> None:
    obj = {"metadata": meta("w"), "spec": {"replicas": "three", "ratio": True},
           "status": {"ready": "yes", "startTime": "yesterday", "phase": {"a": 1}}}
    got = cells("W", obj, CRD_COLUMNS)
    assert got["Replicas"] is None and got["Ratio"] is None and got["Ready"] is None
    assert got["Started"] == "<invalid>"
    assert got["Phase"] == '{"a":1}'


def test_crd_without_columns_gets_age() -> None:
    table = to_table([{"metadata": meta("w")}], kind="W", columns=[], list_meta={}, now=NOW)
    assert [(d["name"], d["type"]) for d in table["columnDefinitions"]] == [
        ("Name", "string"), ("Age", "date")]
    assert table["rows"][0]["cells"] == ["w", "5m"]


def test_bad_printer_column_path() -> None:
    with pytest.raises(TableError, match="printer column 'Bad'"):
        to_table([], kind="W", columns=[{"name": "Bad", "type": "string", "jsonPath": "x"}],
                 list_meta={})


@pytest.mark.parametrize(("include", "expected"), [
    ("None", None),
    ("Object", {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}),
    ("Metadata", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                  "metadata": {"name": "c"}}),
])
def test_include_object(include: str, expected: Any) -> None:
    obj = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    row = to_table([obj], kind="ConfigMap", columns=None, list_meta={},
                   include_object=include, now=NOW)["rows"][0]
    assert row.get("object") == expected


def test_include_object_rejects_unknown() -> None:
    with pytest.raises(TableError, match='includeObject: Unsupported value: "All"'):
        to_table([], kind="Pod", columns=None, list_meta={}, include_object="All")


def test_unknown_kind_default_columns() -> None:
    got = cells("CustomResourceDefinition", {"metadata": meta("x.y.io")})
    assert got == {"Name": "x.y.io", "Created At": ts(minutes=5)}


def test_empty_list() -> None:
    table = to_table([], kind="Pod", columns=None, list_meta={"resourceVersion": "1"})
    assert table["rows"] == [] and len(table["columnDefinitions"]) == 9


# ------------------------------------------------------------------ built-in kinds

def _pod(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": meta("p"), "spec": {"containers": [{"name": "a"}, {"name": "b"}],
                                            "nodeName": "node1", **spec},
            "status": status}


RUNNING = {"running": {"startedAt": ts(minutes=4)}}

POD_CASES = [
    ({"phase": "Pending"}, {}, {"Ready": "0/2", "Status": "Pending", "Restarts": "0",
                                "IP": "<none>", "Node": "node1"}),
    ({"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
        {"name": "a", "ready": True, "restartCount": 0, "state": RUNNING},
        {"name": "b", "ready": True, "restartCount": 2, "state": RUNNING,
         "lastState": {"terminated": {"finishedAt": ts(minutes=3)}}}]}, {},
     {"Ready": "2/2", "Status": "Running", "Restarts": "2 (3m ago)", "IP": "10.0.0.5"}),
    ({"phase": "Running", "containerStatuses": [
        {"name": "a", "ready": False, "restartCount": 5,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
        {"name": "b", "ready": True, "state": RUNNING}]}, {},
     {"Ready": "1/2", "Status": "CrashLoopBackOff", "Restarts": "5"}),
    ({"phase": "Pending", "containerStatuses": [
        {"name": "a", "state": {"waiting": {"reason": "ErrImagePull"}}}]}, {},
     {"Status": "ErrImagePull"}),
    ({"phase": "Failed", "containerStatuses": [
        {"name": "a", "state": {"terminated": {"exitCode": 3}}}]}, {},
     {"Status": "ExitCode:3"}),
    ({"phase": "Failed", "containerStatuses": [
        {"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}, {},
     {"Status": "Signal:9"}),
    ({"phase": "Succeeded", "containerStatuses": [
        {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}, {},
     {"Status": "Completed"}),
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
      "containerStatuses": [
          {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
          {"name": "b", "ready": True, "state": RUNNING}]}, {},
     {"Status": "NotReady"}),
    ({"phase": "Pending", "initContainerStatuses": [
        {"name": "i1", "state": {"terminated": {"exitCode": 0}}},
        {"name": "i2", "state": {"running": {}}}]},
     {"initContainers": [{"name": "i1"}, {"name": "i2"}]}, {"Status": "Init:1/2"}),
    ({"phase": "Pending", "initContainerStatuses": [
        {"name": "i1", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]},
     {"initContainers": [{"name": "i1"}]}, {"Status": "Init:Error"}),
    ({"phase": "Pending", "initContainerStatuses": [
        {"name": "i1", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]},
     {"initContainers": [{"name": "i1"}]}, {"Status": "Init:ImagePullBackOff"}),
    ({"phase": "Failed", "reason": "Evicted"}, {}, {"Status": "Evicted"}),
    ({"phase": "Running", "conditions": [{"type": "g1", "status": "True"}]},
     {"readinessGates": [{"conditionType": "g1"}, {"conditionType": "g2"}]},
     {"Readiness Gates": "1/2"}),
    ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                          "reason": "SchedulingGated"}]}, {},
     {"Status": "SchedulingGated"}),
    # podIPs wins over podIP
    ({"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]}, {},
     {"IP": "10.0.0.2"}),
    # a sidecar (restartable init container) counts as a container, and its restarts count
    ({"phase": "Running",
      "conditions": [{"type": "Initialized", "status": "True"}],
      "initContainerStatuses": [
          {"name": "setup", "restartCount": 4, "state": {"terminated": {"exitCode": 0}}},
          {"name": "proxy", "restartCount": 1, "started": True, "ready": True,
           "state": RUNNING}],
      "containerStatuses": [
          {"name": "a", "ready": True, "state": RUNNING},
          {"name": "b", "ready": True, "state": RUNNING}]},
     {"initContainers": [{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}]},
     {"Ready": "3/3", "Status": "Running", "Restarts": "1"}),
    # while initializing, init container restarts are what counts
    ({"phase": "Pending", "initContainerStatuses": [
        {"name": "i1", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(minutes=1)}}}]},
     {"initContainers": [{"name": "i1"}]},
     {"Status": "Init:CrashLoopBackOff", "Restarts": "3 (60s ago)", "Ready": "0/2"}),
]


@pytest.mark.parametrize(("status", "spec", "expected"), POD_CASES)
def test_pod_rows(status: dict[str, Any], spec: dict[str, Any],
                  expected: dict[str, Any]) -> None:
    got = cells("Pod", _pod(status, **spec))
    assert got["Name"] == "p" and got["Age"] == "5m"
    for key, value in expected.items():
        assert got[key] == value, key


def test_finished_pods_are_not_shown_terminating() -> None:
    pod = _pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})
    pod["metadata"]["deletionTimestamp"] = ts(seconds=1)
    assert cells("Pod", pod)["Status"] == "Completed"
    pod["status"]["reason"] = "NodeLost"
    assert cells("Pod", pod)["Status"] == "Unknown"


def test_terminating_pod_and_wide_columns() -> None:
    pod = _pod({"phase": "Running"})
    pod["metadata"]["deletionTimestamp"] = ts(seconds=1)
    table = to_table([pod], kind="Pod", columns=None, list_meta={}, now=NOW)
    assert table["rows"][0]["cells"][2] == "Terminating"
    wide = [d["name"] for d in table["columnDefinitions"] if d["priority"] == 1]
    assert wide == ["IP", "Node", "Nominated Node", "Readiness Gates"]


BUILTIN_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("PersistentVolumeClaim",
     {"metadata": meta("c"), "spec": {"volumeName": "pv1", "storageClassName": "local",
                                      "volumeMode": "Block"},
      "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                 "accessModes": ["ReadWriteOnce", "ReadWriteOncePod"]}},
     {"Status": "Bound", "Volume": "pv1", "Capacity": "1Gi", "Access Modes": "RWO,RWOP",
      "StorageClass": "local", "VolumeAttributesClass": "<unset>", "Age": "5m",
      "VolumeMode": "Block"}),
    ("PersistentVolumeClaim",
     {"metadata": meta("c", annotations={"volume.beta.kubernetes.io/storage-class": "old"}),
      "spec": {}, "status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}},
     {"Status": "Pending", "Volume": "", "Capacity": "", "Access Modes": "",
      "StorageClass": "old", "VolumeMode": "<unset>"}),
    ("PersistentVolume",
     {"metadata": meta("pv1"), "spec": {"capacity": {"storage": "2Gi"},
                                        "accessModes": ["ReadWriteMany"],
                                        "persistentVolumeReclaimPolicy": "Retain",
                                        "claimRef": {"namespace": "ns", "name": "c"},
                                        "storageClassName": "local"},
      "status": {"phase": "Bound"}},
     {"Capacity": "2Gi", "Access Modes": "RWX", "Reclaim Policy": "Retain", "Status": "Bound",
      "Claim": "ns/c", "StorageClass": "local", "Reason": ""}),
    ("StorageClass",
     {"metadata": meta("local", annotations={
         "storageclass.kubernetes.io/is-default-class": "true"}),
      "provisioner": "rootdisk.io/local", "volumeBindingMode": "WaitForFirstConsumer"},
     {"Name": "local (default)", "Provisioner": "rootdisk.io/local", "ReclaimPolicy": "Delete",
      "VolumeBindingMode": "WaitForFirstConsumer", "AllowVolumeExpansion": "false"}),
    ("Namespace", {"metadata": meta("default"), "status": {"phase": "Active"}},
     {"Status": "Active"}),
    ("Namespace", {"metadata": meta("gone"), "status": {"phase": "Terminating"}},
     {"Status": "Terminating"}),
    ("Node",
     {"metadata": meta("n1", labels={"node-role.kubernetes.io/control-plane": ""}),
      "spec": {"unschedulable": True},
      "status": {"conditions": [{"type": "Ready", "status": "True"}],
                 "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                 "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian 12"}}},
     {"Status": "Ready,SchedulingDisabled", "Roles": "control-plane", "Version": "v1.32.0",
      "Internal-IP": "127.0.0.1", "External-IP": "<none>", "OS-Image": "Debian 12"}),
    ("Node", {"metadata": meta("n2"), "status": {}}, {"Status": "Unknown", "Roles": "<none>"}),
    ("Node", {"metadata": meta("n3", labels={"kubernetes.io/role": "worker",
                                             "node-role.kubernetes.io/infra": ""}),
              "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
     {"Status": "NotReady", "Roles": "infra,worker"}),
    ("PersistentVolumeClaim", {"metadata": meta("new"), "spec": {}},
     {"Status": "", "StorageClass": ""}),
    ("Event",
     {"metadata": meta("e1"), "type": "Warning", "reason": "Failed", "message": " boom \n",
      "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
      "source": {"component": "kubelet", "host": "n1"}, "count": 3,
      "firstTimestamp": ts(hours=1), "lastTimestamp": ts(seconds=30)},
     {"Last Seen": "30s", "Type": "Warning", "Reason": "Failed", "Object": "pod/p",
      "Subobject": "spec.containers{a}", "Source": "kubelet, n1", "Message": "boom",
      "First Seen": "60m", "Count": 3, "Name": "e1"}),
    ("Event",
     {"metadata": meta("e2"), "type": "Normal", "reason": "R", "note": "n",
      "regarding": {"kind": "DataVolume", "name": "dv"}, "reportingController": "cdi",
      "eventTime": "2026-01-10T11:59:00.000000Z"},
     {"Last Seen": "60s", "Object": "datavolume/dv", "Source": "cdi", "Message": "n",
      "Count": 1}),
    ("Deployment",
     {"metadata": meta("d"), "spec": {"replicas": 3, "selector": {
         "matchLabels": {"app": "x"},
         "matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]},
         "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
      "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}},
     {"Ready": "2/3", "Up-to-date": 3, "Available": 2, "Containers": "c", "Images": "i:1",
      "Selector": "app=x,t in (a,b)"}),
    ("Deployment", {"metadata": meta("d"), "spec": {}},
     {"Ready": "0/1", "Up-to-date": 0, "Available": 0, "Selector": "<none>"}),
    ("DaemonSet",
     {"metadata": meta("ds"), "spec": {"template": {"spec": {
         "nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}}},
      "status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberReady": 1,
                 "updatedNumberScheduled": 1, "numberAvailable": 0}},
     {"Desired": 1, "Current": 1, "Ready": 1, "Up-to-date": 1, "Available": 0,
      "Node Selector": "kubernetes.io/os=linux"}),
    ("Service",
     {"metadata": meta("s"), "spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
                                      "ports": [{"port": 80, "protocol": "TCP"},
                                                {"port": 443, "nodePort": 30443}],
                                      "selector": {"app": "x"}}},
     {"Type": "NodePort", "Cluster-IP": "10.96.0.10", "External-IP": "<none>",
      "Port(s)": "80/TCP,443:30443/TCP", "Selector": "app=x"}),
    ("Service", {"metadata": meta("lb"), "spec": {"type": "LoadBalancer"}},
     {"External-IP": "<pending>", "Port(s)": "<none>", "Cluster-IP": "<none>"}),
    ("Service", {"metadata": meta("lb"), "spec": {"type": "LoadBalancer",
                                                  "clusterIPs": ["10.96.0.7"],
                                                  "externalIPs": ["1.2.3.4"]},
                 "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}},
     {"External-IP": "lb.example,1.2.3.4", "Cluster-IP": "10.96.0.7"}),
    ("Service", {"metadata": meta("c"), "spec": {"externalIPs": ["5.6.7.8"]}},
     {"Type": "ClusterIP", "External-IP": "5.6.7.8"}),
    ("Service", {"metadata": meta("en"), "spec": {"type": "ExternalName",
                                                  "externalName": "x.example"}},
     {"External-IP": "x.example"}),
    ("Endpoints",
     {"metadata": meta("ep"), "subsets": [{"addresses": [{"ip": f"10.0.0.{i}"}
                                                         for i in range(5)],
                                           "ports": [{"port": 80}]}]},
     {"Endpoints": "10.0.0.0:80,10.0.0.1:80,10.0.0.2:80 + 2 more..."}),
    ("Endpoints", {"metadata": meta("ep")}, {"Endpoints": "<none>"}),
    ("ConfigMap", {"metadata": meta("c"), "data": {"a": "1"}, "binaryData": {"b": "AA=="}},
     {"Data": 2}),
    ("Secret", {"metadata": meta("s"), "data": {"a": "MQ=="}},
     {"Type": "Opaque", "Data": 1}),
    ("ServiceAccount", {"metadata": meta("sa"), "secrets": [{"name": "t"}]}, {"Secrets": 1}),
    ("Lease", {"metadata": meta("l"), "spec": {"holderIdentity": "op-1"}}, {"Holder": "op-1"}),
    ("ClusterRole", {"metadata": meta("r")}, {"Created At": ts(minutes=5)}),
    ("RoleBinding",
     {"metadata": meta("rb"), "roleRef": {"kind": "ClusterRole", "name": "edit"},
      "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
                   {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"}]},
     {"Role": "ClusterRole/edit", "Users": "alice", "Groups": "devs",
      "ServiceAccounts": "ns/sa"}),
    ("CSIDriver", {"metadata": meta("local.csi"), "spec": {"attachRequired": False}},
     {"AttachRequired": False, "PodInfoOnMount": False, "TokenRequests": "<none>",
      "Modes": "Persistent"}),
    ("ValidatingWebhookConfiguration", {"metadata": meta("v"), "webhooks": [{}, {}]},
     {"Webhooks": 2}),
]


@pytest.mark.parametrize(("kind", "obj", "expected"), BUILTIN_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(BUILTIN_CASES)])
def test_builtin_rows(kind: str, obj: dict[str, Any], expected: dict[str, Any]) -> None:
    got = cells(kind, obj)
    for key, value in expected.items():
        assert got[key] == value, (key, got)


def test_column_types_follow_kube_apiserver() -> None:
    # Counts kube-apiserver declares as strings even though the cells are numbers.
    def types(kind: str) -> dict[str, str]:
        table = to_table([], kind=kind, columns=None, list_meta={})
        return {c["name"]: c["type"] for c in table["columnDefinitions"]}

    assert types("Deployment")["Up-to-date"] == "string"
    assert types("Event")["Count"] == "string"
    assert types("Secret")["Data"] == "string"
    assert types("DaemonSet")["Desired"] == "integer"
    assert types("ValidatingWebhookConfiguration")["Webhooks"] == "integer"
    assert types("CSIDriver")["AttachRequired"] == "boolean"


def test_every_printer_handles_an_empty_object() -> None:
    from localcluster.apiserver.tables.printers import PRINTERS

    for kind, (columns, _) in PRINTERS.items():
        table = to_table([{"metadata": {"name": "x"}}], kind=kind, columns=None, list_meta={},
                         now=NOW)
        assert len(table["rows"][0]["cells"]) == len(columns), kind
