"""``make demo``: what users come for, on this machine, end to end.

1. start the embedded cluster (``rootdisk up``, left running in the background);
2. build (once, then cached) a Debian 12 cloud guest, a qcow2 that takes its user, key
   and network from cloud-init as a user's cloud image does, and serve it over loopback
   HTTP;
3. make the demo's SSH keys (a login key for you, a host key for the guest) under the
   cluster's data dir, where ``rootdisk ssh`` finds them for this VM;
4. apply a Secret with the cloud-init user-data and a VirtualMachine whose root disk is
   a dataVolumeTemplate importing that image, its cloud-init from the Secret;
5. show the import's progress, wait for the VM to run, then log in with
   ``rootdisk ssh`` (through the API server's ``portforward`` subresource) and print the
   guest's ``uname -a`` and ``cloud-init status``;
6. leave the cluster and the VM up: ``rootdisk ssh vm/demo`` logs in again.

``make demo STOP=1`` (``--stop``) tears the cluster down. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
VM_NAME = "demo"
NAMESPACE = "default"
SECRET = f"{VM_NAME}-cloudinit"


class DemoError(Exception):
    """A step did not complete; the message says which and what was seen."""


def guest_image() -> Path:
    """The Debian cloud guest's qcow2 (built once, ~2 min, then cached by its content)."""
    from rootdisk.cloudguest import CloudGuestError, build_cloud_guest
    try:
        return build_cloud_guest()
    except CloudGuestError as err:
        raise DemoError(f"building the Debian cloud guest: {err}") from None


def login_user() -> str:
    """Who ``rootdisk ssh vm/demo`` logs in as (its own default: $USER, $USERNAME,
    $LOGNAME, else this process's user)."""
    import pwd

    from rootdisk.vmtarget import default_user
    return default_user(os.environ) or pwd.getpwuid(os.getuid()).pw_name


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                        "-f", str(path)], check=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    os.chmod(path, 0o600)


def ssh_keys(data_dir: str) -> Path:
    """The demo's key directory (``<data dir>/ssh/<ns>/<vm>``, 0700): ``id_ed25519``, the
    key ``rootdisk ssh`` logs in with, ``host_ed25519``, the guest's host key (cloud-init
    installs it), and ``known_hosts``, which says so (``rootdisk ssh`` trusts it for this
    VM). Made once and kept: a new demo VM has the same keys."""
    from rootdisk import vmkeys
    directory = Path(vmkeys.key_path(data_dir, NAMESPACE, VM_NAME)).parent
    directory.mkdir(parents=True, exist_ok=True)
    for each in (directory, directory.parent, directory.parent.parent):  # <vm>, <ns>, ssh
        os.chmod(each, 0o700)
    _keygen(directory / "id_ed25519", f"rootdisk-demo-login@{VM_NAME}")
    _keygen(directory / "host_ed25519", f"rootdisk-demo-host@{VM_NAME}")
    host = (directory / "host_ed25519.pub").read_text().split()
    known = directory / "known_hosts"
    known.write_text(f"vm.{VM_NAME}.{NAMESPACE} {host[0]} {host[1]}\n")
    os.chmod(known, 0o600)
    return directory


