"""The on-disk format of container logs, and reading it back (pure).

Like the CRI log format, every record is one line ``<RFC3339Nano time> <F|P> <text>``:
``F`` ends a line of the container's output, ``P`` is a piece of a longer line (or the
unterminated end of the output). The times make ``kubectl logs --timestamps`` and
``--since`` possible; readers strip them otherwise.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

PARTIAL_MAX = 16 * 1024
"""Bytes of an unterminated line buffered before they are written as a ``P`` record."""


def timestamp(when: datetime.datetime) -> bytes:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()


@dataclass(frozen=True)
class Record:
    time: bytes
    full: bool
    text: bytes

    def render(self, *, timestamps: bool) -> bytes:
        body = self.text + (b"\n" if self.full else b"")
        return self.time + b" " + body if timestamps else body

    def at(self) -> datetime.datetime:
        raw = self.time.decode()[:26]  # drop nanoseconds beyond micro and the Z
        return datetime.datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.UTC)


class Encoder:
    """Turns output chunks into records, keeping an unterminated line until it ends."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes, now: datetime.datetime) -> bytes:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        ts = timestamp(now)
        out = b"".join(ts + b" F " + line + b"\n" for line in lines)
        while len(self._pending) > PARTIAL_MAX:
            piece, self._pending = self._pending[:PARTIAL_MAX], self._pending[PARTIAL_MAX:]
            out += ts + b" P " + piece + b"\n"
        return out

    def close(self, now: datetime.datetime) -> bytes:
        rest, self._pending = self._pending, b""
        return timestamp(now) + b" P " + rest + b"\n" if rest else b""


def parse(data: bytes) -> Iterator[Record]:
    """Records of complete record lines in ``data`` (a torn last line is skipped)."""
    for line in data.split(b"\n")[:-1]:
        time, _, rest = line.partition(b" ")
        tag, _, text = rest.partition(b" ")
        yield Record(time=time, full=tag != b"P", text=text)


def select(records: Iterable[Record], *, tail_lines: int | None = None,
           since: datetime.datetime | None = None) -> list[Record]:
    """The records ``kubectl logs --tail/--since`` shows."""
    chosen = [r for r in records if since is None or r.at() >= since]
    if tail_lines is None:
        return chosen
    if tail_lines <= 0:
        return []
    lines = 0
    for i in range(len(chosen) - 1, -1, -1):
        if chosen[i].full:
            lines += 1
            if lines > tail_lines:
                return chosen[i + 1:]
    return chosen


def plain(data: bytes) -> bytes:
    """The output as the container wrote it."""
    return b"".join(r.render(timestamps=False) for r in parse(data))
