"""Errors of the domain model.

Why it exists: a VMI the launcher cannot turn into a domain must say which field is wrong
and why, because that text becomes the VMI's failure reason. Tree::

    DomainError            (field, message)
    └── UnsupportedError   a valid upstream field this runtime does not implement
"""

from __future__ import annotations

from vm.errors import VmError


class DomainError(VmError, ValueError):
    """A VMI field that cannot become part of a domain."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnsupportedError(DomainError):
    """Valid for upstream KubeVirt, not implemented here."""