def user_data(keys: Path, user: str) -> str:
    """The cloud-config: ``user`` with the demo's login key, the demo's host key, and
    for root the sshd setting that lets a key in (the image allows no root login)."""
    import json
    login = (keys / "id_ed25519.pub").read_text().strip()
    config: dict[str, Any] = {
        "ssh_keys": {"ed25519_private": (keys / "host_ed25519").read_text(),
                     "ed25519_public": (keys / "host_ed25519.pub").read_text().strip()},
        "ssh_deletekeys": True,
    }
    if user == "root":
        config["disable_root"] = False
        config["users"] = [{"name": "root", "lock_passwd": True,
                            "ssh_authorized_keys": [login]}]
        config["write_files"] = [{"path": "/etc/ssh/sshd_config.d/10-rootdisk-demo.conf",
                                  "content": "PermitRootLogin prohibit-password\n"}]
        config["runcmd"] = [["systemctl", "reload", "ssh"]]
    else:
        config["users"] = [{"name": user, "shell": "/bin/bash", "lock_passwd": True,
                            "sudo": "ALL=(ALL) NOPASSWD:ALL",
                            "ssh_authorized_keys": [login]}]
    return "#cloud-config\n" + json.dumps(config, indent=1) + "\n"


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """A Range-capable static HTTP server on loopback, in a thread."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_static("/", directory)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def wait(what: str, fn: Callable[[], Any], *, timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise DemoError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def vm_manifest(url: str, *, disk_size: int) -> dict[str, Any]:
    mib = -(-disk_size // MiB)
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": VM_NAME, "namespace": NAMESPACE},
        "spec": {
            "runStrategy": "Always",
            "dataVolumeTemplates": [{
                "metadata": {"name": f"{VM_NAME}-rootdisk"},
                "spec": {"source": {"http": {"url": url}},
                         "storage": {"resources": {"requests": {"storage": f"{mib}Mi"}}}}}],
            "template": {
                "metadata": {"labels": {"app": VM_NAME}},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "domain": {"cpu": {"cores": 2},
                               "resources": {"requests": {"memory": "1Gi"}},
                               "devices": {
                                   "disks": [{"name": "rootdisk", "bootOrder": 1,
                                              "disk": {"bus": "virtio"}},
                                             {"name": "cloudinit", "disk": {"bus": "virtio"}}],
                                   "interfaces": [{"name": "default", "masquerade": {},
                                                   "ports": [{"name": "ssh", "port": 22}]}]}},
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "rootdisk",
                                 "dataVolume": {"name": f"{VM_NAME}-rootdisk"}},
                                {"name": "cloudinit",
                                 "cloudInitNoCloud": {"secretRef": {"name": SECRET}}}]}},
        },
    }


def start_cluster(data_dir: str, *, timeout: float) -> str:
    """The kubeconfig of the cluster on ``data_dir``, started unless it runs (restarted
    when it runs other code than the checkout's, see :mod:`rootdisk.codeprint`), once its
    API server answers: the kubeconfig of an earlier run is still there, and a new run
    takes its lock before its API server listens."""
    from localcluster.cluster import is_running
    from rootdisk import codeprint

    kubeconfig = os.path.join(data_dir, "kubeconfig")
    # no record at all: a `rootdisk up` from before fingerprints, older code too
    if is_running(data_dir) and codeprint.runs_other_code(data_dir) is not False:
        print(f"== the embedded cluster on {data_dir} was started from other code than"
              " this checkout's: restarting it (its objects and volumes stay, but for the"
              " earlier demo's VM, which it replaces)")
        if answers(kubeconfig):
            # restarted, the cluster would boot the earlier demo's VM again (runStrategy
            # Always) only for apply_vm to delete it: minutes of CPU under TCG. Best
            # effort: the other code may not get it done, and apply_vm tries again
            import urllib3

            from kubeclient import Client, KubeError, load_configuration
            kube = Client(load_configuration(kubeconfig))
            try:
                remove_earlier_vm(kube)
            except (DemoError, KubeError, OSError, urllib3.exceptions.HTTPError) as err:
                print(f"   not removed before the restart ({err}): replaced after it")
            finally:
                kube.api.close()
        if stop(data_dir) != 0:
            raise DemoError(f"the cluster on {data_dir} did not stop")
    if is_running(data_dir):
        print(f"== the embedded cluster already runs on {data_dir}")
    else:
        os.makedirs(data_dir, exist_ok=True)
        log = open(os.path.join(data_dir, "up.log"), "ab")  # noqa: SIM115 (the child keeps it)
        print(f"== rootdisk up --data-dir {data_dir}   (log: {data_dir}/up.log)")
        subprocess.Popen([sys.executable, "-m", "rootdisk", "up", "--data-dir", data_dir],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         start_new_session=True)
        log.close()
    wait("the cluster's API server", lambda: is_running(data_dir) and answers(kubeconfig),
         timeout=timeout, every=0.5)
    return kubeconfig


def answers(kubeconfig: str) -> bool:
    """Whether the API server of ``kubeconfig`` answers (read afresh: a new run rewrites
    it once it listens)."""
    import urllib3

    from kubeclient import Client, KubeError, load_configuration

    if not os.path.exists(kubeconfig):
        return False
    try:
        kube = Client(load_configuration(kubeconfig))
    except (OSError, ValueError):  # being rewritten
        return False
    try:
        kube.request("GET", "/version")
        return True
    except (KubeError, OSError, urllib3.exceptions.HTTPError):
        return False
    finally:
        kube.api.close()


def no_stuck_pods(kube: Any, namespaces: tuple[str, ...]) -> None:
    """DemoError naming each pod of ``namespaces`` that crash-loops or cannot start, with
    its reason and last log lines: waiting longer would not help."""
    from kubeclient.resources import PODS
    from rootdisk import podhealth
    found = [item for ns in namespaces for item in podhealth.stuck(kube.list(PODS, ns))]
    if found:
        raise DemoError("these pods will not come up:\n"
                        + "\n".join(podhealth.describe(kube, item) for item in found))


def components_ready(kube: Any) -> bool:
    from kubeclient.resources import APISERVICES, PODS
    no_stuck_pods(kube, ("kubevirt", "rootdisk"))
    ready = set()
    for ns in ("kubevirt", "rootdisk"):
        for pod in kube.list(PODS, ns):
            conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get(
                "conditions") or []}
            if conds.get("Ready") == "True":
                labels = pod["metadata"].get("labels") or {}
                ready.add(labels.get("kubevirt.io") or labels.get("app.kubernetes.io/name"))
    svc = kube.get_or_none(APISERVICES, "v1.subresources.kubevirt.io") or {}
    available = any(c.get("type") == "Available" and c.get("status") == "True"
                    for c in (svc.get("status") or {}).get("conditions") or [])
    return available and {"virt-api", "virt-controller", "virt-handler",
                          "rootdisk-cdi-operator"} <= ready


def remove_earlier_vm(kube: Any) -> None:
    """Delete the VirtualMachine of an earlier demo, if there is one, and wait until it,
    its VMI and its DataVolume are gone."""
    from kubeclient.resources import DATAVOLUMES, VMIS, VMS
    if kube.get_or_none(VMS, VM_NAME, NAMESPACE) is None:
        return
    print(f"== replacing the VirtualMachine {VM_NAME} of an earlier demo")
    kube.delete(VMS, VM_NAME, NAMESPACE)
    wait("the old VM, VMI and DataVolume to go", lambda: all(
        kube.get_or_none(res, name, NAMESPACE) is None for res, name in (
            (VMS, VM_NAME), (VMIS, VM_NAME), (DATAVOLUMES, f"{VM_NAME}-rootdisk"))),
         timeout=120)


def apply_vm(kube: Any, url: str, *, disk_size: int, userdata: str) -> None:
    from kubeclient import KubeError
    from kubeclient.resources import SECRETS, VMS
    remove_earlier_vm(kube)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": SECRET, "namespace": NAMESPACE},
              "stringData": {"userdata": userdata}}
    if kube.get_or_none(SECRETS, SECRET, NAMESPACE) is not None:
        kube.delete(SECRETS, SECRET, NAMESPACE)
    kube.create(SECRETS, secret, NAMESPACE)
    for attempt in range(30):  # the webhook may take a moment after the APIService
        try:
            kube.create(VMS, vm_manifest(url, disk_size=disk_size), NAMESPACE)
            return
        except KubeError as err:
            if err.status not in (500, 503) or attempt == 29:
                raise DemoError(f"creating the VirtualMachine: {err.message}") from None
            time.sleep(2)


def follow_import(kube: Any, *, timeout: float) -> None:
    from kubeclient.resources import DATAVOLUMES
    name = f"{VM_NAME}-rootdisk"
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status = (kube.get_or_none(DATAVOLUMES, name, NAMESPACE) or {}).get("status") or {}
        now = (status.get("phase"), status.get("progress"))
        if now != last and now[0]:
            print(f"   DataVolume {name}: {now[0]:<18} {now[1] or ''}")
            last = now
        if now[0] == "Succeeded":
            return
        if now[0] == "Failed":
            raise DemoError(f"the import failed: {status.get('conditions')}")
        time.sleep(0.5)
    raise DemoError(f"the import did not finish in {timeout:.0f} s (last: {last})")


def wait_running(kube: Any, *, timeout: float) -> None:
    from kubeclient.resources import VMS
    seen = None

    def running() -> bool:
        nonlocal seen
        status = ((kube.get_or_none(VMS, VM_NAME, NAMESPACE) or {}).get("status") or {})
        if status.get("printableStatus") != seen:
            seen = status.get("printableStatus")
            print(f"   VirtualMachine {VM_NAME}: {seen}")
        return seen == "Running"
    wait("the VM to run", running, timeout=timeout, every=0.5)


def ssh_argv(kubeconfig: str, keys: Path, command: str) -> list[str]:
    return [sys.executable, "-m", "rootdisk", "ssh", f"vm/{VM_NAME}", "-n", NAMESPACE,
            "--kubeconfig", kubeconfig, "-i", str(keys / "id_ed25519"),
            *(f"--local-ssh-opts={o}" for option in (
                f"UserKnownHostsFile={keys / 'known_hosts'}", "StrictHostKeyChecking=yes",
                "ConnectTimeout=20", "BatchMode=yes") for o in ("-o", option)),
            "--command", command]


def wait_agent(kube: Any, *, timeout: float) -> None:
    """The guest agent connects as the guest's services start, sshd among them: until
    then no SSH attempt is made (each starts three processes, CPU a booting guest under
    TCG would miss)."""
    from kubeclient.resources import VMIS

    def connected() -> bool:
        vmi = kube.get_or_none(VMIS, VM_NAME, NAMESPACE) or {}
        return any(c.get("type") == "AgentConnected" and c.get("status") == "True"
                   for c in (vmi.get("status") or {}).get("conditions") or [])
    wait("the guest agent", connected, timeout=timeout, every=1.0)


def guest_says(kubeconfig: str, keys: Path, *, timeout: float) -> str:
    """``uname -a`` and ``cloud-init status --wait`` from the guest, through
    ``rootdisk ssh`` (retried while sshd is not up yet)."""
    command = "uname -a; cloud-init status --wait"
    last = ""

    def attempt() -> str:
        nonlocal last
        done = subprocess.run(ssh_argv(kubeconfig, keys, command), capture_output=True,
                              text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return done.stdout if done.returncode == 0 and "status:" in done.stdout else ""

    try:
        out: str = wait("an SSH login to the guest", attempt, timeout=timeout, every=3)
    except DemoError as err:
        raise DemoError(f"{err}; ssh said: {last}") from None
    return out


def run(data_dir: str, *, timeout: float) -> int:
    from kubeclient import Client, load_configuration

    started = time.monotonic()
    kubeconfig = start_cluster(data_dir, timeout=timeout)
    kube = Client(load_configuration(kubeconfig))
    try:
        print("== waiting for the operators (CDI, virt-controller, virt-api, virt-handler)")
        wait("the operators", lambda: components_ready(kube), timeout=timeout)
        print("== the guest: a Debian 12 cloud image (cloud-init, OpenSSH, qemu-guest-agent),"
              " built from Debian's packages once, then cached")
        image = guest_image()
        disk_size = json_virtual_size(image)
        print(f"   {image} ({image.stat().st_size / MiB:.0f} MiB qcow2,"
              f" {disk_size / MiB:.0f} MiB virtual)")
        keys = ssh_keys(data_dir)
        user = login_user()
        print(f"== SSH keys in {keys}: you log in as {user} with id_ed25519; the guest's host"
              " key comes from there too (known_hosts)")
        with serve(image.parent) as base:
            url = f"{base}/{image.name}"
            print(f"== serving it at {url}")
            print(f"== applying Secret {SECRET} (cloud-init user-data) and VirtualMachine"
                  f" {VM_NAME} (dataVolumeTemplate from that URL)")
            apply_vm(kube, url, disk_size=disk_size, userdata=user_data(keys, user))
            follow_import(kube, timeout=timeout)
        wait_running(kube, timeout=timeout)
        print("== waiting for the guest agent (it starts with the guest's sshd)")
        wait_agent(kube, timeout=timeout)
        print(f"== logging in: rootdisk ssh vm/{VM_NAME} --command"
              " 'uname -a; cloud-init status --wait'")
        text = guest_says(kubeconfig, keys, timeout=timeout)
        for line in text.splitlines():
            print(f"   | {line}")
    finally:
        kube.api.close()
    print(f"""
== done in {time.monotonic() - started:.0f} s. The cluster and the VM keep running.
   export KUBECONFIG={kubeconfig}
   rootdisk ssh vm/{VM_NAME}                       # a shell in the guest
   rootdisk ssh vm/{VM_NAME} --command 'cloud-init status'
   kubectl get vm,vmi,dv,pvc,pods          # what the demo made
   rootdisk console {VM_NAME}                     # the serial console (Ctrl+] detaches)
   rootdisk stop {VM_NAME}; rootdisk start {VM_NAME}   # through subresources.kubevirt.io
   make demo STOP=1                         # tear the cluster down""")
    return 0


def json_virtual_size(image: Path) -> int:
    import json
    done = subprocess.run(["qemu-img", "info", "--output=json", "-f", "qcow2", str(image)],
                          capture_output=True, text=True, timeout=60, check=True)
    return int(json.loads(done.stdout)["virtual-size"])


def stop(data_dir: str) -> int:
    from localcluster.cluster import is_running
    if not is_running(data_dir):
        print(f"no demo cluster runs on {data_dir}")
        return 0
    return subprocess.run([sys.executable, "-m", "rootdisk", "down", "--data-dir", data_dir],
                          check=False).returncode


def main(argv: list[str] | None = None) -> int:
    from localcluster.cluster import default_data_dir
    p = argparse.ArgumentParser(prog="python -m rootdisk.demo")
    p.add_argument("--data-dir", default=os.environ.get("ROOTDISK_DATA_DIR")
                   or default_data_dir())
    p.add_argument("--stop", action="store_true", help="tear the demo cluster down")
    p.add_argument("--timeout", type=float, default=600.0, help="bound of each wait (s)")
    args = p.parse_args(argv)
    if args.stop:
        return stop(args.data_dir)
    try:
        return run(args.data_dir, timeout=args.timeout)
    except DemoError as err:
        print(f"make demo: {err}", file=sys.stderr)
        print(f"   the cluster's log: {args.data_dir}/up.log; `make demo STOP=1` stops it",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
