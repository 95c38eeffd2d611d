"""Kubernetes resource quantities ("1Gi", "1.5G", "512M", "100m") as integers (pure).

localcluster is a generic cluster and imports nothing from the project's CDI side, so
it carries its own small parser. Exact arithmetic with Decimal; fractional bytes round
up, as the API server does for storage requests.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|[kMGTPE]i?|Ki)?$")


def parse(text: str | int) -> Decimal:
    """The exact value of a quantity; ValueError names what is wrong."""
    if isinstance(text, int):
        return Decimal(text)
    m = _QUANTITY.match(str(text).strip())
    if not m or (m.group(2) or "") not in {*_SUFFIX, "m"}:
        raise ValueError(f"invalid quantity {text!r}")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}") from None
    suffix = m.group(2) or ""
    if suffix == "m":
        return number / 1000
    return number * _SUFFIX[suffix]


def to_bytes(text: str | int) -> int:
    """A storage quantity in whole bytes (rounded up)."""
    return math.ceil(parse(text))


def to_millis(text: str | int) -> int:
    """A CPU quantity in thousandths of a CPU (rounded up)."""
    return math.ceil(parse(text) * 1000)


def format_bytes(n: int) -> str:
    """The shortest exact binary form: 1073741824 → "1Gi", 1000 → "1000"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
