"""The VM side's errors. The tree::

    VmError                     root: everything vm/ raises on purpose
    ├── Refused                 (vm.api) a subresource request refused: ``code`` is the
    │                           HTTP status, the message upstream's words
    ├── BadOptions              (vm.api.pause) a pause/unpause body that does not parse
    ├── BadReview               (vm.webhooks.review) an AdmissionReview that is not one
    ├── InvalidRunStrategy      (vm.controller.runstrategy) a VM's run strategy is unknown
    ├── ResourceError           (vm.vmi.overhead) requests/limits that cannot be computed
    ├── DomainError             (vm.domain) a VMI that cannot become a domain
    │   └── UnsupportedError    …because rootdisk does not run that device or source
    └── LauncherError           (vm.launcher) the launcher failed: ``reason`` goes into the
                                VMI (see vm.launcher.errors for its own subtree)

Refusals at admission are problems returned by the rule modules, not exceptions; API
failures are ``kubeclient``'s errors.
"""

from __future__ import annotations


class VmError(Exception):
    """Root of the VM side's errors."""


class Refused(VmError):
    """A subresource request refused with an HTTP status and upstream's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
