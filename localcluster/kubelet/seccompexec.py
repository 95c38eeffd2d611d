"""Install a seccomp filter read from a file descriptor, then exec the command.

``python -I -S seccompexec.py FD -- COMMAND...``: run inside a pod's namespaces for
``kubectl exec``, after setpriv has taken the container's identity and set
no_new_privs, so the exec'd command is under the same default filter as the container
(bubblewrap installs it for the container itself). Standard library only: it runs with
``-I -S`` in the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    if not program or len(program) % 8:
        raise ValueError("not a BPF program")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: seccompexec.py FD -- COMMAND...", file=sys.stderr)
        return 127
    fd = int(argv[0])
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    install(b"".join(chunks))
    try:
        os.execvp(argv[2], argv[2:])  # noqa: S606 - the command kubectl asked for
    except OSError as err:
        print(f"exec {argv[2]}: {err.strerror}", file=sys.stderr)
        return 126 if err.errno == 13 else 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
