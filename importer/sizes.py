"""Size math: Kubernetes quantities, 1 MiB alignment, filesystem overhead.

The one place for it. Integers and exact fractions only: a float would round
``0.06 * 10 GiB`` differently from upstream and shift a volume by a MiB.
``required_space`` and ``usable_space`` follow upstream's formulas, so a DataVolume of
``storage: 6Gi`` asks for the same PVC size as CDI does.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

MIB = 1024 * 1024
ALIGNMENT = MIB
DEFAULT_OVERHEAD = Fraction(6, 100)

_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+)?([A-Za-z]{0,2})$")
_OVERHEAD = re.compile(r"^(0(?:\.\d{1,3})?|1(?:\.0{1,3})?)$")


def parse_quantity(text: str) -> Fraction:
    """Parse a Kubernetes quantity ("1Gi", "1.5G", "512M", "100m", "1e3") exactly.

    :raise ValueError: on whitespace, an unknown suffix or a malformed number.
    """
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"quantity {text!r} is not a number with an optional unit suffix")
    number, exponent, suffix = match.groups()
    if exponent and suffix:
        raise ValueError(f"quantity {text!r} has both an exponent and a suffix")
    try:
        value = Decimal(number + (exponent or ""))
    except InvalidOperation as err:
        raise ValueError(f"quantity {text!r} is not a number") from err
    if suffix in _BINARY:
        return Fraction(value) * _BINARY[suffix]
    if suffix in _DECIMAL:
        return Fraction(value * _DECIMAL[suffix])
    raise ValueError(f"quantity {text!r} has an unknown suffix {suffix!r}")


def parse_bytes(text: str) -> int:
    """A quantity of bytes, rounded up to a whole byte as Kubernetes does."""
    value = parse_quantity(text)
    if value < 0:
        raise ValueError(f"quantity {text!r} is negative")
    return _ceil(value)


def parse_overhead(text: str) -> Fraction:
    """A filesystem overhead fraction, "0" to "1" with up to three decimals."""
    if not _OVERHEAD.match(text):
        raise ValueError(f"overhead {text!r} is not a fraction between 0 and 1 (e.g. \"0.06\")")
    return Fraction(Decimal(text))


def align_up(size: int, alignment: int = ALIGNMENT) -> int:
    return -(-size // alignment) * alignment


def align_down(size: int, alignment: int = ALIGNMENT) -> int:
    return size // alignment * alignment


def required_space(*, size: int, overhead: Fraction) -> int:
    """Bytes a Filesystem volume needs so that ``size`` bytes of image fit after overhead."""
    if not 0 <= overhead < 1:
        raise ValueError(f"overhead {overhead} must be in [0, 1)")
    return _ceil(Fraction(align_up(size)) / (1 - overhead))


def usable_space(*, capacity: int, overhead: Fraction) -> int:
    """Bytes of image a volume of ``capacity`` bytes can hold after the overhead."""
    if not 0 <= overhead <= 1:
        raise ValueError(f"overhead {overhead} must be in [0, 1]")
    return align_down(_ceil((1 - overhead) * capacity))


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)
