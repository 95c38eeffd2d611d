"""libvirtd needs a passwd entry for the launcher's uid; a pod here shares the host's /etc,
so the libvirt driver supplies one through nss_wrapper when the system has none."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from vm.launcher.errors import DriverError
from vm.launcher.libvirt_driver import NSS_WRAPPER, user_record_env


def _unused_uid() -> int:
    for uid in range(40107, 41000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no unused uid")


def test_a_known_user_needs_nothing(tmp_path: Path) -> None:
    assert user_record_env(root=str(tmp_path), uid=0, gid=0) == {}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not any(os.path.exists(p) for p in NSS_WRAPPER),
                    reason="libnss-wrapper is not installed (make setup installs it)")
def test_an_unknown_uid_gets_an_entry_that_getpwuid_sees(tmp_path: Path) -> None:
    uid = _unused_uid()
    env = user_record_env(root=str(tmp_path), uid=uid, gid=uid)
    assert set(env) == {"LD_PRELOAD", "NSS_WRAPPER_PASSWD", "NSS_WRAPPER_GROUP"}
    # what libvirtd does: look the uid up through NSS, here with getent
    out = subprocess.run(["getent", "passwd", str(uid)], env={"PATH": "/usr/bin:/bin", **env},
                         capture_output=True, text=True, check=False, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith(f"qemu:x:{uid}:{uid}:"), out
    bare = subprocess.run(["getent", "passwd", str(uid)], capture_output=True, text=True,
                          check=False, timeout=30)
    assert bare.returncode != 0


def test_no_nss_wrapper_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match=r"no passwd entry.*nss_wrapper"):
        user_record_env(root=str(tmp_path), uid=_unused_uid(), gid=107,
                        libraries=(str(tmp_path / "missing.so"),))
