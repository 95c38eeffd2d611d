"""The WebSocket channel protocol's pure parts: negotiation, frames, resize, results."""

from __future__ import annotations

import json

import pytest

from localcluster.apiserver.streams import channels


@pytest.mark.parametrize(("offered", "chosen"), [
    (["v5.channel.k8s.io", "v4.channel.k8s.io"], channels.V5),
    ([" v4.channel.k8s.io", "v3.channel.k8s.io "], channels.V4),
    (["channel.k8s.io"], channels.V1),
    (["base64.channel.k8s.io"], None),
    ([""], None),
])
def test_choose_protocol(offered: list[str], chosen: str | None) -> None:
    assert channels.choose_protocol(offered) == chosen


def test_frames() -> None:
    assert channels.frame(channels.STDOUT, b"hi") == b"\x01hi"
    assert channels.parse(b"\x00abc") == channels.Message(0, b"abc")
    assert channels.parse(b"") is None
    assert channels.parse(b"\xff\x00") == channels.Message(channels.CLOSE, b"\x00")


@pytest.mark.parametrize(("data", "size"), [
    (b'{"Width": 80, "Height": 24}', (80, 24)),
    (b'{"Width": 0, "Height": 24}', None),
    (b'{"Width": "x"}', None),
    (b"not json", None),
    (b"[1, 2]", None),
])
def test_parse_resize(data: bytes, size: tuple[int, int] | None) -> None:
    assert channels.parse_resize(data) == size


def test_results_per_protocol() -> None:
    ok = channels.result_frame(channels.V5, exit_code=0, command=["true"])
    assert ok is not None and json.loads(ok[1:]) == {"metadata": {}, "status": "Success"}
    failed = channels.result_frame(channels.V4, exit_code=3, command=["sh", "-c", "exit 3"])
    assert failed is not None and failed[0] == channels.ERROR
    status = json.loads(failed[1:])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert channels.result_frame(channels.V2, exit_code=0, command=["true"]) is None
    text = channels.result_frame(channels.V1, exit_code=2, command=["false"])
    assert text == b"\x03command terminated with non-zero exit code: exit code 2"
    err = channels.result_frame(channels.V5, exit_code=None, command=["x"], error="boom")
    assert err is not None and json.loads(err[1:])["message"] == "boom"
