"""Build (once) and find the Debian cloud guest's qcow2 in the guest cache.

The cache entry is ``<cache>/debian12-cloud-<key>/`` holding ``disk.qcow2`` and
``manifest.json`` (the key, the kernel and every package's version). It appears whole or
not at all: the build runs in ``<cache>/.build-<pid>-*`` and the finished directory is
renamed into place; a lock per key makes concurrent callers build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rootdisk.cloudguest import recipe
from rootdisk.cloudguest.aptstate import AptState, AptStateError
from rootdisk.cloudguest.bootdisk import (
    DiskBuildError,
    ext4_partition,
    fat_boot_partition,
    partition,
    run,
)

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
IMAGE = "disk.qcow2"
MANIFEST = "manifest.json"
BUILD_TIMEOUT = 900.0  # mmdebstrap, bounded
LOCK_WAIT = 1200.0  # another process building the same image
MMDEBSTRAP_HINT = "install mmdebstrap (make setup)"


class CloudGuestError(DiskBuildError):
    """The cloud guest could not be built; the message says which step and why."""


def cache_dir() -> Path:
    """``$ROOTDISK_GUEST_CACHE``, default ``<repo>/.state/guests`` (shared with the tests'
    small guests)."""
    return Path(os.environ.get("ROOTDISK_GUEST_CACHE", REPO / ".state" / "guests"))


@contextlib.contextmanager
def locked(path: Path, wait: float) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing), waited for ``wait`` seconds at most:
    one builder at a time across processes (pytest-xdist workers, parallel sessions)."""
    deadline = time.monotonic() + wait
    with open(path, "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CloudGuestError(
                        f"{path} is still locked by another build after {wait:.0f}s"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sweep_dead_builds(root: Path) -> None:
    """Remove ``.build-<pid>-*`` directories whose builder process is gone."""
    for tmp in root.glob(".build-*"):
        try:
            pid = int(tmp.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or Path(f"/proc/{pid}").exists():
            continue
        log.info("removing %s, left by an interrupted build", tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def build_cloud_guest(cache_root: Path | None = None, *, refresh: bool = False) -> Path:
    """The Debian 12 cloud guest's qcow2 (see :mod:`rootdisk.cloudguest`), built on the
    first call for the current package versions and then found in the cache.

    ``refresh`` fetches Debian's package lists first (newer packages, new key)."""
    root = cache_root or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    apt = AptState(root / f"apt-{recipe.SUITE}")
    with locked(root / f".apt-{recipe.SUITE}.lock", LOCK_WAIT):
        apt.ensure_lists(refresh=refresh)
        versions = apt.resolve()
    key = recipe.cache_key(versions)
    try:
        return _cached_or_built(root, apt, key, versions)
    except _FetchFailed:
        # The mirror dropped a version the lists named: fetch the lists and try once more.
        with locked(root / f".apt-{recipe.SUITE}.lock", LOCK_WAIT):
            apt.update()
            versions = apt.resolve()
        key = recipe.cache_key(versions)
        try:
            return _cached_or_built(root, apt, key, versions)
        except _FetchFailed as err:
            raise CloudGuestError(str(err)) from None


class _FetchFailed(CloudGuestError):
    pass


def entry_dir(root: Path, key: str) -> Path:
    return root / f"debian12-cloud-{key[:20]}"


def _cached_or_built(root: Path, apt: AptState, key: str, versions: dict[str, str]) -> Path:
    final = entry_dir(root, key)
    if (final / IMAGE).exists():
        return final / IMAGE
    with locked(root / f".{final.name}.lock", LOCK_WAIT):
        if (final / IMAGE).exists():  # built meanwhile by another process
            return final / IMAGE
        _sweep_dead_builds(root)
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f".build-{os.getpid()}-", dir=root))
        try:
            out = _build(work, root, apt, key, versions)
            os.replace(out, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("built %s in %.0fs", final / IMAGE, time.monotonic() - started)
    return final / IMAGE


def _mmdebstrap(work: Path, tree: Path, apt: AptState, debs: Path) -> None:
    if os.geteuid() != 0:
        raise CloudGuestError("building the cloud guest needs root (mmdebstrap --mode=root)")
    argv = [
        "mmdebstrap",
        "--mode=root",
        "--variant=apt",
        "--format=directory",
        "--skip=update,essential/unlink",
        f"--include={','.join(recipe.PACKAGES)}",
        '--aptopt=Acquire::Languages "none"',
        *(f"--dpkgopt={opt}" for opt in recipe.DPKG_OPTIONS),
        # The lists resolved for the cache key, and the .debs of earlier builds.
        '--setup-hook=mkdir -p "$1/var/lib/apt/lists/partial" "$1/var/cache/apt/archives/partial"'
        ' && cp -a "$ROOTDISK_APT_LISTS"/*_Packages* "$ROOTDISK_APT_LISTS"/*_InRelease'
        ' "$1/var/lib/apt/lists/" && cp -a "$ROOTDISK_DEBS"/. "$1/var/cache/apt/archives/"',
        # initramfs-tools' configuration, before the kernel's package builds the initramfs
        '--essential-hook=cp -a "$ROOTDISK_PRESEED"/. "$1"/',
        '--customize-hook=cp -n "$1"/var/cache/apt/archives/*.deb "$ROOTDISK_DEBS"/',
        recipe.SUITE,
        str(tree),
        str(apt.sources),
    ]
    preseed = work / "preseed"
    for rel, text in recipe.initramfs_files().items():
        path = preseed / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if "/hooks/" in rel else 0o644)
    env = {
        **os.environ,
        "ROOTDISK_PRESEED": str(preseed),
        "ROOTDISK_APT_LISTS": str(apt.lists),
        "ROOTDISK_DEBS": str(debs),
        "TMPDIR": str(work),
    }
    logfile = work / "mmdebstrap.log"
    try:
        run([*argv, f"--logfile={logfile}"], env=env, timeout=BUILD_TIMEOUT, hint=MMDEBSTRAP_HINT)
    except DiskBuildError as err:
        text = logfile.read_text(errors="replace") if logfile.exists() else ""
        tail = text[-2000:]
        if "Failed to fetch" in text or "404" in text:
            raise _FetchFailed(f"mmdebstrap could not download a package: {tail}") from err
        raise CloudGuestError(f"mmdebstrap failed: {err}\n{tail}") from err


def _installed(tree: Path) -> dict[str, str]:
    out = run(
        [
            "dpkg-query",
            f"--admindir={tree / 'var/lib/dpkg'}",
            "-W",
            "-f",
            "${Package} ${Version} ${db:Status-Abbrev}\n",
        ]
    ).decode()
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, version, status = ([*line.split(" ", 2), "", ""])[:3]
        if status.startswith("ii"):
            found[name] = version
    return found


def _configure(tree: Path) -> None:
    for rel, text in recipe.root_files().items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_text(text)
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # every VM makes its own (cloud-init's ssh module)
    for rel, text in recipe.DIVERTED.items():
        run(["chroot", str(tree), "dpkg-divert", "--local", "--rename", "--add", f"/{rel}"])
        (tree / rel).write_text(text)
        (tree / rel).chmod(0o755)
    systemctl = ["chroot", str(tree), "systemctl", "--quiet"]
    run([*systemctl, "enable", *recipe.ENABLED_UNITS])
    run([*systemctl, "mask", *recipe.MASKED_UNITS])
    for leftover in ("var/log/cloud-init.log", "etc/resolv.conf.bak"):
        (tree / leftover).unlink(missing_ok=True)


def _kernel(tree: Path) -> tuple[Path, Path, str]:
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise CloudGuestError(f"expected one kernel in /boot, found {[k.name for k in kernels]}")
    version = kernels[0].name.removeprefix("vmlinuz-")
    initrd = tree / "boot" / f"initrd.img-{version}"
    if not initrd.exists():
        raise CloudGuestError(f"no initramfs for kernel {version} in /boot")
    return kernels[0], initrd, version


def _build(work: Path, root: Path, apt: AptState, key: str, versions: dict[str, str]) -> Path:
    tree, boot, out = work / "root", work / "boot", work / "out"
    debs = root / "debs-cloud"
    debs.mkdir(exist_ok=True)
    _mmdebstrap(work, tree, apt, debs)
    installed = _installed(tree)
    differ = sorted(p for p, v in versions.items() if installed.get(p) != v)
    if differ:
        shown = ", ".join(f"{p} {installed.get(p)} (resolved {versions[p]})" for p in differ[:5])
        raise CloudGuestError(f"mmdebstrap installed other versions than resolved: {shown}")
    _configure(tree)
    vmlinuz, initrd, kernel_version = _kernel(tree)
    boot.mkdir()
    shutil.copy2(vmlinuz, boot / "vmlinuz")
    shutil.copy2(initrd, boot / "initrd.img")
    (boot / "syslinux.cfg").write_text(recipe.syslinux_cfg("vmlinuz", "initrd.img"))
    raw = work / "disk.raw"
    partition(raw, recipe.DISK_SIZE, recipe.sfdisk_script())
    fat_boot_partition(
        raw,
        recipe.BOOT_START,
        recipe.BOOT_SIZE,
        [boot / "syslinux.cfg", boot / "vmlinuz", boot / "initrd.img"],
    )
    ext4_partition(
        raw, recipe.BOOT_START + recipe.BOOT_SIZE, recipe.root_size(), tree, recipe.ROOT_LABEL
    )
    out.mkdir()
    run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", "-c", str(raw), str(out / IMAGE)])
    manifest = {
        "key": key,
        "recipe_revision": recipe.RECIPE_REVISION,
        "kernel": kernel_version,
        "kernel_args": list(recipe.KERNEL_ARGS),
        "packages": dict(sorted(installed.items())),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    _prune_debs(debs, installed)
    return out


def _prune_debs(debs: Path, installed: dict[str, str]) -> None:
    """Keep only the .debs of the versions just installed (the directory stays bounded)."""
    keep = {f"{name}_{version.replace(':', '%3a')}_" for name, version in installed.items()}
    for deb in debs.glob("*.deb"):
        if not any(deb.name.startswith(prefix) for prefix in keep):
            deb.unlink()


def read_manifest(image: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((image.parent / MANIFEST).read_text())
    return data


__all__ = ["AptStateError", "CloudGuestError", "build_cloud_guest", "cache_dir", "read_manifest"]
