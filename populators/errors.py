"""The populators' errors. The tree::

    PopulatorError          root: everything the populators raise on purpose
    └── SourceError         a VolumeImportSource / VolumeUploadSource / VolumeCloneSource
                            (or the claim it serves) cannot be used as written; the
                            message names the object and the field. The flow turns it into
                            the target's Failed annotations and a Warning Event.

API failures are ``kubeclient``'s errors (``KubeError`` and its tree), raised by the
client the reconcilers call, never by the decisions.
"""

from __future__ import annotations


class PopulatorError(Exception):
    """Root of the populators' errors."""


class SourceError(PopulatorError, ValueError):
    """The source cannot be used as written; the message names the field."""
