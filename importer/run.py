"""One import, start to finish: open the source, run the phases, report.

Shared by both front doors (``python -m importer`` in a pod, ``rootdisk import`` in a
shell); they differ only in where the config comes from and who listens to progress.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from importer.config import ImporterConfig
from importer.errors import ImporterError
from importer.processor import Processor, Result
from importer.progress import Listener, Progress
from importer.sources import open_source
from importer.termination import message, write

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_RETRYABLE = 1
EXIT_PERMANENT = 2


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    result: Result | None
    error: ImporterError | None
    termination: bytes


def run(config: ImporterConfig, *, listeners: list[Listener] | None = None) -> Outcome:
    metric = None
    if config.metrics_port is not None:
        from importer.metrics import ProgressMetric  # prometheus_client is slow to import

        metric = ProgressMetric(owner_uid=config.owner_uid, port=config.metrics_port,
                                addr=config.metrics_addr)
    progress = Progress([*([metric] if metric else []), *(listeners or [])])
    try:
        source = open_source(config)
        try:
            result = Processor(config, source, progress).run()
        finally:
            source.close()
    except ImporterError as err:
        logger.error("import failed (%s): %s", err.reason, err.message)
        data = message(reason=err.reason, text=err.message, retryable=err.retryable)
        write(config.termination_log, data)
        code = EXIT_RETRYABLE if err.retryable else EXIT_PERMANENT
        return Outcome(code, None, err, data)
    finally:
        if metric is not None:
            metric.close()
    data = message(reason="Completed", text="Import Complete", retryable=False,
                   **result.as_dict())
    write(config.termination_log, data)
    return Outcome(EXIT_OK, result, None, data)
