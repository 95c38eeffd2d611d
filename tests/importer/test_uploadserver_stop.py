"""A stopped upload server (the pod deleted mid-upload: the kubelet's SIGTERM) ends at
once, not when the client has finished sending: before, it waited for the request in
flight, so every deletion mid-upload took the pod's whole grace period (30 s) and ended
in SIGKILL, which leaves the scratch space and the partial disk to nobody."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fixtures.images import ImageFactory
from tests.importer.test_uploadserver import Server

CHUNK = 64 * 1024


@pytest.mark.parametrize("name", ["qcow2", "raw"])
def test_sigterm_mid_upload_ends_the_server_while_the_client_still_sends(
        tmp_path: Path, images: ImageFactory, name: str) -> None:
    data = images.get(name).path.read_bytes()
    server = Server(tmp_path)
    sent = threading.Event()
    stop_sending = threading.Event()
    chunks_sent = [0]

    def slow() -> Iterator[bytes]:
        # the whole body would take len/CHUNK × 0.25 s (minutes): the server must not
        # wait for it
        for i in range(0, len(data), CHUNK):
            yield data[i:i + CHUNK]
            chunks_sent[0] += 1
            sent.set()
            if stop_sending.wait(0.25):
                return

    outcome: list[object] = []

    def go() -> None:
        try:
            outcome.append(server.post("/v1beta1/upload", slow()).status_code)
        except requests.RequestException as err:
            outcome.append(err)

    client = threading.Thread(target=go)
    client.start()
    try:
        assert sent.wait(30)
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=60)
        left = len(data) // CHUNK - chunks_sent[0]
        assert left > 20, f"the server waited for the client: {left} chunks were left"
    finally:
        stop_sending.set()
        client.join(timeout=60)
        server.stop()
    assert code == 1  # retryable: a new pod takes the upload again
    assert server.termination_message()["reason"] == "Interrupted"
    assert list(server.scratch.iterdir()) == []
    assert not server.dest.exists() or server.dest.stat().st_blocks == 0
