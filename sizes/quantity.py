"""Kubernetes resource quantities ("1Gi", "1.5G", "100m", "5u", "1e3"), exactly.

The grammar is Kubernetes' own (apimachinery's resource.Quantity):

    quantity  ::= sign? number suffix
    number    ::= digits | digits "." digits? | "." digits
    suffix    ::= "" | binarySI | decimalSI | ("e" | "E") sign? digits
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI ::= n | u | m | k | M | G | T | P | E

No whitespace anywhere, one suffix only ("1e3Gi" is not a quantity), and "E" alone is
exa while "E3" is an exponent. Values are exact Fractions: a float would turn
"0.1n" or 10 GiB × 1.06 into something the API server never computes.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
    "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
}
_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE])?)"
)
# Exponents beyond this are not quantities any API server would store (it caps at 10^18
# scaled values); refusing them keeps "1e999999999" from building a huge integer.
_MAX_EXPONENT = 64


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity.

    :raise ValueError: naming the text and what is wrong with it.
    """
    if isinstance(text, bool):
        raise ValueError(f"quantity {text!r} is not a string or integer")
    if isinstance(text, int):
        return Fraction(text)
    if not isinstance(text, str):
        raise ValueError(f"quantity {text!r} is not a string or integer")
    match = _GRAMMAR.fullmatch(text)
    if match is None:
        raise ValueError(
            f"quantity {text!r} is not a Kubernetes quantity"
            " (a number and one optional suffix such as Ki, Mi, Gi, m, k, M, G or e3)")
    value = Fraction(Decimal(match["number"]))
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"quantity {text!r} has an exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        value *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -value if match["sign"] == "-" else value


def parse_decimal(text: str | int) -> Decimal:
    """The quantity as a Decimal (exact for every quantity the grammar admits)."""
    value = parse_quantity(text)
    return Decimal(value.numerator) / Decimal(value.denominator)


def parse_bytes(text: str | int) -> int:
    """A storage quantity in whole bytes, rounded up as the API server rounds it.

    :raise ValueError: on a malformed or negative quantity.
    """
    value = parse_quantity(text)
    if value < 0:
        raise ValueError(f"quantity {text!r} is negative")
    return math.ceil(value)


def to_millis(text: str | int) -> int:
    """A CPU quantity in thousandths of a CPU, rounded up ("500m" → 500, "2" → 2000)."""
    return math.ceil(parse_quantity(text) * 1000)


def is_binary(text: str | int) -> bool:
    """Whether a quantity is written with a binary suffix ("4Mi"), the form an API server
    keeps when it prints the quantity back (:func:`format_quantity`)."""
    match = _GRAMMAR.fullmatch(text) if isinstance(text, str) else None
    return bool(match and match["suffix"] in _BINARY)


def format_quantity(n: int, *, binary: bool) -> str:
    """Whole units as an API server prints a quantity back: with the largest binary
    suffix that divides it for a quantity written in binary ("1024Mi" → "1Gi"), else the
    largest decimal one (5000000 → "5M"); the plain number where none divides it."""
    if binary:
        return format_bytes(n)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        unit = int(_DECIMAL[suffix])
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def format_bytes(n: int) -> str:
    """The shortest exact binary form: 1073741824 → "1Gi", 1000 → "1000"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
