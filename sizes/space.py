"""Volume space: 1 MiB alignment, filesystem overhead, required and usable sizes.

A Filesystem volume loses part of its capacity to the filesystem, so a DataVolume asking
for ``s`` bytes of disk image gets a claim of ``required_space(s)`` and the importer
grows the image to ``usable_space(capacity)``. Both follow current upstream CDI
(≥ 1.63), which multiplies and divides by (1 + overhead):

    required = ceil(align_up(s, 1 MiB) × (1 + o))
    usable   = align_down(ceil(capacity ÷ (1 + o)), 1 MiB)

Overheads are written as CDIConfig writes them: "0", "0.x" with up to three decimals,
or "1" (``^(0(?:\\.\\d{1,3})?|1)$``); the default is 0.06. Never float.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

MIB = 1024 * 1024
ALIGNMENT = MIB
DEFAULT_OVERHEAD = Fraction(6, 100)

_OVERHEAD = re.compile(r"^(0(?:\.\d{1,3})?|1)$")


def parse_overhead(text: str) -> Fraction:
    """An overhead as CDIConfig spells it ("0", "0.06", "0.055", "1").

    :raise ValueError: naming the text; "1.0", "0.0555", ".5" and "-0.1" are all refused,
        as upstream's pattern refuses them.
    """
    if not isinstance(text, str) or not _OVERHEAD.fullmatch(text):
        raise ValueError(
            f"overhead {text!r} is not a fraction between 0 and 1 with at most three"
            ' decimals (e.g. "0.06")')
    return Fraction(Decimal(text))


def format_overhead(value: Fraction) -> str:
    """The canonical string of an overhead ("0.06"), as written into CDIConfig status."""
    if not 0 <= value <= 1 or (value * 1000).denominator != 1:
        raise ValueError(f"overhead {value} is not a fraction in [0, 1] with three decimals")
    if value in (0, 1):
        return str(int(value))
    text = f"{Decimal(value.numerator) / Decimal(value.denominator):f}"
    return text.rstrip("0")


def align_up(size: int, alignment: int = ALIGNMENT) -> int:
    """The smallest multiple of ``alignment`` that is ≥ ``size``."""
    return -(-size // alignment) * alignment


def align_down(size: int, alignment: int = ALIGNMENT) -> int:
    """The largest multiple of ``alignment`` that is ≤ ``size``."""
    return size // alignment * alignment


def required_space(*, size: int, overhead: Fraction) -> int:
    """Bytes a Filesystem claim needs so that ``size`` bytes of image fit after overhead."""
    _check(overhead)
    return math.ceil(align_up(size) * (1 + overhead))


def usable_space(*, capacity: int, overhead: Fraction) -> int:
    """Bytes of image a Filesystem volume of ``capacity`` bytes holds after overhead."""
    _check(overhead)
    return align_down(math.ceil(Fraction(capacity) / (1 + overhead)))


def _check(overhead: Fraction) -> None:
    if not 0 <= overhead <= 1:
        raise ValueError(f"overhead {overhead} must be in [0, 1]")
