"""Protobuf request bodies (what kubectl's imperative commands send): decoding, refusal of
unknown kinds, and kubectl create/auth commands end to end."""

from __future__ import annotations

import base64
import os
import subprocess

import pytest

from localcluster.apiserver.wire import protobuf

from .kubectl_tool import kubectl_path, needs_kubectl
from .server_fixtures import Raw


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw) + _field(3, "") + \
        _field(4, "")


def _meta(name: str, namespace: str = "", **labels: str) -> bytes:
    out = _field(1, name) + _field(2, "") + _field(3, namespace) + _field(7, 0)
    for k, v in labels.items():
        out += _field(11, _field(1, k) + _field(2, v))
    return out


def test_decodes_a_secret_with_binary_data_and_labels():
    raw = (_field(1, _meta("s", "ns", app="x")) + _field(2, _field(1, "bin") + _field(
        2, b"\x00\xff")) + _field(3, "Opaque") + _field(5, 1))
    obj = protobuf.decode_request(_envelope("v1", "Secret", raw))
    assert obj == {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
                   "metadata": {"name": "s", "namespace": "ns", "labels": {"app": "x"}},
                   "data": {"bin": base64.b64encode(b"\x00\xff").decode()}}


def test_decodes_nested_and_repeated_messages():
    rule = _field(1, "get") + _field(1, "list") + _field(2, "") + _field(3, "pods")
    binding = (_field(1, _meta("rb")) + _field(2, _field(1, "User") + _field(3, "u"))
               + _field(3, _field(1, "rbac.authorization.k8s.io") + _field(2, "Role")
                        + _field(3, "r")))
    role = protobuf.decode_request(_envelope("rbac.authorization.k8s.io/v1", "Role",
                                             _field(1, _meta("r")) + _field(2, rule)))
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""],
                              "resources": ["pods"]}]
    rb = protobuf.decode_request(_envelope("rbac.authorization.k8s.io/v1", "RoleBinding",
                                           binding))
    assert rb["subjects"] == [{"kind": "User", "name": "u"}]
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "r"}
    token = protobuf.decode_request(_envelope("authentication.k8s.io/v1", "TokenRequest",
                                              _field(2, _field(1, "a") + _field(4, 600))))
    assert token["spec"] == {"audiences": ["a"], "expirationSeconds": 600}


@pytest.mark.parametrize(("body", "needle"), [
    (b"not protobuf", "magic"),
    (_envelope("apps/v1", "StatefulSet", b""), "send StatefulSet as JSON"),
    (_envelope("v1", "ConfigMap", _field(9, "surprise")), "field 9 of ConfigMap"),
    (protobuf.MAGIC + b"\x0a\x05ab", "truncated"),
    (_envelope("v1", "ConfigMap", _field(1, b"\x0a\xff")), "truncated"),
    (_envelope("v1", "ConfigMap", _field(1, _field(1, b"\xff\xfe"))), "UTF-8"),
])
def test_bad_protobuf(body, needle):
    with pytest.raises(protobuf.ProtobufError) as err:
        protobuf.decode_request(body)
    assert needle in str(err.value)


def test_protobuf_over_http(raw: Raw, namespace):
    body = _envelope("v1", "ConfigMap", _field(1, _meta("pb")) + _field(2, _field(1, "k")
                                                                         + _field(2, "v")))
    code, obj = raw.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", raw=body,
                            content_type=protobuf.CONTENT_TYPE)
    assert code == 201 and obj["data"] == {"k": "v"} and obj["metadata"]["namespace"] == \
        namespace
    code, obj = raw.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets",
                            raw=_envelope("apps/v1", "StatefulSet", b""),
                            content_type=protobuf.CONTENT_TYPE)
    assert code == 415 and "as JSON" in obj["message"]




@needs_kubectl
def test_kubectl_imperative_commands(shared_server, namespace, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(shared_server.kubeconfig_path),
           "HOME": str(tmp_path)}

    def kubectl(*args, code=0):
        proc = subprocess.run([kubectl_path(), "-n", namespace, *args], env=env, text=True,
                              capture_output=True, timeout=30)
        assert proc.returncode == code, (args, proc.stderr)
        return proc.stdout

    kubectl("create", "configmap", "c", "--from-literal=a=b")
    kubectl("create", "secret", "generic", "s", "--from-literal=user=me")
    kubectl("create", "serviceaccount", "robot")
    kubectl("create", "role", "r", "--verb=get,list", "--resource=configmaps")
    kubectl("create", "rolebinding", "rb", "--role=r", f"--serviceaccount={namespace}:robot")
    assert kubectl("get", "secret", "s", "-o", "jsonpath={.data.user}") == "bWU="
    robot = f"--as=system:serviceaccount:{namespace}:robot"
    assert kubectl("auth", "can-i", "list", "configmaps", robot) == "yes\n"
    assert kubectl("auth", "can-i", "delete", "configmaps", robot, code=1).startswith("no")
    assert kubectl("get", "configmaps", "-o", "name", robot) == \
        "configmap/c\nconfigmap/kube-root-ca.crt\n"
    proc = subprocess.run([kubectl_path(), "get", "secrets", "-n", namespace, robot], env=env,
                          text=True, capture_output=True, timeout=30)
    assert proc.returncode == 1 and "cannot list resource" in proc.stderr
    assert f"system:serviceaccount:{namespace}:robot" in kubectl("auth", "whoami", robot)
    assert kubectl("create", "token", "robot").startswith("eyJ")  # a JWT's JSON header
    kubectl("create", "deployment", "web", "--image=rootdisk/x:1", "--replicas=2",
            "--port=8080")
    assert kubectl("get", "deploy", "web", "-o",
                   "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].ports}") == \
        '2 [{"containerPort":8080}]'
    kubectl("create", "service", "clusterip", "web", "--tcp=80:http")
    assert kubectl("get", "svc", "web", "-o", "jsonpath={.spec.ports[0].targetPort}") == "http"
    kubectl("create", "job", "once", "--image=rootdisk/x:1", "--", "echo", "hi")
    assert kubectl("get", "job", "once", "-o",
                   "jsonpath={.spec.template.spec.containers[0].command}") == '["echo","hi"]'
    assert "system:masters" in kubectl("auth", "whoami")
