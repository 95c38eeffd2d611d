"""The importer as its users run it: ``python -m importer`` in a pod (environment, exit
code, termination message, metrics) and ``rootdisk import`` in a shell; and onto a
real block device."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.ports import free_port
from tests.fixtures.registry import RegistryServer, push_disk
from tests.importer import loopdev

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]
ROOTDISK = Path(sys.executable).with_name("rootdisk")


def pod_env(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "IMPORTER_DESTINATION": str(tmp_path / "disk.img"),
            "IMPORTER_TERMINATION_LOG": str(tmp_path / "termination-log"),
            "IMPORTER_METRICS_PORT": "0", "IMPORTER_RETRY_DELAY": "0.01", **env}


def run_pod(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "importer"], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)


def test_pod_success(images: ImageFactory, http_server: HttpServer, tmp_path: Path) -> None:
    url = http_server.publish(images.get("qcow2").path)
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url, IMPORTER_IMAGE_SIZE="32Mi"))
    assert done.returncode == 0, done.stderr
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["reason"] == "Completed" and message["message"] == "Import Complete"
    assert message["format"] == "qcow2" and message["route"] == "nbd-convert"
    assert compare(images.reference, tmp_path / "disk.img")


def test_pod_not_found_is_permanent(http_server: HttpServer, tmp_path: Path) -> None:
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=http_server.url_for("gone.qcow2")))
    assert done.returncode == 2
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message == {"reason": "NotFound", "retryable": False,
                       "message": message["message"]}
    assert "got 404" in message["message"]


def test_pod_bad_config_names_the_variable(tmp_path: Path) -> None:
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT="http://h/x", IMPORTER_IMAGE_SIZE="big"))
    assert done.returncode == 2
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["reason"] == "InvalidConfig"
    assert message["message"].startswith("IMPORTER_IMAGE_SIZE:")


@pytest.fixture
def slow_private_image(images: ImageFactory, http_server: HttpServer) -> Iterator[str]:
    """The 16 MiB reference behind basic auth, at 8 MB/s: an import takes a few seconds."""
    url = http_server.publish(images.get("raw").path, "slow.img")
    http_server.set_faults("slow.img", Faults(rate=8_000_000,
                                                basic_auth=("user", "pw-in-no-argv")))
    yield url


@pytest.mark.slow
def test_metrics_and_no_credentials_in_argv(slow_private_image: str, tmp_path: Path) -> None:
    port = free_port()
    env = pod_env(tmp_path, IMPORTER_ENDPOINT=slow_private_image, OWNER_UID="owner-123",
                  IMPORTER_ACCESS_KEY_ID="user", IMPORTER_SECRET_KEY="pw-in-no-argv",
                  IMPORTER_METRICS_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "importer"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    values: list[float] = []
    leaked: list[str] = []

    def watch() -> None:
        pattern = re.compile(r'kubevirt_cdi_import_progress_total\{ownerUID="owner-123"\} (\S+)')
        while proc.poll() is None:
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    if b"pw-in-no-argv" in cmdline.read_bytes():
                        leaked.append(str(cmdline))
                except OSError:
                    pass
            try:
                text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
                if match := pattern.search(text):
                    values.append(float(match.group(1)))
            except requests.RequestException:
                pass
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    output, _ = proc.communicate(timeout=120)
    watcher.join()
    assert proc.returncode == 0, output
    assert not leaked
    assert "pw-in-no-argv" not in output
    assert any(0 < v < 100 for v in values), values
    assert values == sorted(values)


def test_cli_json(images: ImageFactory, http_server: HttpServer, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("accessKeyId: user\nsecretKey: hunter2\n")
    url = http_server.publish(images.get("vdi").path)
    http_server.set_faults("vdi", Faults(basic_auth=("user", "hunter2")))
    done = subprocess.run([str(ROOTDISK), "import", url, str(tmp_path / "d.img"), "--json",
                           "--secret-file", str(secret), "--size", "64Mi"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["format"] == "vdi" and result["reason"] == "Completed"
    assert compare(images.reference, tmp_path / "d.img")


def test_cli_imports_a_container_disk(images: ImageFactory, registry_server: RegistryServer,
                                     tmp_path: Path) -> None:
    push_disk(registry_server, "golden/cli", "v1", images.get("qcow2").path, tmp_path / "w",
              name="d.qcow2")
    creds = registry_server.credentials
    assert creds is not None
    secret = tmp_path / "secret"
    secret.write_text(f"accessKeyId: {creds.username}\nsecretKey: {creds.password}\n")
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "ca.pem").write_bytes(Path(str(registry_server.verify)).read_bytes())
    done = subprocess.run([str(ROOTDISK), "import", registry_server.url("golden/cli", "v1"),
                           str(tmp_path / "d.img"), "--json", "--secret-file", str(secret),
                           "--cert-dir", str(certs)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "qcow2"
    assert compare(images.reference, tmp_path / "d.img")


@pytest.mark.parametrize(("args", "words"), [
    (["--checksum", "sha256:xyz"], "--checksum: sha256 digest must be 64 hex digits"),
    (["--size", "lots"], "--size:"),
    (["--header", "bad header"], "--header:"),
    (["--secret-file", "/nonexistent"], "--secret-file: cannot read"),
])
def test_cli_errors_name_the_flag(tmp_path: Path, args: list[str], words: str) -> None:
    done = subprocess.run([str(ROOTDISK), "import", "http://127.0.0.1:9/x.img",
                           str(tmp_path / "d.img"), *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert words in done.stderr


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[Path]:
    backing = tmp_path / "block.img"
    with backing.open("wb") as f:
        f.truncate(32 * MiB)
    with loopdev.loop_device(backing) as device:
        yield device


@pytest.mark.parametrize("name", ["qcow2", "raw.gz", "raw"])
def test_block_device(images: ImageFactory, http_server: HttpServer, loop_device: Path,
                      tmp_path: Path, name: str) -> None:
    from tests.importer.conftest import ImportFn  # noqa: F401  (fixture type only)

    with loop_device.open("r+b") as dev:  # garbage that must not survive as "zeros"
        dev.write(b"\xee" * (32 * MiB))
    image = images.get(name)
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=http_server.publish(image.path),
                           IMPORTER_DESTINATION=str(loop_device)))
    assert done.returncode == 0, done.stderr
    assert compare(image.expected, loop_device)


def test_block_device_too_small(image_factory: ImageFactory, http_server: HttpServer,
                                loop_device: Path, tmp_path: Path) -> None:
    image = image_factory.oversized_qcow2(64 * MiB)
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=http_server.publish(image.path),
                           IMPORTER_DESTINATION=str(loop_device)))
    assert done.returncode == 2
    assert json.loads((tmp_path / "termination-log").read_text())["reason"] == "TooSmall"


def test_blank(tmp_path: Path) -> None:
    done = run_pod(pod_env(tmp_path, IMPORTER_SOURCE="blank", IMPORTER_IMAGE_SIZE="100Mi"))
    assert done.returncode == 0, done.stderr
    disk = tmp_path / "disk.img"
    assert disk.stat().st_size == (100 * MiB * 94 // 100) // MiB * MiB
    assert disk.stat().st_blocks == 0


_SHIM = """#!/bin/sh
# Records each child the importer starts (they all start through setpriv), then runs it.
record=$(mktemp "$ROOTDISK_CHILD_RECORD/child.XXXXXX")
printf '%s\\0' "$@" > "$record.argv"
env -0 > "$record.env"
exec {setpriv} "$@"
"""


def _recording_path(tmp_path: Path) -> tuple[str, Path]:
    """A PATH whose ``setpriv`` records every child's argv and environment in the
    returned directory (deterministic: no sampling of /proc)."""
    shims, record = tmp_path / "shims", tmp_path / "children"
    shims.mkdir()
    record.mkdir()
    real = shutil.which("setpriv")
    assert real is not None
    shim = shims / "setpriv"
    shim.write_text(_SHIM.format(setpriv=real))
    shim.chmod(0o755)
    return f"{shims}:{os.environ['PATH']}", record


def _children_recorded(record: Path) -> list[tuple[list[str], bytes]]:
    """(argv, environment as NUL-separated bytes) of each recorded child."""
    found = []
    for argv_file in sorted(record.glob("*.argv")):
        argv = argv_file.read_bytes().split(b"\0")[:-1]
        env = argv_file.with_suffix(".env").read_bytes()
        found.append(([a.decode() for a in argv], env))
    return found


def _program(argv: list[str]) -> str:
    """The program a recorded setpriv argv runs (past setpriv's and prlimit's options)."""
    rest = argv[argv.index("--") + 1:]
    if rest[0] == "prlimit":
        rest = rest[rest.index("--") + 1:]
    return rest[0]


def test_children_get_no_credentials_and_run_confined(images: ImageFactory,
                                                      http_server: HttpServer,
                                                      tmp_path: Path) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "private.qcow2")
    http_server.set_faults("private.qcow2", Faults(basic_auth=("user", "pw-in-no-argv"),
                                                   required_headers=(("X-Key", "hdr-secret"),)))
    path, record = _recording_path(tmp_path)
    env = pod_env(tmp_path, IMPORTER_ENDPOINT=url, IMPORTER_ACCESS_KEY_ID="user",
                  IMPORTER_SECRET_KEY="pw-in-no-argv", IMPORTER_EXTRA_HEADER_0="X-Key: hdr-secret",
                  PATH=path, ROOTDISK_CHILD_RECORD=str(record))
    done = run_pod(env)
    assert done.returncode == 0, done.stderr
    secrets = [b"pw-in-no-argv", b"hdr-secret"]
    for text in (b"user:pw-in-no-argv", b"pw-in-no-argv", b"hdr-secret"):
        secrets += [base64.b64encode(text), base64.urlsafe_b64encode(text),
                    base64.b64encode(text).rstrip(b"="), text.hex().encode()]
    children = _children_recorded(record)
    programs = [_program(argv) for argv, _ in children]
    assert "nbdkit" in programs and "qemu-img" in programs, programs
    for argv, environment in children:
        joined = "\0".join(argv).encode()
        for secret in secrets:
            assert secret not in joined, (secret, argv)
            assert secret not in environment, (secret, argv)
        if "qemu-img" in argv or "qemu-io" in argv:
            # Under prlimit (address space and CPU).
            assert argv[3] == "prlimit" and any(a.startswith("--as=") for a in argv) \
                and any(a.startswith("--cpu=") for a in argv), argv
        if "qemu-img" in argv and "create" not in argv:
            # The input named as a json: filename: its format driver, the one export
            # under it, and backing files disabled; never without an input format.
            specs = [json.loads(a.removeprefix("json:")) for a in argv if a.startswith("json:")]
            assert len(specs) == 1 and specs[0]["driver"] == "qcow2", argv
            assert "backing" in specs[0] and specs[0]["backing"] is None, argv
    # One pass: qemu-img read the image through NBD (no scratch copy), and the server
    # sent about the image once (not a download plus the converter's reads).
    converts = [argv for argv, _ in children if "convert" in argv]
    assert len(converts) == 1, converts
    # ... through the export under the overlay holding the probe's copy of its head
    node = json.loads(converts[0][-2].removeprefix("json:"))["file"]
    assert node["driver"] == "qcow2" and node["backing"]["file"]["driver"] == "nbd", converts
    assert node["file"]["filename"].endswith("pinned-head.qcow2"), converts
    sent = sum(r.sent or 0 for r in http_server.requests_for("private.qcow2", "GET"))
    # (beyond the image: the probe's head, a read away from byte 0, the check after the
    # conversion, and qemu-img's metadata reads by info, check and convert)
    assert sent <= image.size + 320 * 1024, (sent, image.size)
    assert compare(images.reference, tmp_path / "disk.img")
