"""Each package's errors derive from its root (docs in cdi/errors.py, vm/errors.py,
populators/errors.py, importer/errors.py), so a caller can catch a package's failures
without catching unrelated bugs."""

from __future__ import annotations

import pytest

from cdi.clone import CloneError
from cdi.errors import CdiError
from cdi.render import RenderError
from cdi.uploadtoken import TokenError
from importer.errors import ConfigError, ImporterError
from populators import flow, import_source
from populators.errors import PopulatorError, SourceError
from vm.api.pause import BadOptions
from vm.controller.runstrategy import InvalidRunStrategy
from vm.domain.errors import DomainError, UnsupportedError
from vm.errors import Refused, VmError
from vm.launcher.errors import LauncherError
from vm.vmi.overhead import ResourceError
from vm.webhooks.review import BadReview


@pytest.mark.parametrize(("error", "root"), [
    (RenderError, CdiError), (CloneError, CdiError), (TokenError, CdiError),
    (SourceError, PopulatorError),
    (Refused, VmError), (BadOptions, VmError), (BadReview, VmError),
    (InvalidRunStrategy, VmError), (ResourceError, VmError), (DomainError, VmError),
    (UnsupportedError, VmError), (LauncherError, VmError),
    (ConfigError, ImporterError),
])
def test_every_error_has_its_package_root(error: type[Exception], root: type[Exception]
                                          ) -> None:
    assert issubclass(error, root)


def test_the_populators_have_one_source_error() -> None:
    assert not hasattr(flow, "SourceError") or flow.SourceError is SourceError
    assert not hasattr(import_source, "SourceError") or import_source.SourceError is SourceError
