"""``pause`` / ``unpause`` of subresources.kubevirt.io end to end on a real API server:
virt-api's checks (upstream's PauseVMIRequestHandler/UnpauseVMIRequestHandler table,
``vm.api.pause``), the node handler over mutual TLS, a real launcher booting a boot
sector under TCG (QMP stop/cont), the handler's sync setting and clearing the Paused
condition (PausedByUser, ``VMI was paused by user``), and ``rootdisk pause|unpause``."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client
from kubeclient.resources import VMIS
from tests.fixtures.guests import MARKER, write_boot_sector_disk
from tests.vm.agent.test_agent_subresources import call
from tests.vm.launcher.harness import REPO, Launch
from tests.vm.test_console_relay import NODE, HandlerThread, _place, _vmi
from tests.vm.test_virtapi import cluster  # noqa: F401  (module fixture: server + virt-api)
from vm.api import pause
from vm.handler import kube as handler_kube


def _obj(phase: str | None, paused: bool, **spec: Any) -> dict[str, Any]:
    conds = [{"type": "Paused", "status": "True"}] if paused else []
    return {"metadata": {"name": "testvmi"}, "spec": spec,
            "status": {"phase": phase, "conditions": conds} if phase else {}}


CONFLICT = 'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "testvmi": '


# upstream's subresource_test.go "Pausing" tables, row by row
@pytest.mark.parametrize(("action", "vmi", "code", "message"), [
    ("pause", _obj("Running", False), None, None),
    ("pause", _obj("Scheduled", False), 409, CONFLICT + "VM is not running"),
    ("pause", _obj(None, False), 409, CONFLICT + "VM is not running"),
    ("pause", _obj("Running", True), 409, CONFLICT + "VMI is already paused"),
    ("pause", _obj("Running", False, livenessProbe={"httpGet": {"port": 80}}), 403,
     'virtualmachineinstance.kubevirt.io "testvmi" is forbidden: Pausing VMIs with a '
     "non-GuestAgentPing LivenessProbe is not supported"),
    ("pause", _obj("Running", False, livenessProbe={"guestAgentPing": {}}), None, None),
    ("unpause", _obj("Running", True), None, None),
    ("unpause", _obj("Running", False), 409, CONFLICT + "VMI is not paused"),
    ("unpause", _obj("Succeeded", False), 409, CONFLICT + "VMI is not running"),
])
def test_upstream_refusals(action: str, vmi: dict[str, Any], code: int | None,
                          message: str | None) -> None:
    got = pause.refuse(action, vmi)
    assert (None if got is None else (got.code, got.message)) == (
        None if code is None else (code, message))


@pytest.mark.parametrize(("raw", "dry"), [
    (b"", False), (b"{}", False), (b'{"dryRun": ["All"]}', True), (b'{"dryRun": []}', False),
])
def test_options(raw: bytes, dry: bool) -> None:
    assert pause.dry_run(raw, "PauseOptions") is dry


@pytest.mark.parametrize(("raw", "field"), [
    (b"[", "PauseOptions: not JSON"), (b"[]", "PauseOptions: must be an object"),
    (b'{"dryRun": "All"}', "PauseOptions.dryRun"), (b'{"dryRun": ["Some"]}',
                                                     "PauseOptions.dryRun"),
])
def test_bad_options_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(pause.BadOptions, match=field):
        pause.dry_run(raw, "PauseOptions")


def _put(server: Any, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """A PUT with a JSON body (``call`` sends none)."""
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    req = urllib.request.Request(server.url + path, method="PUT", data=body, headers={
        "Authorization": f"Bearer {server.admin_token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _rootdisk(server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootdisk", *args, "--kubeconfig",
                           str(server.kubeconfig_path), "-n", "default"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_pause_and_unpause_through_the_api(cluster: tuple[Any, Client, int],  # noqa: F811
                                           tmp_path: Path) -> None:
    server, kube, _ = cluster
    ns, name = "default", f"pz-{uuid.uuid4().hex[:6]}"
    vmi = _vmi(kube, ns, name)
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}"
    run = Launch({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                  "metadata": {k: vmi["metadata"][k] for k in ("name", "namespace", "uid")},
                  "spec": vmi["spec"]})
    handler = None
    try:
        write_boot_sector_disk(run.volume_dir("root") / "disk.img", poweroff=False)
        run.start()
        run.wait_for_console(MARKER)
        run.wait_for_state("running")
        code, body = call(server, "PUT", f"{base}/pause")
        assert (code, body["message"]) == (
            409, f'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io '
                 f'"{name}": VM is not running')
        handler = HandlerThread(kube, run.socket_root, tmp_path).start()
        _place(kube, ns, name, node=NODE, handler_port=handler.port)

        def sync() -> dict[str, Any]:
            handler_kube.sync(
                kube, kube.get_or_none(VMIS, name, ns), socket_dir=str(run.socket_root),
                              shut=set())
            got: dict[str, Any] = kube.get_or_none(VMIS, name, ns)
            return got

        def paused_condition() -> dict[str, Any] | None:
            conds = sync()["status"].get("conditions") or []
            return next((c for c in conds if c["type"] == "Paused"), None)

        assert paused_condition() is None
        # a dry run checks, and changes nothing
        assert _put(server, f"{base}/pause", b'{"dryRun": ["All"]}')[0] == 200
        assert run.request({"cmd": "status"})["state"] == "running"
        done = _rootdisk(server, "pause", "vmi", name)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"VMI {name} was scheduled to pause\n"
        assert run.request({"cmd": "status"})["state"] == "paused"
        deadline = time.monotonic() + 30
        while (cond := paused_condition()) is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "True", "PausedByUser", "VMI was paused by user")
        code, body = call(server, "PUT", f"{base}/pause")
        assert code == 409 and body["message"].endswith(": VMI is already paused")
        done = _rootdisk(server, "unpause", f"vmi/{name}")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"VMI {name} was scheduled to unpause\n"
        assert run.request({"cmd": "status"})["state"] == "running"
        deadline = time.monotonic() + 30
        while paused_condition() is not None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        code, body = call(server, "PUT", f"{base}/unpause")
        assert code == 409 and body["message"].endswith(": VMI is not paused")
        done = _rootdisk(server, "unpause", f"vmi/{name}")
        assert done.returncode == 1
        assert done.stderr.startswith(f"Error unpausing VirtualMachineInstance {name}: ")
        assert "VMI is not paused" in done.stderr
        done = _rootdisk(server, "pause", "vm", name)  # no VM of that name
        assert done.returncode == 1
        assert done.stderr.startswith(f"Error getting VirtualMachine {name}: "), done.stderr
    finally:
        if handler is not None:
            handler.stop()
        run.cleanup()
