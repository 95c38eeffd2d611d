"""``make demo``: what users come for, on this machine, end to end.

1. start the embedded cluster (``rootdisk up``, left running in the background);
2. build a small guest image (a qcow2 whose boot sector greets on the serial port) and
   serve it over loopback HTTP;
3. apply a VirtualMachine whose root disk is a dataVolumeTemplate importing that image;
4. show the import's progress, wait for the VM to run, print the guest's console;
5. leave the cluster up and print the kubeconfig and what to try next.

``make demo STOP=1`` (``--stop``) tears the cluster down. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
GREETING = "Hello from rootdisk: this guest booted from an imported DataVolume"
VM_NAME = "demo"
NAMESPACE = "default"


class DemoError(Exception):
    """A step did not complete; the message says which and what was seen."""


def boot_sector(text: str) -> bytes:
    """A 512-byte MBR that writes ``text`` + CRLF to COM1 (port 0x3f8), then halts."""
    msg = text.encode("ascii") + b"\r\n\x00"
    code = bytearray(b"\xfa\x31\xc0\x8e\xd8")          # cli; xor ax,ax; mov ds,ax
    si_at = len(code) + 1
    code += b"\xbe\x00\x00\xba\xf8\x03"                 # mov si,msg; mov dx,0x3f8
    loop = len(code)
    code += b"\xac\x84\xc0\x74\x03\xee"                 # lodsb; test al,al; jz +3; out dx,al
    code += bytes([0xEB, (loop - (len(code) + 2)) & 0xFF])  # jmp loop
    code += b"\xf4\xeb\xfd"                             # hlt; jmp hlt
    struct.pack_into("<H", code, si_at, 0x7C00 + len(code))
    code += msg
    if len(code) > 510:
        raise ValueError("greeting too long for a boot sector")
    return bytes(code).ljust(510, b"\x00") + b"\x55\xaa"


def build_guest(workdir: Path) -> Path:
    raw = workdir / "guest.raw"
    with raw.open("wb") as f:
        f.write(boot_sector(GREETING))
        f.truncate(64 * MiB)
    qcow2 = workdir / "www" / "guest.qcow2"
    qcow2.parent.mkdir(exist_ok=True)
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw),
                    str(qcow2)], check=True)
    return qcow2


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


def vm_manifest(url: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": VM_NAME, "namespace": NAMESPACE},
        "spec": {
            "runStrategy": "Always",
            "dataVolumeTemplates": [{
                "metadata": {"name": f"{VM_NAME}-rootdisk"},
                "spec": {"source": {"http": {"url": url}},
                         "storage": {"resources": {"requests": {"storage": "128Mi"}}}}}],
            "template": {"spec": {
                "terminationGracePeriodSeconds": 10,
                "domain": {"cpu": {"cores": 1},
                           "resources": {"requests": {"memory": "64Mi"}},
                           "devices": {"disks": [{"name": "rootdisk", "bootOrder": 1,
                                                  "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "rootdisk",
                             "dataVolume": {"name": f"{VM_NAME}-rootdisk"}}]}},
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
              " this checkout's: restarting it (its objects and volumes stay)")
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

    from vm.kube import Kube, KubeError, load_config

    if not os.path.exists(kubeconfig):
        return False
    try:
        kube = Kube(load_config(kubeconfig))
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
    from rootdisk import podhealth
    from vm.kube import PODS
    found = [item for ns in namespaces for item in podhealth.stuck(kube.list(PODS, ns))]
    if found:
        raise DemoError("these pods will not come up:\n"
                        + "\n".join(podhealth.describe(kube, item) for item in found))


def components_ready(kube: Any) -> bool:
    from vm.kube import PODS, Res
    no_stuck_pods(kube, ("kubevirt", "rootdisk"))
    ready = set()
    for ns in ("kubevirt", "rootdisk"):
        for pod in kube.list(PODS, ns):
            conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get(
                "conditions") or []}
            if conds.get("Ready") == "True":
                labels = pod["metadata"].get("labels") or {}
                ready.add(labels.get("kubevirt.io") or labels.get("app.kubernetes.io/name"))
    svc = kube.get(Res("apiregistration.k8s.io", "v1", "apiservices", namespaced=False),
                   "v1.subresources.kubevirt.io") or {}
    available = any(c.get("type") == "Available" and c.get("status") == "True"
                    for c in (svc.get("status") or {}).get("conditions") or [])
    return available and {"virt-api", "virt-controller", "virt-handler",
                          "rootdisk-cdi-operator"} <= ready


def apply_vm(kube: Any, url: str) -> None:
    from vm.kube import DVS, VMIS, VMS, KubeError
    if kube.get(VMS, VM_NAME, NAMESPACE) is not None:
        print(f"== replacing the VirtualMachine {VM_NAME} of an earlier demo")
        kube.delete(VMS, VM_NAME, NAMESPACE)
        wait("the old VM, VMI and DataVolume to go", lambda: all(
            kube.get(res, name, NAMESPACE) is None for res, name in (
                (VMS, VM_NAME), (VMIS, VM_NAME), (DVS, f"{VM_NAME}-rootdisk"))),
             timeout=120)
    for attempt in range(30):  # the webhook may take a moment after the APIService
        try:
            kube.create(VMS, vm_manifest(url), NAMESPACE)
            return
        except KubeError as err:
            if err.status not in (500, 503) or attempt == 29:
                raise DemoError(f"creating the VirtualMachine: {err.message}") from None
            time.sleep(2)


def follow_import(kube: Any, *, timeout: float) -> None:
    from vm.kube import DVS
    name = f"{VM_NAME}-rootdisk"
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status = (kube.get(DVS, name, NAMESPACE) or {}).get("status") or {}
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
    from vm.kube import VMS
    seen = None

    def running() -> bool:
        nonlocal seen
        status = ((kube.get(VMS, VM_NAME, NAMESPACE) or {}).get("status") or {})
        if status.get("printableStatus") != seen:
            seen = status.get("printableStatus")
            print(f"   VirtualMachine {VM_NAME}: {seen}")
        return seen == "Running"
    wait("the VM to run", running, timeout=timeout, every=0.5)


def console_log(kubeconfig: str) -> str:
    done = subprocess.run([sys.executable, "-m", "rootdisk", "console", VM_NAME, "-n",
                           NAMESPACE, "--log", "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.stdout


def run(data_dir: str, *, timeout: float) -> int:
    from vm.kube import Kube, load_config

    kubeconfig = start_cluster(data_dir, timeout=timeout)
    kube = Kube(load_config(kubeconfig))
    try:
        print("== waiting for the operators (CDI, virt-controller, virt-api, virt-handler)")
        wait("the operators", lambda: components_ready(kube), timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="rootdisk-demo-") as tmp:
            image = build_guest(Path(tmp))
            print(f"== a guest image: {image.name}, {image.stat().st_size / 1024:.0f} KiB "
                  "qcow2 (64 MiB virtual), its boot sector greets on the serial port")
            with serve(image.parent) as base:
                url = f"{base}/{image.name}"
                print(f"== serving it at {url}")
                print(f"== applying VirtualMachine {VM_NAME} (dataVolumeTemplate from {url})")
                apply_vm(kube, url)
                follow_import(kube, timeout=timeout)
        wait_running(kube, timeout=timeout)
        print("== the guest's serial console (rootdisk console demo --log):")
        text = wait("the guest's greeting", lambda: (t := console_log(kubeconfig))
                    and GREETING in t and t, timeout=120)
        for line in text.splitlines():
            print(f"   | {line}")
    finally:
        kube.api.close()
    print(f"""
== done. The cluster keeps running.
   export KUBECONFIG={kubeconfig}
   kubectl get vm,vmi,dv,pvc,pods          # what the demo made
   rootdisk console {VM_NAME}                     # attach (Ctrl+] detaches)
   rootdisk stop {VM_NAME}; rootdisk start {VM_NAME}   # through subresources.kubevirt.io
   rootdisk restart {VM_NAME}
   make demo STOP=1                         # tear the cluster down""")
    return 0


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
