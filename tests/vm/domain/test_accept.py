"""Every rendered combination is accepted by the real programs: libvirt's ``defineXML``
on a session daemon run as uid 107 in the pod sandbox (not the test:/// driver), and QEMU
starting the argv up to its first QMP greeting (devices created, paused with ``-S``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vm.domain.cases import CASES, options
from tests.vm.domain.libvirt_session import session_libvirtd
from tests.vm.launcher import sandbox
from vm.domain import render_libvirt, render_qemu
from vm.domain.builder import build
from vm.domain.model import Domain

libvirt = pytest.importorskip("libvirt")


@pytest.fixture(scope="module")
def session_uri() -> Iterator[str]:
    if not (sandbox.available() and shutil.which("libvirtd")):
        pytest.skip("needs root, bwrap, setpriv and libvirtd")
    with session_libvirtd() as uri:
        yield uri


@pytest.mark.parametrize("case", sorted(CASES))
def test_libvirt_defines_every_combination(session_uri: str, case: str) -> None:
    vmi, opts = CASES[case]
    domain = build(vmi=vmi, options=options(**opts))
    conn = libvirt.open(session_uri)
    try:
        dom = conn.defineXML(render_libvirt.to_xml(domain))
        try:
            back = ET.fromstring(dom.XMLDesc(0))  # noqa: S314 - our own render
            # what libvirt kept is what we meant: aliases, boot order, cache, sources
            assert back.findtext("name") == "ns1_vm1"
            kept = {
                d.find("alias").get("name"): (
                    d.find("driver").get("cache"),
                    (d.find("boot").get("order") if d.find("boot") is not None else None),
                )
                for d in back.iter("disk")
            }
            assert kept == {
                disk.alias: (disk.cache, str(disk.boot_order) if disk.boot_order else None)
                for disk in domain.disks
            }
        finally:
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    finally:
        conn.close()


def test_libvirt_refuses_a_broken_domain(session_uri: str) -> None:
    from vm.launcher.errors import is_bad_definition

    conn = libvirt.open(session_uri)
    try:
        with pytest.raises(libvirt.libvirtError) as err:
            conn.defineXML("<domain type='qemu'><name>x</name><memory>notanumber</memory></domain>")
        assert is_bad_definition(err.value)
    finally:
        conn.close()


@contextlib.contextmanager
def _loop_device(size: int = 8 * 1024 * 1024) -> Iterator[str]:
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="blk-") as backing:
        backing.truncate(size)
        backing.flush()
        try:
            dev = subprocess.run(
                ["losetup", "--find", "--show", backing.name],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as err:
            pytest.skip(f"no loop device: {err}")
        try:
            yield dev
        finally:
            subprocess.run(["losetup", "-d", dev], check=False, timeout=30)


def _qemu_greets(domain: Domain, base: Path) -> None:
    qmp, serial = base / "qmp.sock", base / "virt-serial0"
    listeners = []
    for path in (qmp, serial):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.listen(1)
        s.settimeout(60)
        listeners.append(s)
    argv = [*render_qemu.render(domain, qmp_socket=str(qmp)), "-S"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        conn, _ = listeners[0].accept()
        with conn:
            conn.settimeout(60)
            greeting = conn.recv(4096)
        err = b"" if proc.poll() is None else proc.stderr.read()  # type: ignore[union-attr]
        assert b'"QMP"' in greeting, err
        assert proc.poll() is None, err
    finally:
        proc.kill()
        proc.wait(30)
        proc.stderr.close()  # type: ignore[union-attr]
        for s in listeners:
            s.close()


@pytest.mark.parametrize("case", sorted(CASES))
def test_qemu_starts_every_combination(case: str) -> None:
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 not installed")
    vmi, opts = CASES[case]
    base = Path(tempfile.mkdtemp(prefix="qa-", dir="/tmp"))
    try:
        with contextlib.ExitStack() as stack:
            dev_dir = base / "dev"
            dev_dir.mkdir()
            for name in opts.get("block_volumes", ()):
                os.symlink(stack.enter_context(_loop_device()), dev_dir / name)
            for disk in vmi["spec"]["domain"]["devices"]["disks"]:
                if disk["name"] not in opts.get("block_volumes", ()):
                    d = base / "vmi-disks" / disk["name"]
                    d.mkdir(parents=True)
                    with open(d / "disk.img", "wb") as f:
                        f.truncate(1024 * 1024)
            domain = build(
                vmi=vmi, options=options(private_dir=str(base), dev_dir=str(dev_dir), **opts)
            )
            fw = domain.firmware
            if fw.nvram and fw.nvram_template:
                os.makedirs(os.path.dirname(fw.nvram))
                shutil.copyfile(fw.nvram_template, fw.nvram)
            _qemu_greets(domain, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_qemu_argv_is_json_clean() -> None:
    vmi, opts = CASES["full"]
    argv = render_qemu.render(build(vmi=vmi, options=options(**opts)), qmp_socket="/q")
    assert json.loads(json.dumps(argv)) == argv and all(isinstance(a, str) for a in argv)
