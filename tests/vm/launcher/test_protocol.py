"""Control requests: parsed, bounded, refused with a reason; answers; termination message."""

from __future__ import annotations

import json

import pytest

from vm.launcher import protocol, termination
from vm.launcher.protocol import BadRequest, Request, parse_request


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"cmd":"status"}\n', Request("status")),
        (b'{"cmd":"kill"}', Request("kill")),
        (b'{"cmd":"shutdown"}\n', Request("shutdown", None)),
        (b'{"cmd":"shutdown","gracePeriodSeconds":0}\n', Request("shutdown", 0)),
        (b'{"cmd":"shutdown","gracePeriodSeconds":30}\n', Request("shutdown", 30)),
        (b'{"cmd":"console"}\n', Request("console")),
    ],
)
def test_good_requests(line: bytes, expected: Request) -> None:
    assert parse_request(line=line) == expected


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b'{"cmd":"reboot"}', "unknown command"),
        (b'{"cmd":5}', "unknown command"),
        (b"{}", "unknown command"),
        (b"[]", "JSON object"),
        (b"nope", "not a JSON line"),
        (b"\xff\xfe", "not a JSON line"),
        (b'{"cmd":"shutdown","gracePeriodSeconds":"5"}', "gracePeriodSeconds: must be an integer"),
        (b'{"cmd":"shutdown","gracePeriodSeconds":true}', "gracePeriodSeconds: must be an integer"),
        (b'{"cmd":"shutdown","gracePeriodSeconds":-1}', "gracePeriodSeconds: must be between"),
        (
            b'{"cmd":"shutdown","gracePeriodSeconds":99999999}',
            "gracePeriodSeconds: must be between",
        ),
        (b'{"cmd":"status","pad":"' + b"x" * 5000 + b'"}', "longer than 4096"),
    ],
)
def test_bad_requests(line: bytes, words: str) -> None:
    got = parse_request(line=line)
    assert isinstance(got, BadRequest)
    assert words in got.error


def test_status_answer_shape() -> None:
    status = protocol.Status(
        state="running",
        reason="Booted",
        driver="qemu",
        accelerator="tcg",
        started_at="2026-01-01T00:00:00Z",
    )
    assert json.loads(protocol.encode(status.to_json())) == {
        "state": "running",
        "reason": "Booted",
        "driver": "qemu",
        "accelerator": "tcg",
        "startedAt": "2026-01-01T00:00:00Z",
    }
    assert protocol.encode(protocol.ok()).endswith(b"\n")


def test_termination_message_fits_4096_bytes_and_stays_json() -> None:
    outcome = termination.Outcome("Failed", "Crashed", "é" * 10000)
    data = termination.encode(outcome, extra={"driver": "qemu"})
    assert len(data) <= 4096
    body = json.loads(data)
    assert body["phase"] == "Failed" and body["reason"] == "Crashed" and body["driver"] == "qemu"
    assert body["message"].endswith("…")
    assert termination.Outcome("Succeeded", "GuestShutdown").exit_code == 0
    assert outcome.exit_code == 1
