"""Image sources behind one protocol (``base.Source``), one module per kind declared in
``vocab.sources``: ``importer/sources/<kind>.py`` is the kind's reader. A reader module
defines ``open_source(config) -> Source`` and may define ``check_url(url, *, field_name)``
(what its URLs must look like beyond their scheme; without it a host is required) and
``check_config(config)`` (its own settings, ``ImporterConfig.options``). Adding a source
to the importer is its declaration and this one module.

The module is imported when its kind is used, so a run imports only the client it needs
(boto3 alone takes longer to import than an HTTP import's whole set-up).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

from vocab import sources

if TYPE_CHECKING:
    from importer.config import ImporterConfig
    from importer.sources.base import Source, SourceFactory


class URLCheck(Protocol):
    def __call__(self, url: str, *, field_name: str) -> None: ...


def reader(kind: str) -> ModuleType:
    """The reader module of a declared kind (KeyError for any other)."""
    if kind not in sources.DECLARATIONS:
        raise KeyError(kind)
    return importlib.import_module(f"{__name__}.{kind}")


def source_factory(kind: str) -> SourceFactory:
    return cast("SourceFactory", reader(kind).open_source)


def url_check(kind: str) -> URLCheck | None:
    return cast("URLCheck | None", getattr(reader(kind), "check_url", None))


def check_config(config: ImporterConfig) -> None:
    check = cast("Callable[[ImporterConfig], None] | None",
                 getattr(reader(config.source), "check_config", None))
    if check is not None:
        check(config)


def open_source(config: ImporterConfig) -> Source:
    return source_factory(config.source)(config)
