"""Errors of the launcher, and libvirt's error codes as predicates.

Why it exists: the launcher's failure reason goes into the termination message and from
there into the VMI; each error says what failed in words a user can act on. Tree::

    LauncherError               reason (a CamelCase word for the VMI), message
    ├── ConfigError             the environment or arguments are wrong (names the variable)
    ├── DiskError               a volume is missing, unreadable or cannot be created
    └── DriverError             QEMU or libvirtd could not be started or driven

The libvirt predicates take any exception and look at its ``get_error_code()`` (libvirt's
``libvirtError``) without importing libvirt here, so callers stay free of the binding.
"""

from __future__ import annotations

from typing import Any

from vm.errors import VmError


class LauncherError(VmError):
    reason = "LaunchFailed"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if reason:
            self.reason = reason


class ConfigError(LauncherError):
    reason = "InvalidConfiguration"


class DiskError(LauncherError):
    reason = "DiskError"


class DriverError(LauncherError):
    reason = "DriverError"


# libvirt's virErrorNumber values (libvirt/virterror.h), stable across releases.
VIR_ERR_OPERATION_INVALID = 55
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_SYSTEM_ERROR = 38
VIR_ERR_XML_ERROR = 27
VIR_ERR_CONFIG_UNSUPPORTED = 67


def _code(err: BaseException) -> int | None:
    get: Any = getattr(err, "get_error_code", None)
    if get is None:
        return None
    code = get()
    return code if isinstance(code, int) else None


def is_not_found(err: BaseException) -> bool:
    return _code(err) == VIR_ERR_NO_DOMAIN


def is_invalid_operation(err: BaseException) -> bool:
    """e.g. destroying a domain that is not running any more."""
    return _code(err) == VIR_ERR_OPERATION_INVALID


def is_bad_definition(err: BaseException) -> bool:
    """The domain XML was refused (malformed, or asks for what this host cannot do)."""
    return _code(err) in (VIR_ERR_XML_ERROR, VIR_ERR_CONFIG_UNSUPPORTED)
