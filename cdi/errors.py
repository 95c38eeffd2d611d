"""The CDI controllers' errors. The tree::

    CdiError                root: everything cdi/ raises on purpose
    ├── RenderError         (cdi.render) a DataVolume cannot be turned into its claim as
    │                       it stands: ``reason`` is the DataVolume's condition reason
    │                       (ErrClaimNotValid, StorageClassNotFound…), the message says why
    ├── CloneError          (cdi.clone) a clone cannot go ahead: the source is missing,
    │                       too large, in another volume mode…; ``reason`` as above
    └── TokenError          (cdi.uploadtoken) an upload token is not valid for this upload

Refusals at admission are not exceptions: ``cdi.validate`` returns the problems, each
``field: message`` as upstream words it. API failures are ``kubeclient``'s errors.
"""

from __future__ import annotations


class CdiError(Exception):
    """Root of the CDI controllers' errors."""
