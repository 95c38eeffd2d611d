"""Quantities and volume size math: the one home for both, at the bottom of the project.

Everything that turns "10Gi" into bytes, or a DataVolume's size into a claim's size, lives
here: the importer (in the pod), the CDI controllers and localcluster all import it, and
it imports nothing of the project. Exact arithmetic only (integers, Decimal, Fraction).
"""

from sizes.quantity import (
    format_bytes,
    format_quantity,
    is_binary,
    parse_bytes,
    parse_decimal,
    parse_quantity,
    to_millis,
)
from sizes.space import (
    ALIGNMENT,
    DEFAULT_OVERHEAD,
    MIB,
    align_down,
    align_up,
    format_overhead,
    parse_overhead,
    required_space,
    usable_space,
)

__all__ = [
    "ALIGNMENT",
    "DEFAULT_OVERHEAD",
    "MIB",
    "align_down",
    "align_up",
    "format_bytes",
    "format_overhead",
    "format_quantity",
    "is_binary",
    "parse_bytes",
    "parse_decimal",
    "parse_overhead",
    "parse_quantity",
    "required_space",
    "to_millis",
    "usable_space",
]
