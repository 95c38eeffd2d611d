"""Errors of the local volume layer.

Everything raised on purpose by ``localcluster.storage`` derives from
:class:`StorageError`, so the provisioner can turn any of them into a claim Event
without catching unrelated bugs::

    StorageError
    ├── CommandError      a system tool (mkfs, losetup, mount…) failed; keeps argv and stderr
    ├── VolumeExists      create() of a name that is already taken
    ├── VolumeNotFound    an operation on a name that is not there
    ├── InvalidRequest    a request the volume layer refuses (bad size, mode mismatch…)
    └── StillInUse        a killed run's loop devices did not go away in time
"""

from __future__ import annotations

from collections.abc import Sequence


class StorageError(Exception):
    """Root of the storage errors."""


class CommandError(StorageError):
    """A system command failed; ``argv`` and ``stderr`` say which and why."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(self.argv)} exited {returncode}: {self.stderr}")


class VolumeExists(StorageError):
    """A volume of that name already exists."""


class VolumeNotFound(StorageError):
    """No volume of that name."""


class InvalidRequest(StorageError):
    """The request cannot be honoured as asked (the message names the field)."""


class StillInUse(StorageError):
    """Loop devices over this data dir's images are still attached after cleanup: processes
    of an earlier (killed) run hold them; attaching again would mount a filesystem twice."""
