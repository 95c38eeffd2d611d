"""Regression tests for issue 7: hostile images and misbehaving servers, each the attack
as it was found (each failed on the importer before its fix)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from importer.config import ContentType
from importer.errors import (
    BackingFileRejected,
    ConfigError,
    InvalidImage,
    InvalidResponse,
    NotADiskImage,
    SourceChanged,
    TooManyRedirects,
)
from importer.formats import HEAD_BYTES, sniff_image
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import SECRET_MARKER, ImageFactory
from tests.importer.conftest import ImportFn
from tests.importer.test_entrypoints import ROOT, pod_env

MiB = 1024 * 1024


def test_archive_cleanup_never_removes_a_host_file(image_factory: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    """An absolute member is extracted inside the volume; the failure that follows must
    clean up that copy, not the host file its name points at."""
    victim = tmp_path / "host" / "precious.txt"
    victim.parent.mkdir()
    victim.write_bytes(b"host data\n")
    volume = tmp_path / "volume"
    volume.mkdir()
    tar = image_factory.tar_with_absolute_member(victim.resolve())
    outcome = do_import(http_server.publish(tar.path), volume,
                        content_type=ContentType.ARCHIVE)
    assert isinstance(outcome.error, InvalidImage), outcome.error
    assert victim.read_bytes() == b"host data\n"
    assert not (tmp_path / "escaped.txt").exists()
    assert list(volume.iterdir()) == []  # the copy made inside the volume is gone too


def test_resume_answered_from_byte_zero_is_refused(images: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    """A dropped transfer resumes with Range; a cache that answers 206 from byte 0 must
    not have its bytes written at the resume offset (that completed with a wrong disk)."""
    image = images.get("raw")
    url = http_server.publish(image.path, "zero.img")
    http_server.set_faults("zero.img", Faults(drop_after=image.size // 3, drop_times=2,
                                              range_from_zero=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, InvalidResponse), outcome.error
    assert outcome.exit_code == 2
    assert "bytes 0-" in outcome.error.message
    assert not dest.exists()
    resumed = [r.range for r in http_server.requests_for("zero.img", "GET")][2:]
    assert resumed and all(r and not r.startswith("bytes=0-") for r in resumed), resumed


def test_object_replaced_mid_import_is_not_spliced(images: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("raw")
    url = http_server.publish(image.path, "moving.img")
    http_server.set_faults("moving.img", Faults(changing_etag=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, SourceChanged), outcome.error
    assert outcome.error.retryable and outcome.exit_code == 1
    assert "ETag" in outcome.error.message
    assert not dest.exists()


def test_nbd_route_refuses_a_server_that_answers_from_byte_zero(
        images: ImageFactory, http_server: HttpServer, do_import: ImportFn,
        tmp_path: Path) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "zero.qcow2")
    http_server.set_faults("zero.qcow2", Faults(range_from_zero=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, InvalidResponse), outcome.error
    assert not dest.exists()


def test_a_failure_while_the_heads_overlay_is_made_waits_for_it(
        images: ImageFactory, http_server: HttpServer, do_import: ImportFn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's overlay is made beside nbdkit's start, in the export's work directory.
    When the first range read fails (here: a server that answers from byte zero), the
    import waits for that qemu-img before the directory goes: not waiting once let it
    write into the directory being removed (ENOTEMPTY instead of the server's error)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    done = tmp_path / "create-done"
    real = shutil.which("qemu-img")
    wrapper = bin_dir / "qemu-img"
    wrapper.write_text(  # only the overlay's create is slowed and marked
        f'#!/bin/sh\ncase "$*" in create*pinned-head*) sleep 1; "{real}" "$@"; s=$?;'
        f' touch "{done}"; exit $s;; esac\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    image = images.get("qcow2")
    url = http_server.publish(image.path, "zero-slow.qcow2")
    http_server.set_faults("zero-slow.qcow2", Faults(range_from_zero=True))
    outcome = do_import(url, tmp_path / "d.img")
    assert isinstance(outcome.error, InvalidResponse), outcome.error
    assert done.exists(), "the import returned while its qemu-img create still ran"


# VmHWM, not ru_maxrss: the latter keeps the high-water mark from before exec, when the
# child was a copy of pytest (grown by earlier tests).
_MEASURED = (
    "import atexit, re, runpy, sys\n"
    "def report():\n"
    "    status = open('/proc/self/status').read()\n"
    "    kib = re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)\n"
    "    with open(sys.argv[1], 'w') as f:\n"
    "        f.write(str(int(kib) * 1024))\n"
    "atexit.register(report)\n"
    "runpy.run_module('importer', run_name='__main__')\n"
)


def _run_pod_measured(env: dict[str, str], report: Path, timeout: float = 300) -> int:
    """Run the importer pod program; ``report`` receives the importer's own peak RSS in
    bytes (its children are capped by prlimit, and measured by the benchmarks)."""
    done = subprocess.run([sys.executable, "-c", _MEASURED, str(report)], env=env, cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=timeout, check=False)
    return done.returncode


def test_garbage_l1_qcow2_keeps_memory_bounded(image_factory: ImageFactory,
                                               http_server: HttpServer,
                                               tmp_path: Path) -> None:
    """qemu-img check prints ~500 MB of errors for this 270 KiB image; the importer read
    all of it into memory (gigabytes at its peak)."""
    image = image_factory.garbage_l1_qcow2()
    url = http_server.publish(image.path)
    env = pod_env(tmp_path, IMPORTER_ENDPOINT=url)
    code = _run_pod_measured(env, tmp_path / "peak")
    peak = int((tmp_path / "peak").read_text())
    assert code == 2
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["reason"] == "InvalidImage", message
    assert "corrupt qcow2 image" in message["message"]
    assert peak < 100 * MiB, f"peak RSS {peak / MiB:.0f} MiB"
    assert not (tmp_path / "disk.img").exists()


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/disk.img", "loop"])
def test_bad_redirects_are_permanent(http_server: HttpServer, do_import: ImportFn,
                                     tmp_path: Path, target: str) -> None:
    url = http_server.url_for("hop.img")
    http_server.set_faults("hop.img", Faults(redirect_to=url if target == "loop" else target))
    outcome = do_import(url, tmp_path / "d.img")
    expected = TooManyRedirects if target == "loop" else ConfigError
    assert isinstance(outcome.error, expected), outcome.error
    assert outcome.exit_code == 2 and not outcome.error.retryable
    reason = "TooManyRedirects" if target == "loop" else "InvalidConfig"
    assert json.loads(outcome.termination)["reason"] == reason
    # Not retried: one request (or one redirect chain) only.
    limit = 31 if target == "loop" else 1
    assert len(http_server.requests_for("hop.img")) <= limit


@pytest.mark.parametrize("page", [
    b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>...</body></html>\n",
    b"\xef\xbb\xbf\n  <html lang=en><title>404 - not here</title></html>",
])
def test_a_web_page_is_not_a_disk(http_server: HttpServer, do_import: ImportFn,
                                  tmp_path: Path, page: bytes) -> None:
    (tmp_path / "www" / "login").write_bytes(page)
    http_server.set_faults("login", Faults(content_type="text/html"))
    dest = tmp_path / "d.img"
    outcome = do_import(http_server.url_for("login"), dest)
    assert isinstance(outcome.error, NotADiskImage), outcome.error
    assert outcome.exit_code == 2
    assert "text/html" in outcome.error.message and "HTML" in outcome.error.message
    assert not dest.exists()


def test_raw_data_that_only_mentions_html_stays_raw(http_server: HttpServer,
                                                    do_import: ImportFn, tmp_path: Path) -> None:
    data = b"\x00" * 512 + b"<html>" + bytes(range(256)) * 16
    (tmp_path / "www" / "disk.raw").write_bytes(data)
    outcome = do_import(http_server.url_for("disk.raw"), tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert (tmp_path / "d.img").read_bytes() == data


@pytest.mark.parametrize("variant", ["capacity0", "indented", "parent"])
def test_sparse_vmdk_naming_a_host_file_is_refused_before_qemu(
        image_factory: ImageFactory, http_server: HttpServer, do_import: ImportFn,
        tmp_path: Path, variant: str) -> None:
    secret = tmp_path / "host-secret.raw"
    secret.write_bytes(SECRET_MARKER * 16)
    image = image_factory.hostile_sparse_vmdk(variant, secret.resolve())
    # The header check itself refuses it: qemu-img (which would open the file) never runs.
    with pytest.raises(BackingFileRejected):
        sniff_image(image.path.read_bytes()[:HEAD_BYTES])
    dest = tmp_path / "d.img"
    outcome = do_import(http_server.publish(image.path), dest)
    assert isinstance(outcome.error, BackingFileRejected), outcome.error
    assert not dest.exists()


def test_ordinary_sparse_vmdk_still_passes(images: ImageFactory) -> None:
    image = images.get("vmdk")
    sniffed = sniff_image(image.path.read_bytes()[:HEAD_BYTES])
    assert sniffed.virtual_size == image.virtual_size


def _fetched_by_curl(server: HttpServer) -> bool:
    """Whether nbdkit's curl plugin read the image itself (the direct route): the
    importer's own requests always send Accept-Encoding: identity, curl's never do."""
    return any("Accept-Encoding" not in r.headers for r in server.requests if r.method == "GET")


@pytest.mark.parametrize("query", ["", "?X-Amz-Signature=abc"], ids=["direct", "proxy"])
def test_nbd_import_leaves_no_temp_files(images: ImageFactory, http_server: HttpServer,
                                         tmp_path: Path, query: str) -> None:
    """nbdkit's curl plugin with a header script made a /tmp/errorsXXXXXX per run (the
    path is nbdkit's own, not $TMPDIR's): the pod program runs with a private /tmp."""
    private = tmp_path / "private-tmp"
    private.mkdir()
    url = http_server.publish(images.get("qcow2").path) + query
    outside = Path(tempfile.mkdtemp(prefix="rootdisk-test-", dir="/var/tmp"))  # not under /tmp
    try:
        env = pod_env(outside, IMPORTER_ENDPOINT=url)
        script = (f"mount --bind {private} /tmp && cd {ROOT} && "
                  f"exec {sys.executable} -m importer")
        done = subprocess.run(["unshare", "--mount", "--propagation", "private",
                               "sh", "-c", script], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0 and "Operation not permitted" in done.stderr:
            pytest.skip("no private mount namespace here (needs root)")
        assert done.returncode == 0, done.stderr
        message = json.loads((outside / "termination-log").read_text())
        assert message["route"] == "nbd-convert"
        assert _fetched_by_curl(http_server) == (query == "")
    finally:
        shutil.rmtree(outside)
    assert list(private.iterdir()) == []
