"""The container log format: encoding output, reading it back with tail/since/timestamps."""

from __future__ import annotations

import datetime

from localcluster.kubelet import logformat

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(seconds=10)


def encode(*chunks: tuple[bytes, datetime.datetime], close: datetime.datetime = T1) -> bytes:
    enc = logformat.Encoder()
    return b"".join(enc.feed(c, t) for c, t in chunks) + enc.close(close)


def test_lines_partials_and_round_trip() -> None:
    data = encode((b"one\ntw", T0), (b"o\nthree", T1))
    assert data.splitlines() == [
        b"2026-01-01T12:00:00.123456000Z F one",
        b"2026-01-01T12:00:10.123456000Z F two",
        b"2026-01-01T12:00:10.123456000Z P three",
    ]
    assert logformat.plain(data) == b"one\ntwo\nthree"


def test_long_line_is_split_into_partial_records() -> None:
    data = encode((b"x" * (logformat.PARTIAL_MAX + 10), T0), (b"\n", T1))
    records = list(logformat.parse(data))
    assert [r.full for r in records] == [False, True]
    assert logformat.plain(data) == b"x" * (logformat.PARTIAL_MAX + 10) + b"\n"


def test_select_tail_since_and_timestamps() -> None:
    data = encode((b"a\nb\n", T0), (b"c\n", T1))
    records = list(logformat.parse(data))
    assert [r.text for r in logformat.select(records, tail_lines=2)] == [b"b", b"c"]
    assert logformat.select(records, tail_lines=0) == []
    assert [r.text for r in logformat.select(records, tail_lines=9)] == [b"a", b"b", b"c"]
    since = T0 + datetime.timedelta(seconds=5)
    assert [r.text for r in logformat.select(records, since=since)] == [b"c"]
    assert records[2].render(timestamps=True) == b"2026-01-01T12:00:10.123456000Z c\n"
    assert records[2].at() == T1


def test_torn_last_record_is_ignored() -> None:
    data = encode((b"a\n", T0)) + b"2026-01-01T12:00:00.1Z F unfinish"
    assert logformat.plain(data) == b"a\n"
