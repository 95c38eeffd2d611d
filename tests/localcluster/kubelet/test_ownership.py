"""fsGroup ownership of volumes and the per-pod device nodes, on real files."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from localcluster.kubelet import ownership

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown and mknod need root")


@pytest.mark.parametrize(("mode", "is_dir", "read_only", "want"), [
    (0o644, False, False, 0o664),
    (0o600, False, True, 0o640),
    (0o755, True, False, 0o2775),
    (0o700, True, True, 0o2750),
    (0o4755, False, False, 0o4775),
])
def test_wanted_mode(mode: int, is_dir: bool, read_only: bool, want: int) -> None:
    assert ownership.wanted_mode(mode, is_dir=is_dir, read_only=read_only) == want


def make_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "f").write_text("x")
    os.chmod(root / "f", 0o600)
    (root / "sub" / "g").write_text("y")


@needs_root
def test_apply_fs_group_walks_the_volume(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    make_tree(vol)
    assert ownership.apply_fs_group(str(vol), gid=2000) is True
    for path in (vol, vol / "sub"):
        st = path.stat()
        assert st.st_gid == 2000 and stat.S_IMODE(st.st_mode) & 0o2070 == 0o2070
    assert (vol / "f").stat().st_gid == 2000
    assert stat.S_IMODE((vol / "f").stat().st_mode) == 0o660
    assert (vol / "sub" / "g").stat().st_gid == 2000


@needs_root
def test_apply_fs_group_never_follows_a_symlink_out_of_the_volume(tmp_path: Path) -> None:
    outside = tmp_path / "host-file"
    outside.write_text("host")
    os.chmod(outside, 0o600)
    vol = tmp_path / "vol"
    make_tree(vol)
    (vol / "link").symlink_to(outside)
    (vol / "dirlink").symlink_to(tmp_path)
    ownership.apply_fs_group(str(vol), gid=2000)
    st = outside.stat()
    assert st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    assert tmp_path.stat().st_gid == 0
    assert os.lstat(vol / "link").st_gid == 2000  # the link itself is the volume's


@needs_root
def test_on_root_mismatch_skips_a_volume_that_already_matches(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    make_tree(vol)
    assert ownership.apply_fs_group(str(vol), gid=2000, policy=ownership.ON_ROOT_MISMATCH)
    os.chown(vol / "f", 0, 0)  # changed after: the root still matches, so it stays
    assert not ownership.apply_fs_group(str(vol), gid=2000, policy=ownership.ON_ROOT_MISMATCH)
    assert (vol / "f").stat().st_gid == 0
    assert ownership.apply_fs_group(str(vol), gid=2000, policy=ownership.ALWAYS)
    assert (vol / "f").stat().st_gid == 2000
    # Another group is a mismatch: walked again.
    assert ownership.apply_fs_group(str(vol), gid=3000, policy=ownership.ON_ROOT_MISMATCH)
    assert (vol / "f").stat().st_gid == 3000


@needs_root
def test_device_node_copies_the_device_with_the_pods_group(tmp_path: Path) -> None:
    img = tmp_path / "blk.img"
    img.write_bytes(b"\0" * 1024 * 1024)
    dev = subprocess.check_output(["losetup", "--find", "--show", str(img)], text=True).strip()
    try:
        host_before = os.stat(dev)
        node = ownership.device_node(str(tmp_path / "devices" / "d"), dev, gid=107)
        st = os.stat(node)
        assert stat.S_ISBLK(st.st_mode) and st.st_rdev == host_before.st_rdev
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 107, 0o660)
        again = ownership.device_node(node, dev, gid=None)  # replaced, host's owner and mode
        st = os.stat(again)
        assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (
            host_before.st_gid, stat.S_IMODE(host_before.st_mode))
        after = os.stat(dev)  # the host's node is never changed
        assert (after.st_uid, after.st_gid, after.st_mode) == (
            host_before.st_uid, host_before.st_gid, host_before.st_mode)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    with pytest.raises(OSError, match="is not a device"):
        ownership.device_node(str(tmp_path / "devices" / "x"), str(img), gid=None)


def test_sub_path_stays_inside_the_volume(tmp_path: Path) -> None:
    from localcluster.kubelet.env import ConfigError
    from localcluster.kubelet.podvolumes import sub_path

    vol = tmp_path / "vol"
    vol.mkdir()
    assert sub_path(str(vol), "a/b") == str(vol / "a" / "b") and (vol / "a" / "b").is_dir()
    (vol / "evil").symlink_to("/")
    (vol / "inner").symlink_to("a")
    assert sub_path(str(vol), "inner/b") == str(vol / "a" / "b")  # a symlink inside is fine
    for bad in ("evil", "evil/etc", "evil/rootdisk-subpath-escape", "../x", "/etc",
                "a/../../x"):
        with pytest.raises(ConfigError, match="subPath"):
            sub_path(str(vol), bad)
    assert not (tmp_path / "x").exists()
    assert not os.path.exists("/rootdisk-subpath-escape")  # nothing made on the host
