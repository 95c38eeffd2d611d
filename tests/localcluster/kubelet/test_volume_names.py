"""The kubelet never makes a path of a volume name that is not one plain path component.

The API server refuses such names; this is the kubelet's own guard, for a pod that got
in another way. A Block claim's volume becomes a device node at ``devices/<name>`` (the
old node unlinked first, then made and chowned, as root), an emptyDir a 0777 directory
at ``volumes/<name>``: with ``../../x`` or an absolute name either would land outside
the pod's directory. Nothing may be created, replaced or removed there."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from localcluster.kubelet import podvolumes
from localcluster.kubelet.env import ConfigError


def _context(pod_dir: Path) -> podvolumes.PodContext:
    def no_token(**_: object) -> str:
        raise LookupError("no tokens here")

    return podvolumes.PodContext(
        pod_dir=str(pod_dir), pod_ip="127.1.0.2", host_ip="127.0.0.1", configmaps={},
        secrets={}, token=no_token, ca_pem="CA", node_cpu_millis=1000, node_memory=1 << 30,
        # the user's own Block claim, bound; /dev/null stands in for its loop device
        claims={"mine": {"metadata": {"name": "mine", "namespace": "ns", "uid": "c-1"},
                         "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}},
        volumes={"pv-1": {"spec": {"volumeMode": "Block", "local": {"path": "/dev/null"},
                                   "claimRef": {"namespace": "ns", "name": "mine",
                                                "uid": "c-1"}}}})


def _pod(volume: dict) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "automountServiceAccountToken": False, "securityContext": {"fsGroup": 107},
        "containers": [{"name": "c", "image": "i"}], "volumes": [volume]}}


def _tree(root: Path, skip: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every path under ``root`` but ``skip``, with its type, owner, mode and content."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            continue
        for name in dirs + files:
            path = Path(dirpath) / name
            st = os.lstat(path)
            data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out[str(path)] = (stat.S_IFMT(st.st_mode), st.st_gid, stat.S_IMODE(st.st_mode), data)
    return out


BAD = ["../../victim", "../victim", "..", ".", "", "a/../../../victim", "devices/../../victim",
       "x\0y"]
SOURCES = {
    "block claim": {"persistentVolumeClaim": {"claimName": "mine"}},
    "emptyDir": {"emptyDir": {}},
    "configMap": {"configMap": {"name": "cm", "optional": True}},
}


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("name", [*BAD, "ABSOLUTE"])
def test_a_name_that_is_not_one_component_is_refused_and_nothing_moves(
        tmp_path: Path, name: str, source: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    victim.chmod(0o644)
    pod_dir = tmp_path / "pods" / "uid-1"
    pod_dir.mkdir(parents=True)
    if name == "ABSOLUTE":  # as "/etc/ld.so.preload" would be, inside the test's own dir
        name = str(victim)
    before = _tree(tmp_path, pod_dir)
    refused: ConfigError | None = None
    try:
        podvolumes.prepare(_pod({"name": name, **SOURCES[source]}), _context(pod_dir))
    except ConfigError as err:
        refused = err
    finally:  # first of all: the host file is untouched, and nothing new is there
        assert _tree(tmp_path, pod_dir) == before
    assert refused is not None
    assert re.match(r"spec\.volumes\[0\]\.name: .* is not a valid volume name", str(refused))
    assert not (pod_dir / "devices").exists()  # refused before anything was made


@pytest.mark.parametrize("name", [None, 7, ["a"]])
def test_a_name_that_is_not_a_string_is_refused(tmp_path: Path, name: object) -> None:
    with pytest.raises(ConfigError, match="not a valid volume name"):
        podvolumes.prepare(_pod({"name": name, "emptyDir": {}}), _context(tmp_path))


def test_duplicate_names_and_the_kubelets_own_volume_are_refused(tmp_path: Path) -> None:
    pod = _pod({"name": "scratch", "emptyDir": {}})
    pod["spec"]["volumes"].append({"name": "scratch", "persistentVolumeClaim": {
        "claimName": "mine"}})
    with pytest.raises(ConfigError, match="duplicate volume name 'scratch'"):
        podvolumes.prepare(pod, _context(tmp_path))
    pod = _pod({"name": podvolumes.SA_VOLUME, "emptyDir": {}})
    del pod["spec"]["automountServiceAccountToken"]
    with pytest.raises(ConfigError, match="service-account volume"):
        podvolumes.prepare(pod, _context(tmp_path))
    assert not (tmp_path / "volumes" / "scratch").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod and chown need root")
def test_plain_names_still_become_volumes_inside_the_pod_dir(tmp_path: Path) -> None:
    pod = _pod({"name": "root-disk", "persistentVolumeClaim": {"claimName": "mine"}})
    pod["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    got = podvolumes.prepare(pod, _context(tmp_path))
    assert got["root-disk"].host == str(tmp_path / "devices" / "root-disk")
    st = os.stat(got["root-disk"].host)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.stat("/dev/null").st_rdev
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (107, 0o660)
    assert got["scratch"].host == str(tmp_path / "volumes" / "scratch")
