"""Choose the accelerator: KVM only where it is shown to run a Linux guest, else TCG.

Why it exists: an openable /dev/kvm proves little. On these machines it is kvm_pvm, a
software nested KVM that runs a boot sector but kills a Linux kernel with "KVM internal
error" (or hangs it). So: cheap checks first (/dev/kvm not openable, ``kvm_pvm`` loaded,
no vmx/svm flag in /proc/cpuinfo → TCG at once); only then boot a tiny Linux guest
(kernel + initramfs printing :data:`PROBE_MARKER`) under KVM with a deadline, and accept
KVM only on its marker. Without a probe guest installed, KVM is not trusted. The answer
is cached in a file (keyed by the host kernel release) so a node probes once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass

from vm.domain.model import Accelerator

logger = logging.getLogger(__name__)

PROBE_MARKER = "ROOTDISK-GUEST-MARKER"
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Verdict:
    accelerator: Accelerator
    reason: str


def cheap_verdict(
    *, dev_kvm: str = "/dev/kvm", sys_module: str = "/sys/module", cpuinfo: str = "/proc/cpuinfo"
) -> Verdict | None:
    """TCG with the reason when a cheap check rules KVM out; None when worth a probe."""
    try:
        fd = os.open(dev_kvm, os.O_RDWR | os.O_CLOEXEC)
    except OSError as err:
        return Verdict("tcg", f"{dev_kvm} cannot be opened ({err.strerror})")
    os.close(fd)
    if os.path.exists(os.path.join(sys_module, "kvm_pvm")):
        return Verdict("tcg", "kvm_pvm (software nested KVM) cannot run Linux guests")
    try:
        with open(cpuinfo) as f:
            flags = set()
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
    except OSError as err:
        return Verdict("tcg", f"{cpuinfo} unreadable ({err.strerror})")
    if not flags & {"vmx", "svm"}:
        return Verdict("tcg", "the CPU shows neither vmx nor svm")
    return None


def probe_boot(
    *,
    kernel: str,
    initrd: str,
    qemu_binary: str = "qemu-system-x86_64",
    timeout: float = PROBE_TIMEOUT,
) -> Verdict:
    """Boot the probe guest under KVM; KVM only if its marker appears in time."""
    with tempfile.TemporaryDirectory(prefix="kvm-probe-") as tmp:
        log = os.path.join(tmp, "serial.log")
        argv = [
            qemu_binary,
            "-machine",
            "q35,accel=kvm",
            "-cpu",
            "host,-arch-capabilities",
            "-m",
            "256",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            kernel,
            "-initrd",
            initrd,
            "-append",
            "console=ttyS0 quiet panic=-1 rootdisk.mode=poweroff",
            "-serial",
            f"file:{log}",
        ]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Verdict("tcg", f"a Linux guest did not finish under KVM within {timeout:g} s")
        seen = b""
        if os.path.exists(log):
            with open(log, "rb") as f:
                seen = f.read()
        if PROBE_MARKER.encode() in seen:
            return Verdict("kvm", "a Linux guest ran under KVM")
        err = done.stderr.decode(errors="replace").strip().splitlines()
        return Verdict(
            "tcg",
            "a Linux guest failed under KVM: " + (err[-1] if err else f"exit {done.returncode}"),
        )


def choose(
    *,
    use_emulation: bool,
    cache_path: str | None,
    probe_kernel: str | None,
    probe_initrd: str | None,
    qemu_binary: str = "qemu-system-x86_64",
    dev_kvm: str = "/dev/kvm",
    sys_module: str = "/sys/module",
    cpuinfo: str = "/proc/cpuinfo",
) -> Verdict:
    if use_emulation:
        return Verdict("tcg", "emulation requested (useEmulation)")
    cheap = cheap_verdict(dev_kvm=dev_kvm, sys_module=sys_module, cpuinfo=cpuinfo)
    if cheap is not None:
        return cheap
    release = os.uname().release
    if cache_path:
        try:
            with open(cache_path) as f:
                cached = json.load(f)
            if cached.get("release") == release and cached.get("accelerator") in ("kvm", "tcg"):
                return Verdict(cached["accelerator"], str(cached.get("reason", "")) + " (cached)")
        except (OSError, ValueError, AttributeError):
            pass
    if not (
        probe_kernel
        and probe_initrd
        and os.path.exists(probe_kernel)
        and os.path.exists(probe_initrd)
    ):
        verdict = Verdict("tcg", "no probe guest installed to prove KVM works")
    else:
        verdict = probe_boot(kernel=probe_kernel, initrd=probe_initrd, qemu_binary=qemu_binary)
    logger.info("accelerator %s: %s", verdict.accelerator, verdict.reason)
    if cache_path:
        try:
            tmp = f"{cache_path}.{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(
                    {
                        "release": release,
                        "accelerator": verdict.accelerator,
                        "reason": verdict.reason,
                    },
                    f,
                )
            os.replace(tmp, cache_path)
        except OSError as err:
            logger.warning("cannot cache the accelerator probe at %s: %s", cache_path, err)
    return verdict
