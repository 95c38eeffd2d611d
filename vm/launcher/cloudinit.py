"""Build the cloud-init ISO of a VMI in the pod (upstream's ``pkg/cloud-init``).

Why it exists: the data source is a disk the guest reads at boot. Secret data is read
from the Secret volumes the kubelet mounted (``<secret dir>/<volume>/{userdata,userData}``,
``{networkdata,networkData}``, in ``<volume>-ndata/`` when that is another Secret, SSH
keys at ``<secret dir>/<secret>-access-cred/``, see ``vm.vmi.secret_volumes``); no
component fetches a Secret from the API. The files are staged in
``<ephemeral dir>/cloud-init-data/<ns>/<vmi>/data/`` (directory 0700, files 0600),
``xorrisofs`` makes ``<iso>.staging`` within :data:`ISO_TIMEOUT` seconds, the staged
files are removed whatever happens, and the ISO (0600) is renamed into place. No data
is logged: only file names and sizes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess

from vm.domain import cloudinit
from vm.domain.cloudinit import CloudInitSpec, DataSource
from vm.domain.configurators.base import domain_uuid
from vm.domain.options import PreparedDisk
from vm.domain.vmi import VmiSpec
from vm.launcher.errors import DiskError

logger = logging.getLogger(__name__)

ISO_TIMEOUT = 10.0
MAX_SECRET_FILE = 16 * 1024 * 1024
XORRISOFS = "xorrisofs"


class CloudInitError(DiskError):
    reason = "CloudInitError"


def _read(path: str) -> bytes:
    """A Secret file (a kubelet's is a symlink into ``..data``), at most 16 MiB."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_SECRET_FILE + 1)
    if len(data) > MAX_SECRET_FILE:
        raise CloudInitError(f"{path} is larger than {MAX_SECRET_FILE} bytes")
    return data


def _first(directory: str, names: tuple[str, ...]) -> bytes | None:
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            try:
                return _read(path)
            except OSError as err:
                logger.warning("could not read %s: %s", path, type(err).__name__)
    return None


def read_secrets(spec: CloudInitSpec, secret_dir: str) -> CloudInitSpec:
    """The spec with its Secret data; upstream's error when no referenced file is there."""
    if not (spec.user_data_secret or spec.network_data_secret):
        return spec
    base = os.path.join(secret_dir, spec.volume)
    # a network-data Secret other than the user-data one has its own directory
    net_base = os.path.join(secret_dir, f"{spec.volume}-ndata")
    if not os.path.isdir(net_base):
        net_base = base
    user = _first(base, cloudinit.USER_DATA_FILES) if spec.user_data_secret else None
    network = (_first(net_base, cloudinit.NETWORK_DATA_FILES) if spec.network_data_secret
               else None)
    if user is None and network is None:
        raise CloudInitError(f"no cloud-init data-source found at volume: {spec.volume}")
    return cloudinit.resolve(spec, user_data=user, network_data=network)


def ssh_keys(vmi: VmiSpec, method: DataSource, secret_dir: str) -> list[str]:
    """One key per non-empty file of each Secret propagated by ``method``, files in name
    order, skipping the kubelet's ``..*`` entries and directories (as upstream)."""
    keys: list[str] = []
    for source in vmi.ssh_keys:
        if source.method != method:
            continue
        base = os.path.join(secret_dir, source.directory)
        try:
            names = sorted(os.listdir(base))
        except OSError as err:
            raise CloudInitError(f"cannot read the SSH keys of Secret {source.secret!r} at "
                                 f"{base}: {err.strerror}") from err
        for name in names:
            path = os.path.join(base, name)
            if name.startswith("..") or os.path.isdir(path):
                continue
            try:
                data = _read(path).decode(errors="replace")  # as Go's JSON would
            except OSError as err:
                raise CloudInitError(f"Unable to read public keys found at volume: {base}/"
                                     f"{name} error: {type(err).__name__}") from err
            if data:
                keys.append(data)
    return keys


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make_iso(*, output: str, label: str, files: dict[str, bytes], staging_dir: str,
             xorrisofs: str = XORRISOFS, timeout: float = ISO_TIMEOUT) -> None:
    """Stage ``files`` under ``staging_dir`` (removed afterwards) and write ``output``.

    :raise CloudInitError: xorrisofs failed or ran over ``timeout``.
    """
    staged = output + ".staging"
    shutil.rmtree(staging_dir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staged)
    os.makedirs(staging_dir, mode=0o700)
    try:
        for rel, data in files.items():
            _write(os.path.join(staging_dir, rel), data)
        argv = [xorrisofs, "-output", staged, "-volid", label, "-joliet", "-rock",
                "-partition_cyl_align", "on", staging_dir]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as err:
            raise CloudInitError(f"Timed out generating cloud-init iso at path {output} "
                                 f"(after {timeout:g} s)") from err
        except OSError as err:
            raise CloudInitError(f"{xorrisofs} cmd failed to start while generating iso "
                                 f"file {output}: {err.strerror}") from err
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip()[-500:]
            raise CloudInitError(f"{xorrisofs} returned exit code {done.returncode} while "
                                 f"generating iso file {output}: {tail}")
        os.chmod(staged, 0o600)
        os.replace(staged, output)
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)


def iso_path(vmi: VmiSpec, source: DataSource, ephemeral_dir: str) -> str:
    return os.path.join(ephemeral_dir, "cloud-init-data", vmi.namespace, vmi.name,
                        cloudinit.ISO_NAMES[source])


def prepare(vmi: VmiSpec, *, secret_dir: str, ephemeral_dir: str,
            xorrisofs: str = XORRISOFS) -> PreparedDisk | None:
    """Build the VMI's cloud-init ISO, if it has a cloud-init volume."""
    spec = vmi.cloud_init
    if spec is None:
        return None
    spec = read_secrets(spec, secret_dir)
    meta = cloudinit.meta_data(
        source=spec.source, name=vmi.name, namespace=vmi.namespace, uuid=domain_uuid(vmi),
        host=cloudinit.hostname(vmi.name, vmi.hostname), itype=vmi.instance_type,
        keys=ssh_keys(vmi, spec.source, secret_dir))
    try:
        files = cloudinit.files(spec, meta)
    except ValueError as err:
        raise CloudInitError(str(err)) from err
    output = iso_path(vmi, spec.source, ephemeral_dir)
    try:
        os.makedirs(os.path.dirname(output), mode=0o700, exist_ok=True)
        make_iso(output=output, label=cloudinit.LABELS[spec.source], files=files,
                 staging_dir=os.path.join(os.path.dirname(output), "data"),
                 xorrisofs=xorrisofs)
    except OSError as err:
        raise CloudInitError(f"cannot build the cloud-init ISO {output}: {err.strerror}: "
                             f"{err.filename}") from err
    logger.info("cloud-init %s ISO %s built (%s)", spec.source, output,
                ", ".join(f"{k}: {len(v)} bytes" for k, v in sorted(files.items())))
    return PreparedDisk(volume=spec.volume, path=output, format="raw")
