"""Image sources behind one protocol (``base.Source``), one module each, chosen from
``SOURCES`` by the config's source kind — adding a source is one module and one entry."""

from __future__ import annotations

from importer.config import ImporterConfig, SourceKind
from importer.sources.base import Source, SourceFactory
from importer.sources.blank import BlankSource
from importer.sources.http import HTTPSource
from importer.sources.s3 import S3Source

SOURCES: dict[SourceKind, SourceFactory] = {
    SourceKind.HTTP: HTTPSource,
    SourceKind.S3: S3Source,
    SourceKind.BLANK: BlankSource,
}


def open_source(config: ImporterConfig) -> Source:
    return SOURCES[config.source](config)
