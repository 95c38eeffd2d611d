"""The upload server's NBD export of a file still arriving (``importer/arrivingexport``),
in-process with a real ``Upload`` and qemu-io/qemu-img as its clients: a read of bytes
not yet arrived waits for them and then gets exactly them; an upload aborted, or one
that stops growing for its read timeout, fails a waiting read at once with an error
(qemu-img exits non-zero) rather than leaving it waiting."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from pathlib import Path

from importer import arrivingexport
from importer.errors import TransferError
from importer.sources.base import GrowingFile
from importer.uploadsource import Upload

DATA = bytes(range(256)) * 8192 * 3  # 6 MiB
HEAD = DATA[:65536]


def _upload(tmp_path: Path, *, read_timeout: float = 60) -> Upload:
    return Upload(head=HEAD, size=len(DATA), scratch=tmp_path / "upload",
                  read_timeout=read_timeout)


def _watched(upload: Upload) -> tuple[GrowingFile, threading.Event]:
    """The upload's growing file, and an event set once a read waits for bytes not yet
    arrived (what the tests wait for instead of sleeping)."""
    growing = upload.growing_file()
    assert growing is not None
    waiting = threading.Event()

    def wait(end: int) -> None:
        if end > upload.received:
            waiting.set()
        growing.wait(end)

    return dataclasses.replace(growing, wait=wait), waiting


def _qemu_io_read(uri: str, offset: int, length: int) -> subprocess.Popen[str]:
    return subprocess.Popen(["qemu-io", "-r", "-f", "raw", "-c", f"read {offset} {length}",
                             uri], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_read_waits_for_its_bytes_and_gets_exactly_them(tmp_path: Path) -> None:
    upload = _upload(tmp_path)
    out = tmp_path / "copy.raw"
    try:
        growing, waiting = _watched(upload)
        with arrivingexport.serve(growing, tmp_path / "s.sock") as uri:
            copy = subprocess.Popen(["qemu-img", "convert", "-f", "raw", "-O", "raw", uri,
                                     str(out)], stderr=subprocess.PIPE, text=True)
            assert waiting.wait(30)
            assert copy.poll() is None  # it waits for the bytes not sent yet
            for at in range(len(HEAD), len(DATA), 1 << 20):
                upload.feed(DATA[at:at + (1 << 20)])
            upload.finish()
            _, errors = copy.communicate(timeout=30)
            assert copy.returncode == 0, errors
        assert out.read_bytes() == DATA
    finally:
        upload.close()


def test_an_aborted_upload_fails_a_waiting_read_at_once(tmp_path: Path) -> None:
    upload = _upload(tmp_path)  # read timeout 60 s: only the abort can end the wait
    try:
        growing, waiting = _watched(upload)
        with arrivingexport.serve(growing, tmp_path / "s.sock") as uri:
            reader = _qemu_io_read(uri, len(DATA) - 4096, 4096)
            assert waiting.wait(30)
            assert reader.poll() is None  # waiting for bytes that have not arrived
            started = time.monotonic()
            upload.abort(TransferError("the client went away"))
            output, _ = reader.communicate(timeout=30)
            assert time.monotonic() - started < 5
            assert "Input/output error" in output, output
    finally:
        upload.close()


def test_an_upload_that_stops_growing_fails_a_waiting_read_after_its_timeout(
        tmp_path: Path) -> None:
    upload = _upload(tmp_path, read_timeout=1)
    try:
        growing = upload.growing_file()
        assert growing is not None
        with arrivingexport.serve(growing, tmp_path / "s.sock") as uri:
            started = time.monotonic()
            output, _ = _qemu_io_read(uri, len(DATA) - 4096, 4096).communicate(timeout=30)
            assert 1 <= time.monotonic() - started < 10
            assert "Input/output error" in output, output
    finally:
        upload.close()


def test_a_read_of_arrived_bytes_is_answered_while_others_wait(tmp_path: Path) -> None:
    """One connection waiting for the end does not hold up another's read of the head."""
    upload = _upload(tmp_path)
    try:
        growing, waiting_read = _watched(upload)
        with arrivingexport.serve(growing, tmp_path / "s.sock") as uri:
            waiting = _qemu_io_read(uri, len(DATA) - 4096, 4096)
            assert waiting_read.wait(30)
            done = subprocess.run(["qemu-io", "-r", "-f", "raw", "-c", "read -P 0 0 1",
                                   "-c", "read -P 255 255 1", uri],
                                  capture_output=True, text=True, timeout=10)
            assert done.returncode == 0 and "Pattern verification failed" not in done.stdout
            assert waiting.poll() is None
            upload.abort(TransferError("done"))
            waiting.communicate(timeout=30)
    finally:
        upload.close()
