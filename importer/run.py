"""One import, start to finish: open the source, run the phases, report.

Shared by both front doors (``python -m importer`` in a pod, ``rootdisk import`` in a
shell); they differ only in where the config comes from and who listens to progress.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from importer import children
from importer.config import ImporterConfig
from importer.errors import ImporterError, Interrupted
from importer.processor import Processor, Result
from importer.progress import Listener, Progress
from importer.sources import open_source
from importer.termination import EXIT_OK, EXIT_PERMANENT, EXIT_RETRYABLE, message, write
from importer.watchdog import Rule, Watchdog, armed

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    result: Result | None
    error: ImporterError | None
    termination: bytes


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM (kubelet stop, ``timeout``) and SIGINT (Ctrl-C) become ``Interrupted`` in
    the main thread, so the import unwinds as for any failure: children stopped, temp
    directories (header file included) removed, the destination wiped. Later signals are
    ignored until the unwinding is done. Off the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise Interrupted(f"import stopped by {signal.Signals(signum).name}; nothing kept")

    previous = {each: signal.signal(each, interrupt) for each in STOP_SIGNALS}
    try:
        yield
    finally:
        children.stop_all()
        for each, handler in previous.items():
            signal.signal(each, handler)


def run(config: ImporterConfig, *, listeners: list[Listener] | None = None) -> Outcome:
    metric = None
    if config.metrics_port is not None:
        from importer.metrics import ProgressMetric  # prometheus_client is slow to import

        metric = ProgressMetric(owner_uid=config.owner_uid, port=config.metrics_port,
                                addr=config.metrics_addr)
    progress = Progress([*([metric] if metric else []), *(listeners or [])])
    try:
        rule = Rule(min_bytes=config.stall_min_bytes, window=config.stall_window,
                    deadline=config.deadline, started=time.monotonic())
        with stopped_by_signals(), \
                armed(Watchdog(rule, time.monotonic),
                      interval=min(1.0, config.stall_window / 4)) as watchdog:
            source = open_source(config)
            try:
                result = Processor(config, source, progress, watchdog=watchdog).run()
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
