"""``Upload`` as a spooled source: ``spooled_file`` hands the scratch file over only once
the whole body is in it, and never waits without bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from importer.errors import TransferError
from importer.uploadsource import Upload

HEAD = b"QFI\xfb" + bytes(60)


def spooled_upload(tmp_path: Path, size: int, *, read_timeout: float = 30.0) -> Upload:
    return Upload(head=HEAD, size=size, scratch=tmp_path / "image",
                  read_timeout=read_timeout)


def test_spooled_file_waits_for_the_whole_body(tmp_path: Path) -> None:
    rest = bytes(range(256)) * 4096
    upload = spooled_upload(tmp_path, len(HEAD) + len(rest))
    fed = threading.Event()

    def feed() -> None:
        time.sleep(0.3)  # the reader is waiting by now
        for at in range(0, len(rest), 65536):
            upload.feed(rest[at:at + 65536])
        fed.set()
        upload.finish()

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        path = upload.spooled_file()
        assert fed.is_set(), "handed over before the last byte arrived"
        assert path.read_bytes() == HEAD + rest
    finally:
        feeder.join(10)
        upload.close()
    assert not path.exists()


def test_spooled_file_raises_when_the_upload_is_aborted(tmp_path: Path) -> None:
    upload = spooled_upload(tmp_path, 1 << 20)
    threading.Timer(0.3, upload.abort, [TransferError("the client went away")]).start()
    with pytest.raises(TransferError, match="the client went away"):
        upload.spooled_file()
    upload.close()


def test_spooled_file_raises_on_a_short_body(tmp_path: Path) -> None:
    upload = spooled_upload(tmp_path, 1 << 20)
    upload.feed(b"x" * 1000)
    upload.finish()
    with pytest.raises(TransferError, match="ended after"):
        upload.spooled_file()
    upload.close()


def test_spooled_file_gives_up_on_a_stalled_body(tmp_path: Path) -> None:
    upload = spooled_upload(tmp_path, 1 << 20, read_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(TransferError, match="no upload data"):
        upload.spooled_file()
    assert time.monotonic() - started < 10
    upload.close()
