"""Helpers for importer tests: run one import in-process with fast retries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from importer.config import ContentType, ImporterConfig, SourceKind
from importer.progress import Listener
from importer.run import Outcome, run

ImportFn = Callable[..., Outcome]


@pytest.fixture
def do_import(tmp_path: Path) -> ImportFn:
    """``do_import(url, dest, **config fields)``: an import with retries 10 ms apart."""

    def go(url: str, dest: Path, *, listeners: list[Listener] | None = None,
           **fields: Any) -> Outcome:
        fields.setdefault("source", SourceKind.S3 if url.startswith("s3:") else SourceKind.HTTP)
        fields.setdefault("retry_delay", 0.01)
        fields.setdefault("metrics_port", None)
        fields.setdefault("termination_log", tmp_path / "termination-log")
        fields.setdefault("content_type", ContentType.KUBEVIRT)
        return run(ImporterConfig(endpoint=url, dest=dest, **fields), listeners=listeners)

    return go
