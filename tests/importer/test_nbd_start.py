"""nbdkit that does not come up, in-process (``importer.nbd``, a fake nbdkit that never
listens, the real setpriv): the URL routes' ``_serve`` fails with a ``TransferError`` as
it always did (the importer retries it), and the fake is killed and reaped. And on the
range endpoint's route (S3), its NBD server listens while the head's overlay is made,
not after it."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from importer import children, nbd
from importer.config import ImporterConfig
from importer.errors import TransferError
from tests.fakes import FakeSource
from tests.importer.test_uploadserver_arriving import _fake


@pytest.fixture
def hanging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake nbdkit first on PATH that writes its pid to the returned file and sleeps
    without ever making its socket; the start timeout is 1 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid = tmp_path / "nbdkit.pid"
    _fake(bin_dir, "nbdkit", f"echo $$ > {shlex.quote(str(pid))}\nexec sleep 600")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(nbd.START_TIMEOUT_VARIABLE, "1")
    return pid


def _gone(pid_file: Path) -> None:
    """The fake ran, and is neither running nor a zombie; no child is registered."""
    assert not Path(f"/proc/{int(pid_file.read_text())}").exists()
    assert children.live() == []


@pytest.mark.parametrize("name", ["direct", "proxy"])
def test_a_url_route_whose_nbdkit_does_not_listen_fails_as_a_transfer(
        tmp_path: Path, hanging: Path, name: str) -> None:
    with pytest.raises(TransferError, match=r"^nbdkit did not start serving in 1 s$"), \
            nbd._serve(["null"], tmp_path, name):
        pytest.fail("served")
    _gone(hanging)


@pytest.mark.parametrize("given", ["", "soon", "0", "-1", "nan", "inf"])
def test_a_start_timeout_that_is_no_number_of_seconds_is_the_default(
        monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(nbd.START_TIMEOUT_VARIABLE, given)
    assert nbd._start_timeout() == nbd.START_TIMEOUT
    monkeypatch.setenv(nbd.START_TIMEOUT_VARIABLE, "0.5")
    assert nbd._start_timeout() == 0.5


def test_the_proxy_route_serves_while_the_head_is_pinned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's overlay (qemu-img create and qemu-io: two processes) is made beside
    the export's start on the range endpoint's route too (S3), not before it: here the
    overlay is only made once the export's socket is there, which it never is if the
    export waits for the overlay."""
    pin = nbd._pin_head

    def pin_once_nbdkit_listens(head: bytes, size: int, workdir: Path) -> Path:
        sock = workdir / "nbd-proxy.sock"
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise AssertionError("the export was not started before the head was pinned")
            time.sleep(0.01)
        return pin(head, size, workdir)

    monkeypatch.setattr(nbd, "_pin_head", pin_once_nbdkit_listens)
    source = FakeSource(bytes(range(256)) * 4096)  # 1 MiB
    config = SimpleNamespace(source="s3")  # only read to choose the route: not HTTP
    with nbd.export(source, cast(ImporterConfig, config), probe=source.probe(),
                    workdir=tmp_path) as export:
        assert export.proxy is not None and export.pinned is not None
        assert export.pinned.exists()
        # Served by the importer itself: no nbdkit (12 MiB of the tree, round 25) runs.
        assert export.pid is None and children.live() == []
    assert children.live() == []
