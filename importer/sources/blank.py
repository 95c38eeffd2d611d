"""The blank source: no bytes at all. The processor makes an empty disk of the volume's
usable size (a sparse file, or a zeroed device)."""

from __future__ import annotations

from collections.abc import Iterator

from importer.config import ImporterConfig
from importer.errors import ConfigError
from importer.sources.base import Probe
from vocab import podenv


def check_config(config: ImporterConfig) -> None:
    if config.image_size is None:
        raise ConfigError(f"{podenv.IMAGE_SIZE}: a blank volume needs a size")


def open_source(config: ImporterConfig) -> BlankSource:
    return BlankSource(config)


class BlankSource:
    def __init__(self, config: ImporterConfig) -> None:
        self.config = config

    def probe(self) -> Probe:
        return Probe(size=0, ranged=True, head=b"")

    def read_range(self, start: int, length: int) -> bytes:
        return bytes(length)

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        return iter(())

    def fork(self) -> BlankSource:
        return self

    def close(self) -> None:
        pass
