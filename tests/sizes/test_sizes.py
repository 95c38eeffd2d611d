"""Quantities and size math, one table each; the sizes are upstream CDI's own test values."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from sizes import (
    align_down,
    align_up,
    format_bytes,
    format_overhead,
    format_quantity,
    is_binary,
    parse_bytes,
    parse_decimal,
    parse_overhead,
    parse_quantity,
    required_space,
    to_millis,
    usable_space,
)

KiB, MiB, GiB = 1024, 1024**2, 1024**3

QUANTITIES = [
    ("1Gi", Fraction(GiB)), ("512Mi", Fraction(512 * MiB)), ("1.5Gi", Fraction(3 * GiB, 2)),
    ("1G", Fraction(10**9)), ("1.5G", Fraction(1_500_000_000)), ("512M", Fraction(512 * 10**6)),
    ("100", Fraction(100)), ("1e3", Fraction(1000)), ("1E3", Fraction(1000)),
    ("1e+3", Fraction(1000)), ("1e-3", Fraction(1, 1000)), ("1k", Fraction(1000)),
    ("1Ki", Fraction(KiB)), ("0.5Ki", Fraction(512)), ("1E", Fraction(10**18)),
    ("1Ei", Fraction(2**60)), ("100m", Fraction(1, 10)), ("5u", Fraction(5, 10**6)),
    ("0.1n", Fraction(1, 10**10)), ("+1Gi", Fraction(GiB)), ("-1", Fraction(-1)),
    (".5", Fraction(1, 2)), ("5.", Fraction(5)), ("007", Fraction(7)), (2048, Fraction(2048)),
]


@pytest.mark.parametrize(("text", "value"), QUANTITIES)
def test_quantity_grammar(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", [
    "", " 1Gi", "1Gi ", "1 Gi", "1e3Gi", "1Gb", "Gi", "1.2.3", "-", ".", "1KI", "1ki",
    "1e", "1e1.5", "1mi", "1Giga", "0x10", "1_000", "١", "1e999999", True,
])
def test_quantity_rejections(text: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    ("1Gi", GiB), ("1500m", 2), ("1.1", 2), ("0.1n", 1), ("0", 0), (4096, 4096),
])
def test_bytes_round_up(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_negative_bytes_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        parse_bytes("-1Gi")


def test_millis_decimal_and_format() -> None:
    assert to_millis("500m") == 500 and to_millis("2") == 2000 and to_millis("1u") == 1
    assert parse_decimal("100m") == Decimal("0.1") and parse_decimal(3) == 3
    assert [format_bytes(n) for n in (GiB, 1000, 3 * MiB, 0, GiB + 1)] == [
        "1Gi", "1000", "3Mi", "0", str(GiB + 1)]


def test_quantities_print_back_in_the_form_they_were_written_in() -> None:
    """As apimachinery's Quantity.String(): a binary quantity with the largest binary
    suffix that divides it, a decimal one with the largest decimal suffix."""
    assert [is_binary(t) for t in ("4Mi", "1.5Gi", "4M", "4000000", "1e6", 7, "junk")] == [
        True, True, False, False, False, False, False]
    assert [format_quantity(n, binary=True) for n in (1024 * MiB, 1536 * MiB, 1500)] == [
        "1Gi", "1536Mi", "1500"]
    assert [format_quantity(n, binary=False) for n in (5_000_000, 10**9, 1500, 1024, 0)] == [
        "5M", "1G", "1500", "1024", "0"]


# upstream (pkg/util/util_test.go) and the worked examples in its issues
@pytest.mark.parametrize(("size", "alignment", "up", "down"), [
    (513, 512, 1024, 512), (510, 512, 512, 0), (0, MiB, 0, 0), (1, MiB, MiB, 0),
    (MiB, MiB, MiB, MiB), (MiB + 1, MiB, 2 * MiB, MiB),
])
def test_alignment(size: int, alignment: int, up: int, down: int) -> None:
    assert (align_up(size, alignment), align_down(size, alignment)) == (up, down)


@pytest.mark.parametrize(("size", "overhead", "required"), [
    (GiB, "0.06", 1138166334),
    (40 * MiB, "0.06", 44459623),
    (GiB, "0.75", 1879048192),
    (6 * GiB, "0.06", 6828998001),
    (6 * GiB, "0", 6 * GiB),
    (1, "0.06", 1111491),      # one byte needs an aligned MiB, inflated
    (GiB, "1", 2 * GiB),       # "1" is a valid overhead and doubles the size
])
def test_required_space(size: int, overhead: str, required: int) -> None:
    assert required_space(size=size, overhead=parse_overhead(overhead)) == required


@pytest.mark.parametrize(("capacity", "overhead", "usable"), [
    (1111491, "0.06", MiB),
    (1138166334, "0.06", GiB),
    (6828998001, "0.06", 6 * GiB),
    (GiB, "0", GiB),
    (GiB + 5, "0", GiB),
    (2 * GiB, "1", GiB),
])
def test_usable_space(capacity: int, overhead: str, usable: int) -> None:
    assert usable_space(capacity=capacity, overhead=parse_overhead(overhead)) == usable


@pytest.mark.parametrize(("pvc", "scratch", "expected"), [
    ("0.03", "0.1", 1094 * MiB), ("0.1", "0.03", 958 * MiB),
])
def test_scratch_size_as_upstream(pvc: str, scratch: str, expected: int) -> None:
    usable = usable_space(capacity=GiB, overhead=parse_overhead(pvc))
    assert align_up(required_space(size=usable, overhead=parse_overhead(scratch))) == expected


@pytest.mark.parametrize("size", [1, MiB, 512 * MiB, 10 * GiB + 3])
@pytest.mark.parametrize("overhead", ["0", "0.06", "0.055", "0.333", "1"])
def test_required_then_usable_holds_the_image(size: int, overhead: str) -> None:
    o = parse_overhead(overhead)
    assert usable_space(capacity=required_space(size=size, overhead=o), overhead=o) >= size


@pytest.mark.parametrize(("text", "value"), [
    ("0", Fraction(0)), ("0.06", Fraction(6, 100)), ("0.055", Fraction(55, 1000)),
    ("1", Fraction(1)), ("0.5", Fraction(1, 2)),
])
def test_overhead_accepted(text: str, value: Fraction) -> None:
    assert parse_overhead(text) == value
    assert format_overhead(value) == text


@pytest.mark.parametrize("text", ["1.0", "0.0555", "1.1", "-0.1", "abc", ".5", " 0.06", "0.",
                                  "", "01"])
def test_overhead_refused(text: str) -> None:
    with pytest.raises(ValueError, match="overhead"):
        parse_overhead(text)


def test_overhead_out_of_range_in_math() -> None:
    with pytest.raises(ValueError, match="overhead"):
        required_space(size=MiB, overhead=Fraction(3, 2))
