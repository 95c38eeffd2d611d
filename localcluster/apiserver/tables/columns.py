"""Table column definitions and Kubernetes' age formatting, shared by the printers.

Ages are rendered as kube-apiserver renders them (``45s``, ``3m20s``, ``5h``, ``3d4h``),
so ``kubectl get`` shows the same AGE column against this server as against a real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Column:
    """A TableColumnDefinition."""

    name: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    format: str = ""

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


NAME_COLUMN = Column("Name", "string", "Name must be unique within a namespace. Is required "
                     "when creating resources, although some resources may allow a client to "
                     "request the generation of an appropriate name automatically.", 0, "name")
AGE = Column("Age", "string", "CreationTimestamp is a timestamp representing the server time "
             "when this object was created.")


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 timestamp, or None."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def human_age(when: datetime, now: datetime) -> str:
    """Kubernetes' short human duration: 45s, 3m20s, 5h, 3d4h, 2y10d."""
    seconds = int((now - when).total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years, rest = days // 365, days % 365
    if hours < 24 * 365 * 8:
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"
