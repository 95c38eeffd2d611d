"""A user namespace for one sandbox, mapping every uid and gid to itself.

bubblewrap makes the sandbox's mounts as root in the node's own user namespace, then
(``--userns2``) enters the namespace made here before it runs the container. The
container's capabilities then count only in that namespace: it keeps what they give over
its own files and processes (every id is mapped, so uid 0 is still the node's root for
file ownership and permissions), but holds none over the mount namespace bubblewrap
made, owned by the node's namespace: no mount, remount or unmount of anything there,
whatever ``capabilities.add`` says. A mount namespace it makes itself (``unshare -m``
with SYS_ADMIN) copies every mount locked (the kernel's MNT_LOCKED and
MNT_LOCK_READONLY): read-only stays read-only and a mask cannot be unmounted. Upstream's
closest is a pod with ``hostUsers: false``; there the ids are shifted, here they are not
(the volumes and the host's /usr keep their owners).

What a capability checked against the node's namespace gave is gone for such a
container: binding a port under 1024 (NET_BIND_SERVICE), raw sockets (NET_RAW), audit
messages (AUDIT_WRITE), as the network is the host's. ``privileged`` containers do not
get a namespace of their own.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

UNSHARE = "/usr/bin/unshare"
IDENTITY_MAP = "0 0 4294967295\n"
"""Every id mapped to itself (the whole 32-bit range)."""
READY_WITHIN = 5.0
"""Seconds the helper process has to enter its new namespace."""


class UsernsError(Exception):
    """The namespace could not be made."""


def _ns(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/user")


def identity_userns() -> int:
    """An O_RDONLY, close-on-exec descriptor of a new user namespace with the identity
    map; the caller closes it. A short-lived ``unshare --user`` process holds the
    namespace while its maps are written and the descriptor is opened."""
    own = _ns("self")
    try:
        holder = subprocess.Popen([UNSHARE, "--user", "--", "cat"],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, close_fds=True)
    except OSError as err:
        raise UsernsError(f"cannot run {UNSHARE}: {err}") from err
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            try:
                if _ns(holder.pid) != own:
                    break
            except OSError as err:
                raise UsernsError(f"user namespace helper vanished: {err}") from err
            if holder.poll() is not None or time.monotonic() > deadline:
                err_text = holder.stderr.read().decode(errors="replace").strip() \
                    if holder.stderr else ""
                raise UsernsError(f"no new user namespace: {err_text or 'timed out'}")
            time.sleep(0.002)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w", encoding="ascii") as fh:
                fh.write(IDENTITY_MAP)
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise UsernsError(f"cannot set up the user namespace: {err}") from err
    finally:
        if holder.stdin is not None:
            with contextlib.suppress(OSError):
                holder.stdin.close()
        try:
            holder.wait(READY_WITHIN)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        if holder.stderr is not None:
            holder.stderr.close()
