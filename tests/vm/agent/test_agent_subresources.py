"""The guest agent end to end on a real API server: a small guest running Debian 12's real
qemu-guest-agent on an ext4 root (tests/fixtures/guests.py, mode ``agent``) booted under
TCG by a real launcher, the node handler's sync setting AgentConnected, guestOSInfo and
the guest's interfaces, and virt-api's guestosinfo, userlist, filesystemlist and
softreboot through the aggregator, over mutual TLS to the handler. (The Debian cloud
guest's own agent is proven on a real cluster in tests/e2e/test_vm_cloudguest.py.)"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client
from kubeclient.resources import VMIS
from tests.fixtures.guests import AGENT_HOSTNAME, LinuxGuest
from tests.vm.launcher.harness import Launch
from tests.vm.test_console_relay import NODE, HandlerThread, _place, _vmi
from tests.vm.test_virtapi import cluster  # noqa: F401  (module fixture: server + virt-api)
from vm.handler import kube as handler_kube

BOOT_WAIT = 120  # the small guest boots in seconds under TCG; a broken one fails in time


def call(server: Any, method: str, path: str) -> tuple[int, dict[str, Any]]:
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    req = urllib.request.Request(server.url + path, method=method, data=b"" if method == "PUT"
                                 else None, headers={
                                     "Authorization": f"Bearer {server.admin_token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.slow
def test_guest_agent_status_and_subresources(cluster: tuple[Any, Client, int],  # noqa: F811
                                             linux_guest_agent: LinuxGuest,
                                             tmp_path: Path) -> None:
    server, kube, _ = cluster
    ns, name = "default", f"ga-{uuid.uuid4().hex[:6]}"
    vmi = _vmi(kube, ns, name)
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}"
    run = Launch({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                  "metadata": {k: vmi["metadata"][k] for k in ("name", "namespace", "uid")},
                  "spec": {**vmi["spec"], "domain": {**vmi["spec"]["domain"], "resources": {
                      "requests": {"memory": "256Mi"}}}}},
                 env={"AGENT_POLL_SCALE": "0.05"})
    handler = None
    try:
        run.add_disk("root", linux_guest_agent.raw)
        run.start()
        run.wait_for_state("running")
        for sub in ("guestosinfo", "userlist", "filesystemlist"):
            assert call(server, "GET", f"{base}/{sub}")[1]["message"] == "VMI is not running"
        assert call(server, "PUT", f"{base}/softreboot")[1]["message"] == "VM is not running"
        handler = HandlerThread(kube, run.socket_root, tmp_path).start()
        _place(kube, ns, name, node=NODE, handler_port=handler.port)

        def sync() -> dict[str, Any]:
            current = kube.get_or_none(VMIS, name, ns)
            assert current is not None
            handler_kube.sync(kube, current, socket_dir=str(run.socket_root), shut=set())
            got = kube.get_or_none(VMIS, name, ns)
            assert got is not None
            return got

        st = sync()["status"]
        assert "AgentConnected" not in {c["type"] for c in st["conditions"]}  # still booting
        for sub in ("guestosinfo", "userlist", "filesystemlist"):
            code, body = call(server, "GET", f"{base}/{sub}")
            assert (code, body["message"]) == (409, "VMI does not have guest agent connected")
        deadline = time.monotonic() + BOOT_WAIT
        while True:
            st = sync()["status"]
            conds = {c["type"]: c for c in st["conditions"]}
            ifaces = st.get("interfaces") or []
            if "AgentConnected" in conds and st.get("guestOSInfo") and ifaces and ifaces[0].get(
                    "interfaceName"):
                break
            assert time.monotonic() < deadline, (json.dumps(st)[-1500:], run.log()[-1500:])
            time.sleep(0.5)
        assert conds["AgentConnected"]["status"] == "True"
        assert "AgentVersionNotSupported" not in conds  # the real agent has every command
        assert st["guestOSInfo"]["id"] == "debian"
        assert ifaces[0]["name"] == "default" and ifaces[0]["infoSource"] == (
            "domain, guest-agent")
        # the kernel's name: the small guest has no udev to give it a predictable "en*" one
        assert ifaces[0]["interfaceName"] == "eth0"

        code, info = call(server, "GET", f"{base}/guestosinfo")
        assert code == 200, info
        assert info["os"]["prettyName"].startswith("Debian GNU/Linux 12")
        assert info["hostname"] == AGENT_HOSTNAME and info["guestAgentVersion"]
        assert {"name": "guest-ping", "enabled": True} in info["supportedCommands"]
        assert any(d["mountPoint"] == "/" for d in info["fsInfo"]["disks"])
        code, users = call(server, "GET", f"{base}/userlist")
        assert code == 200 and users["items"] == []  # nobody logged in
        code, fs = call(server, "GET", f"{base}/filesystemlist")
        assert code == 200
        [root] = [d for d in fs["items"] if d["mountPoint"] == "/"]
        assert root["fileSystemType"] == "ext4" and 0 < root["usedBytes"] < root["totalBytes"]
        assert root["disk"][0]["busType"] == "virtio"

        boots = run.console_text().count("SYSLINUX ")
        assert call(server, "PUT", f"{base}/softreboot")[0] == 200
        deadline = time.monotonic() + BOOT_WAIT
        while run.console_text().count("SYSLINUX ") <= boots:
            assert time.monotonic() < deadline, run.console_text()[-2000:]
            time.sleep(0.2)
        assert run.proc is not None and run.proc.poll() is None  # rebooted, not ended
    finally:
        if handler is not None:
            handler.stop()
        run.cleanup()
