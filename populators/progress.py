"""Import progress from the importer's Prometheus text (pure): the same metric, label
and "NN.NN%" rendering as upstream's controller, so the DataVolume shows what CDI's
would."""

from __future__ import annotations

import re

IMPORT_METRIC = "kubevirt_cdi_import_progress_total"
DONE = "100.0%"


def parse(text: str, *, metric: str, owner_uid: str) -> float | None:
    """The percentage for ``owner_uid`` in a /metrics body, None when absent."""
    pattern = re.compile(
        rf'^{re.escape(metric)}\{{ownerUID="{re.escape(owner_uid)}"\}} (\d{{1,3}}(?:\.\d*)?'
        r"(?:[eE][+-]?\d+)?)\s*$", re.MULTILINE)
    m = pattern.search(text)
    if m is None:
        return None
    value = float(m.group(1))
    return min(max(value, 0.0), 100.0)


def render(percent: float) -> str:
    return f"{percent:.2f}%"
