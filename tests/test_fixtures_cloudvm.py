"""The cloud-guest fixture's SSH retries only a connection the server dropped before
authentication (cloud-init restarts sshd as it ends), and a bounded number of times."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from tests.fixtures import cloudvm
from tests.fixtures.cloudvm import SSH_DROP_ATTEMPTS, CloudVM, dropped_before_auth, keypair


def test_an_ssh_connection_dropped_before_auth_is_retried_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cloudvm, "SSH_DROP_WAIT", 0.0)
    key, _ = keypair(tmp_path)
    server = socket.create_server(("127.0.0.1", 0))  # closes every connection unanswered
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    vm = CloudVM(tmp_path / "none.qcow2", tmp_path / "none.iso", tmp_path)
    vm.ssh_port = server.getsockname()[1]
    try:
        done = vm.ssh(key, "tester", "true", timeout=30)
    finally:
        server.close()
        thread.join(timeout=10)
    assert done.returncode == 255
    assert "kex_exchange_identification" in done.stderr
    assert len(accepted) == SSH_DROP_ATTEMPTS  # retried, and bounded


def test_a_refused_key_or_a_failed_command_is_not_retried() -> None:
    refused = subprocess.CompletedProcess(
        ["ssh"], 255, "", "tester@127.0.0.1: Permission denied (publickey).\n"
    )
    dropped = subprocess.CompletedProcess(
        ["ssh"], 255, "", "kex_exchange_identification: read: Connection reset by peer\n"
    )
    failed = subprocess.CompletedProcess(["ssh"], 1, "kex_exchange_identification:", "")
    starved = subprocess.CompletedProcess(
        ["ssh"], 255, "", "Connection timed out during banner exchange\n")
    assert not dropped_before_auth(refused)
    assert dropped_before_auth(dropped)
    assert dropped_before_auth(starved)
    assert not dropped_before_auth(failed)
