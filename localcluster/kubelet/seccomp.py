"""The runtime's default seccomp filter, compiled to BPF for bubblewrap's ``--seccomp``.

What it refuses is Docker/containerd's default profile read the other way round: the
system calls that profile only allows with a capability (mount needs CAP_SYS_ADMIN,
module loading CAP_SYS_MODULE…) fail with EPERM unless the container holds that
capability, and the ones it never allows (keyctl, userfaultfd, io_uring…) always fail.
Two deliberate differences, both stricter:

- it is a deny list with everything else allowed (containerd's is an allow list); the
  calls refused are the dangerous ones, the rest are ordinary;
- ``mknod``/``mknodat`` of a block or character device fail with EPERM even with
  CAP_MKNOD (FIFOs and sockets still work): a pod's devices are the ones it was given,
  and every writable mount in the sandbox is ``nodev`` besides.

System calls of another ABI (32-bit ``int 0x80``, x32) kill the process: the filter is
for the native architecture only (libseccomp's bad-architecture default).

``clone`` with a namespace flag fails with EPERM; ``clone3`` (whose flags a filter cannot
see) fails with ENOSYS so that libc falls back to ``clone``, as Docker's profile does.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from collections.abc import Iterable

CLONE_NAMESPACE_FLAGS: tuple[int, ...] = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)

S_IFMT = 0o170000
DEVICE_TYPES: tuple[int, ...] = (0o060000, 0o020000)  # S_IFBLK, S_IFCHR

ALWAYS_DENIED: tuple[str, ...] = (
    "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "kexec_load", "kexec_file_load", "open_by_handle_at",
    "lookup_dcookie", "nfsservctl", "uselib", "_sysctl", "create_module",
    "get_kernel_syms", "query_module", "vm86", "vm86old",
)
"""Never allowed by the runtime default profile, whatever the capabilities."""

DENIED_WITHOUT: dict[str, tuple[str, ...]] = {
    "SYS_ADMIN": ("mount", "umount", "umount2", "pivot_root", "unshare", "setns",
                  "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
                  "mount_setattr", "fanotify_init", "name_to_handle_at", "quotactl",
                  "quotactl_fd", "setdomainname", "sethostname", "swapon", "swapoff"),
    "SYS_MODULE": ("init_module", "finit_module", "delete_module"),
    "SYS_BOOT": ("reboot",),
    "SYS_PACCT": ("acct",),
    "SYS_RAWIO": ("iopl", "ioperm"),
    "SYS_TIME": ("settimeofday", "stime", "clock_settime", "clock_adjtime"),
    "SYS_TTY_CONFIG": ("vhangup",),
    "SYS_NICE": ("get_mempolicy", "set_mempolicy", "mbind", "set_mempolicy_home_node"),
    "SYSLOG": ("syslog",),
    "BPF": ("bpf",),
    "PERFMON": ("perf_event_open",),
}
"""System calls refused unless the container holds the capability (the key); ``bpf``
and ``perf_event_open`` are also allowed by SYS_ADMIN, as in Docker's profile."""

_ALSO_BY_SYS_ADMIN = {"BPF", "PERFMON", "SYSLOG"}


def denied_syscalls(caps: Iterable[str]) -> tuple[str, ...]:
    """The system calls refused (EPERM) for a container holding ``caps``."""
    held = set(caps)
    out = list(ALWAYS_DENIED)
    for cap, calls in DENIED_WITHOUT.items():
        if cap in held or (cap in _ALSO_BY_SYS_ADMIN and "SYS_ADMIN" in held):
            continue
        out += calls
    return tuple(sorted(set(out)))


def restricts_namespaces(caps: Iterable[str]) -> bool:
    """Whether ``clone`` with namespace flags is refused (it is, without SYS_ADMIN)."""
    return "SYS_ADMIN" not in set(caps)


@functools.lru_cache(maxsize=16)
def compile_filter(caps: frozenset[str]) -> bytes:
    """The BPF program (libseccomp, through pyseccomp) of the default filter for
    ``caps``; cached, as a node compiles the same few filters over and over."""
    import pyseccomp as sc  # ctypes over the system's libseccomp2

    filt = sc.SyscallFilter(sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    arch = sc.system_arch()

    def known(name: str) -> bool:
        try:
            return bool(sc.resolve_syscall(arch, name) >= 0)
        except (ValueError, OSError):
            return False

    for name in denied_syscalls(caps):
        if known(name):
            filt.add_rule(eperm, name)
    for name, arg in (("mknod", 1), ("mknodat", 2)):
        for kind in DEVICE_TYPES:
            filt.add_rule(eperm, name, sc.Arg(arg, sc.MASKED_EQ, S_IFMT, kind))
    if restricts_namespaces(caps):
        for flag in CLONE_NAMESPACE_FLAGS:
            filt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as fh:
        filt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def filter_fd(caps: frozenset[str]) -> int:
    """A readable fd (a pipe's read end, already filled) holding the compiled filter,
    for ``bwrap --seccomp FD``; the caller closes it once bwrap has started."""
    program = compile_filter(caps)
    r, w = os.pipe()
    try:
        os.write(w, program)
    finally:
        os.close(w)
    return r
