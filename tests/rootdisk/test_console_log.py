"""``rootdisk console --log`` on a terminal: the guest's control characters are shown,
not obeyed (a guest must not set the viewer's clipboard, or make the terminal type into
the viewer's shell by answering a report request); piped or ``--raw``, bytes as sent."""

from __future__ import annotations

import io
import os
import pty
import tty as termios_tty
from typing import Any

import pytest

from rootdisk import console

HOSTILE = (b"login: \x1b]52;c;cm0gLXJmIH4=\x07\x1b[21t\x1b[6n"  # clipboard, title/cursor reports
           b"\xc2\x9b31m\x9b0m\x07\x7f\x00"  # C1 CSI as UTF-8 and as a lone byte, BEL, DEL, NUL
           b" caf\xc3\xa9 \xff\tok\r\n")  # text, a byte that is not UTF-8, tab, CRLF


def test_control_characters_are_made_visible_and_the_rest_kept() -> None:
    shown = console.visible(HOSTILE)
    assert shown == (b"login: ^[]52;c;cm0gLXJmIH4=^G^[[21t^[[6n"
                     b"\\x9b31m\\x9b0m^G^?^@ caf\xc3\xa9 \xff\tok\r\n")
    assert not [b for b in shown if b < 0x20 and b not in b"\t\r\n"]
    assert b"\x9b" not in shown and b"\x7f" not in shown


class _Kube:
    """Stands in for the API client (a named fake: the log endpoint's answer only)."""

    class api:  # the attribute the CLI calls
        @staticmethod
        def call_api(*_: Any, **__: Any) -> Any:
            class Resp:
                data = HOSTILE
            return (Resp(),)

    @staticmethod
    def get_or_none(*_: Any) -> dict[str, Any]:
        return {"metadata": {"uid": "u1"}}

    @staticmethod
    def list(*_: Any, **__: Any) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "virt-launcher-x"}}]


@pytest.mark.parametrize(("tty", "raw", "escaped"), [
    (True, False, True), (True, True, False), (False, False, False)])
def test_print_log_escapes_only_on_a_terminal_unless_raw(
        monkeypatch: pytest.MonkeyPatch, tty: bool, raw: bool, escaped: bool) -> None:
    main, other = pty.openpty() if tty else os.pipe()
    if tty:
        termios_tty.setraw(other)  # no line discipline: the bytes as written
    try:
        out = io.TextIOWrapper(io.FileIO(other, "w", closefd=False))
        monkeypatch.setattr("sys.stdout", out)
        assert console.print_log(_Kube(), "ns", "vm", raw=raw) == 0  # type: ignore[arg-type]
        out.flush()
        assert out.isatty() is tty
    finally:
        os.close(other)
    got = b""
    while chunk := _read(main):
        got += chunk
    os.close(main)
    assert got == (console.visible(HOSTILE) if escaped else HOSTILE)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # a pty whose other end is closed
        return b""
