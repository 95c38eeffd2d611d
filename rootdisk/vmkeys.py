"""The well-known place of a VM's SSH key on this machine, which ``rootdisk ssh`` uses
when no ``-i`` is given: ``<rootdisk up's data dir>/ssh/<namespace>/<vm>/id_ed25519``
(the data dir is ``$XDG_STATE_HOME/rootdisk``, by default ``~/.local/state/rootdisk``).

A key is used only if it is there, a regular file (not a symlink) of this user, readable
by no one else (0600 or 0400); a key that others could read is refused with a message
rather than used or silently changed.
"""

from __future__ import annotations

import os
import stat


class UnusableKey(Exception):
    """The key is there but cannot be used; the message says why and what to do."""


def key_path(data_dir: str, namespace: str, name: str) -> str:
    return os.path.join(data_dir, "ssh", namespace, name, "id_ed25519")


def find_key(data_dir: str, namespace: str, name: str) -> str | None:
    return _private_file(key_path(data_dir, namespace, name))


def find_known_hosts(data_dir: str, namespace: str, name: str) -> str | None:
    """The VM's ``known_hosts`` beside its key (its host key, as whoever made the VM put
    it there: ``make demo`` does), held to the same rules as the key: ``rootdisk ssh``
    then trusts that host key for this VM and no other."""
    return _private_file(os.path.join(os.path.dirname(key_path(data_dir, namespace, name)),
                                      "known_hosts"))


def _private_file(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise UnusableKey(f"{path}: not a regular file (a symlink or other); not used")
    if st.st_uid != os.geteuid():
        raise UnusableKey(f"{path}: owned by uid {st.st_uid}, not by you; not used")
    if st.st_mode & 0o077:
        raise UnusableKey(f"{path}: others may read it (mode {stat.S_IMODE(st.st_mode):04o}); "
                          "run chmod 600 on it")
    return path
