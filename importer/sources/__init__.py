"""Image sources behind one protocol (``base.Source``), one module each, chosen from
``SOURCES`` by the config's source kind — adding a source is one module and one entry.

Entries name their class by import path, so a run imports only the client it needs
(boto3 alone takes longer to import than an HTTP import's whole set-up).
"""

from __future__ import annotations

import importlib

from importer.config import ImporterConfig, SourceKind
from importer.sources.base import Source, SourceFactory

SOURCES: dict[SourceKind, str] = {
    SourceKind.HTTP: "importer.sources.http:HTTPSource",
    SourceKind.S3: "importer.sources.s3:S3Source",
    SourceKind.REGISTRY: "importer.sources.registry:open_registry_source",
    SourceKind.BLANK: "importer.sources.blank:BlankSource",
}


def source_factory(kind: SourceKind) -> SourceFactory:
    module, _, name = SOURCES[kind].partition(":")
    factory: SourceFactory = getattr(importlib.import_module(module), name)
    return factory


def open_source(config: ImporterConfig) -> Source:
    return source_factory(config.source)(config)
