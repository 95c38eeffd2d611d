"""The accelerator choice: cheap checks, the real probe on this host, and its cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.fixtures.guests import LinuxGuest
from vm.launcher import accel


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """A fake /dev/kvm (a readable file), /sys/module and /proc/cpuinfo that pass."""
    (tmp_path / "kvm").write_bytes(b"")
    (tmp_path / "module").mkdir()
    (tmp_path / "cpuinfo").write_text("processor : 0\nflags : fpu vmx sse2\n")
    return {
        "dev_kvm": str(tmp_path / "kvm"),
        "sys_module": str(tmp_path / "module"),
        "cpuinfo": str(tmp_path / "cpuinfo"),
    }


def test_cheap_checks(host: dict[str, str], tmp_path: Path) -> None:
    assert accel.cheap_verdict(**host) is None
    assert accel.cheap_verdict(**{**host, "dev_kvm": str(tmp_path / "none")}).reason.startswith(
        str(tmp_path / "none") + " cannot be opened"
    )
    (tmp_path / "module" / "kvm_pvm").mkdir()
    assert "kvm_pvm" in accel.cheap_verdict(**host).reason  # type: ignore[union-attr]
    os.rmdir(tmp_path / "module" / "kvm_pvm")
    (tmp_path / "cpuinfo").write_text("flags : fpu sse2\n")
    assert accel.cheap_verdict(**host).reason == "the CPU shows neither vmx nor svm"  # type: ignore[union-attr]


def test_emulation_requested_wins(host: dict[str, str]) -> None:
    got = accel.choose(
        use_emulation=True, cache_path=None, probe_kernel=None, probe_initrd=None, **host
    )
    assert got == accel.Verdict("tcg", "emulation requested (useEmulation)")


def test_no_probe_guest_means_no_kvm_and_the_answer_is_cached(
    host: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "accel.json"
    got = accel.choose(
        use_emulation=False, cache_path=str(cache), probe_kernel=None, probe_initrd=None, **host
    )
    assert got.accelerator == "tcg" and "no probe guest" in got.reason
    stored = json.loads(cache.read_text())
    assert stored["accelerator"] == "tcg" and stored["release"] == os.uname().release
    cache.write_text(json.dumps({**stored, "accelerator": "kvm", "reason": "seen"}))
    again = accel.choose(
        use_emulation=False, cache_path=str(cache), probe_kernel=None, probe_initrd=None, **host
    )
    assert again == accel.Verdict("kvm", "seen (cached)")


def test_this_hosts_kvm_is_refused() -> None:
    got = accel.choose(use_emulation=False, cache_path=None, probe_kernel=None, probe_initrd=None)
    if os.path.exists("/sys/module/kvm_pvm") or not os.path.exists("/dev/kvm"):
        assert got.accelerator == "tcg"


@pytest.mark.slow
def test_the_boot_probe_tells_a_working_kvm_from_kvm_pvm(linux_guest: LinuxGuest) -> None:
    """On these hosts /dev/kvm opens and runs a boot sector, but the Linux probe fails;
    where KVM works the marker appears. Either way the verdict matches what the guest did."""
    if not (os.path.exists("/dev/kvm") and shutil.which("qemu-system-x86_64")):
        pytest.skip("no /dev/kvm")
    got = accel.probe_boot(
        kernel=str(linux_guest.kernel), initrd=str(linux_guest.initrd), timeout=10
    )
    if os.path.exists("/sys/module/kvm_pvm"):
        assert got.accelerator == "tcg", got
    assert got.reason  # says what happened


@pytest.mark.slow
def test_the_boot_probe_accepts_a_guest_that_prints_the_marker(
    linux_guest: LinuxGuest, tmp_path: Path
) -> None:
    """The probe's own logic with TCG standing in for a working KVM: a QEMU wrapper that
    swaps accel=kvm for tcg (and drops -cpu host) must be accepted."""
    wrapper = tmp_path / "qemu"
    wrapper.write_text(
        '#!/bin/sh\nargs=\nfor a in "$@"; do case "$a" in '
        'q35,accel=kvm) set -- "$@" q35,accel=tcg;; host,-arch-capabilities) '
        'set -- "$@" qemu64;; *) set -- "$@" "$a";; esac; shift; done\n'
        'exec qemu-system-x86_64 "$@"\n'
    )
    wrapper.chmod(0o755)
    got = accel.probe_boot(
        kernel=str(linux_guest.kernel),
        initrd=str(linux_guest.initrd),
        qemu_binary=str(wrapper),
        timeout=120,
    )
    assert got == accel.Verdict("kvm", "a Linux guest ran under KVM")
