"""Run a command as a Kubernetes pod would run the launcher: bubblewrap (own mount and PID
namespaces, private /tmp and /dev), then uid/gid 107 via setpriv with every capability
dropped and no_new_privs set (environment recipe: bwrap as root, switch inside).

The pod's emptyDirs are host directories owned by 107, bound at the pod's paths; a
passwd/group with uid 107 is bound over /etc's (libvirtd looks its user up).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
UID = 107


def available() -> bool:
    return os.geteuid() == 0 and bool(shutil.which("bwrap")) and bool(shutil.which("setpriv"))


def _python_paths() -> list[str]:
    paths = {
        os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix),
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
    }
    return sorted(p for p in paths if p not in ("/", "/usr") and not p.startswith(str(REPO)))


def _parents(path: str) -> list[str]:
    out, cur = [], os.path.dirname(path)
    while cur not in ("/", ""):
        out.append(cur)
        cur = os.path.dirname(cur)
    return list(reversed(out))


@dataclass
class Pod:
    """A pod's host-side directories (made in ``base``) and how to run in it."""

    base: Path
    binds: dict[str, str] = field(default_factory=dict)  # host -> sandbox path
    dev_binds: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        etc = self.base / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "passwd").write_text(
            "root:x:0:0:root:/root:/bin/sh\nqemu:x:107:107:qemu:/var/run/kubevirt-private:/bin/sh\n"
        )
        (etc / "group").write_text("root:x:0:\nqemu:x:107:\n")

    def empty_dir(self, name: str, path: str) -> Path:
        host = self.base / name
        host.mkdir(parents=True, exist_ok=True)
        os.chown(host, UID, UID)
        self.binds[str(host)] = path
        return host

    def file(self, name: str, path: str) -> Path:
        host = self.base / name
        host.touch()
        os.chown(host, UID, UID)
        self.binds[str(host)] = path
        return host

    def argv(self, inner: Sequence[str], *, env: dict[str, str]) -> list[str]:
        argv = [
            "bwrap",
            "--ro-bind",
            "/usr",
            "/usr",
            "--ro-bind",
            "/etc",
            "/etc",
            "--ro-bind",
            str(self.base / "etc" / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(self.base / "etc" / "group"),
            "/etc/group",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--ro-bind",
            "/sys",
            "/sys",
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--clearenv",
        ]
        made: set[str] = {"/usr", "/etc", "/dev", "/proc", "/sys", "/tmp"}
        targets = [str(REPO), *_python_paths(), *self.binds.values(), *self.dev_binds.values()]
        for target in targets:
            for parent in _parents(target):
                if parent not in made:
                    argv += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
        for path in [str(REPO), *_python_paths()]:
            argv += ["--ro-bind", path, path]
        for host, path in self.binds.items():
            argv += ["--bind", host, path]
        for host, path in self.dev_binds.items():
            argv += ["--dev-bind", host, path]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += [
            "--chdir",
            str(REPO),
            "--",
            "setpriv",
            f"--reuid={UID}",
            f"--regid={UID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *inner,
        ]
        return argv
