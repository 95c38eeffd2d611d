"""``rootdisk port-forward`` and ``rootdisk ssh``: their arguments (virtctl's shapes, bad
ones refused naming what is wrong), and the ssh command line ``rootdisk ssh`` execs,
recorded by a stand-in ``ssh`` on PATH (the real login is tested with a cloud guest)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rootdisk import vmtarget
from rootdisk.vmtarget import PortSpec, Target, TargetError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "want"), [
    ("vm/demo", Target("vm", "demo", None)),
    ("vmi/demo/ns1", Target("vmi", "demo", "ns1")),
    ("VirtualMachine/demo/ns1", Target("vm", "demo", "ns1")),
    ("virtualmachineinstances/a.b", Target("vmi", "a.b", None)),
])
def test_targets(text: str, want: Target) -> None:
    assert vmtarget.parse_target(text) == want


@pytest.mark.parametrize(("text", "words"), [
    ("demo", "expected TYPE/NAME[/NAMESPACE]"),
    ("pod/demo", "expected TYPE/NAME[/NAMESPACE]"),
    ("vm/demo/ns/x", "expected TYPE/NAME[/NAMESPACE]"),
    ("vm/De$mo", "'De$mo' is not a valid name"),
    ("vm/demo/n;s", "'n;s' is not a valid namespace"),
    ("vm/", "'' is not a valid name"),
])
def test_bad_targets_are_named(text: str, words: str) -> None:
    with pytest.raises(TargetError) as err:
        vmtarget.parse_target(text)
    assert words in str(err.value)


@pytest.mark.parametrize(("text", "want"), [
    ("8080", PortSpec("tcp", 8080, 8080)),
    ("8080:80", PortSpec("tcp", 8080, 80)),
    ("udp/5353:53", PortSpec("udp", 5353, 53)),
    ("TCP/0:22", PortSpec("tcp", 0, 22)),
])
def test_ports(text: str, want: PortSpec) -> None:
    assert vmtarget.parse_port(text) == want


@pytest.mark.parametrize(("text", "words"), [
    ("sctp/80", "the protocol must be tcp or udp"),
    ("0", "the remote port must be a number from 1 to 65535"),
    ("80:0", "the remote port must be a number from 1 to 65535"),
    ("70000:80", "the local port must be a number from 0 to 65535"),
    ("x", "the local port must be"),
    ("8080:", "the remote port must be"),
])
def test_bad_ports_are_named(text: str, words: str) -> None:
    with pytest.raises(TargetError) as err:
        vmtarget.parse_port(text)
    assert words in str(err.value)


def test_ssh_argv_is_virtctls_shape() -> None:
    argv = vmtarget.ssh_argv(
        ssh="/usr/bin/ssh", rootdisk=["/opt/my tools/rootdisk"], target=Target("vm", "demo", None),
        namespace="ns1", port=2222, user="debian", identity="/k/id_ed25519",
        kubeconfig="/home/a b/100%.yaml", command="uname -a", extra=["-v"])
    assert argv == [
        "/usr/bin/ssh", "-o",
        "ProxyCommand='/opt/my tools/rootdisk' port-forward --stdio=true --kubeconfig "
        "'/home/a b/100%%.yaml' vm/demo/ns1 2222",
        "-v", "-i", "/k/id_ed25519", "debian@vm.demo.ns1", "--", "uname -a"]
    # what ssh's shell runs, once ssh has turned %% back into %
    proxy = argv[2].removeprefix("ProxyCommand=").replace("%%", "%")
    assert shlex.split(proxy)[:6] == ["/opt/my tools/rootdisk", "port-forward",
                                      "--stdio=true", "--kubeconfig", "/home/a b/100%.yaml",
                                      "vm/demo/ns1"]
    bare = vmtarget.ssh_argv(ssh="ssh", rootdisk=["rootdisk"], target=Target("vmi", "x", "n"),
                             namespace="n", port=22, user=None, identity=None,
                             kubeconfig=None, command=None)
    assert bare == ["ssh", "-o", "ProxyCommand=rootdisk port-forward --stdio=true vmi/x/n 22",
                    "vmi.x.n"]
    with pytest.raises(TargetError, match="not a valid user name"):
        vmtarget.ssh_argv(ssh="ssh", rootdisk=["rootdisk"], target=Target("vm", "x", "n"),
                          namespace="n", port=22, user="-oProxyCommand=evil", identity=None,
                          kubeconfig=None, command=None)


def test_default_user_is_virtctls() -> None:
    assert vmtarget.default_user({"USERNAME": "b", "LOGNAME": "c"}) == "b"
    assert vmtarget.default_user({"USER": "a", "LOGNAME": "c"}) == "a"
    assert vmtarget.default_user({}) is None


@pytest.fixture
def fake_ssh(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A stand-in ``ssh`` first on PATH that writes its argv (NUL-separated) to a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv"
    script = bin_dir / "ssh"
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > {shlex.quote(str(record))}\n")
    script.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "USER": "alice",
           "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    return record, env


def _run_ssh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootdisk", "ssh", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_rootdisk_ssh_execs_the_local_ssh(fake_ssh: tuple[Path, dict[str, str]],
                                          tmp_path: Path) -> None:
    record, env = fake_ssh
    kubeconfig = str(tmp_path / "kubeconfig")
    out = _run_ssh(env, "vm/demo/ns1", "--kubeconfig", kubeconfig, "-p", "2222",
                   "-c", "uname -a")
    assert out.returncode == 0, out.stderr
    argv = record.read_bytes().decode().split("\0")[:-1]
    assert argv == [
        str(tmp_path / "bin" / "ssh"), "-o",
        f"ProxyCommand={shlex.quote(sys.executable)} -m rootdisk port-forward --stdio=true "
        f"--kubeconfig {kubeconfig} vm/demo/ns1 2222",
        "alice@vm.demo.ns1", "--", "uname -a"]


def test_rootdisk_ssh_uses_the_vms_key_when_there_and_private(
        fake_ssh: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    record, env = fake_ssh
    key = tmp_path / "state" / "rootdisk" / "ssh" / "ns1" / "demo" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("not really a key\n")
    key.chmod(0o600)
    out = _run_ssh(env, "debian@vm/demo/ns1", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 0, out.stderr
    argv = record.read_bytes().decode().split("\0")[:-1]
    assert argv[-3:] == ["-i", str(key), "debian@vm.demo.ns1"]
    # another VM has no key there: no -i (ssh's own defaults apply)
    out = _run_ssh(env, "vm/other/ns1", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 0 and "-i" not in record.read_bytes().decode().split("\0")
    # an explicit -i wins
    out = _run_ssh(env, "vm/demo/ns1", "-i", "/my/key", "--kubeconfig",
                   str(tmp_path / "kubeconfig"))
    assert record.read_bytes().decode().split("\0")[-3:-1] == ["/my/key", "alice@vm.demo.ns1"]
    # readable by others: refused, not used and not changed
    record.unlink()
    key.chmod(0o644)
    out = _run_ssh(env, "vm/demo/ns1", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 2 and not record.exists()
    assert f"{key}: others may read it (mode 0644); run chmod 600 on it" in out.stderr
    assert key.stat().st_mode & 0o777 == 0o644


def test_rootdisk_ssh_trusts_the_vms_known_hosts_when_there_and_private(
        fake_ssh: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """The host key whoever made the VM kept beside its login key (make demo does) is the
    one ssh checks for that VM: no prompt, no entry in ~/.ssh/known_hosts."""
    record, env = fake_ssh
    known = tmp_path / "state" / "rootdisk" / "ssh" / "ns1" / "demo" / "known_hosts"
    known.parent.mkdir(parents=True)
    known.write_text("vm.demo.ns1 ssh-ed25519 AAAA\n")
    known.chmod(0o600)
    out = _run_ssh(env, "vm/demo/ns1", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 0, out.stderr
    argv = record.read_bytes().decode().split("\0")[:-1]
    assert argv[3:5] == ["-o", f"UserKnownHostsFile={known}"], argv
    # the user's own choice wins
    out = _run_ssh(env, "vm/demo/ns1", "--local-ssh-opts=-o",
                   "--local-ssh-opts=UserKnownHostsFile=/dev/null",
                   "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 0, out.stderr
    argv = record.read_bytes().decode().split("\0")[:-1]
    assert f"UserKnownHostsFile={known}" not in argv and "UserKnownHostsFile=/dev/null" in argv
    # writable or readable by others: refused, not used
    record.unlink()
    known.chmod(0o666)
    out = _run_ssh(env, "vm/demo/ns1", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert out.returncode == 2 and not record.exists()
    assert f"{known}: others may read it (mode 0666)" in out.stderr


def test_rootdisk_ssh_refuses_bad_input(fake_ssh: tuple[Path, dict[str, str]],
                                        tmp_path: Path) -> None:
    record, env = fake_ssh
    for args, words in ((["pod/x/ns"], "expected TYPE/NAME[/NAMESPACE]"),
                        (["vm/x/ns", "-p", "0"], "-p 0: must be from 1 to 65535"),
                        (["vm/x/ns", "--username=-oProxyCommand=evil"], "not a valid user name")):
        out = _run_ssh(env, *args, "--kubeconfig", str(tmp_path / "kubeconfig"))
        assert out.returncode == 2, out
        assert words in out.stderr
    assert not record.exists()


def test_port_forward_refuses_bad_input() -> None:
    for args, words in ((["vm/x"], "expected TYPE/NAME[/NAMESPACE] and at least one port"),
                        (["--stdio", "vm/x/ns", "22", "23"], "--stdio takes exactly one port"),
                        (["vm/x/ns", "sctp/22"], "the protocol must be tcp or udp")):
        out = subprocess.run([sys.executable, "-m", "rootdisk", "port-forward", *args],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert out.returncode == 2, out
        assert words in out.stderr
