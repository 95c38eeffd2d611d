"""Size math: quantities and upstream's required/usable formulas."""

from fractions import Fraction

import pytest

from importer.sizes import (
    align_down,
    align_up,
    parse_bytes,
    parse_overhead,
    parse_quantity,
    required_space,
    usable_space,
)

MiB, GiB = 1024**2, 1024**3


@pytest.mark.parametrize(("text", "expected"), [
    ("1Gi", GiB), ("512Mi", 512 * MiB), ("1.5Gi", 3 * GiB // 2), ("1G", 10**9),
    ("1.5G", 1_500_000_000), ("512M", 512 * 10**6), ("100", 100), ("1e3", 1000),
    ("1k", 1000), ("1Ki", 1024), ("0.5Ki", 512), ("1E", 10**18),
])
def test_quantities(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_millis_are_exact_fractions() -> None:
    assert parse_quantity("100m") == Fraction(1, 10)
    assert parse_bytes("1500m") == 2  # rounded up to a whole byte


@pytest.mark.parametrize("text", ["", " 1Gi", "1 Gi", "1Gb", "Gi", "1.2.3", "1e3Mi", "-1Gi"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_bytes(text)


@pytest.mark.parametrize(("size", "up", "down"), [
    (0, 0, 0), (1, MiB, 0), (MiB, MiB, MiB), (MiB + 1, 2 * MiB, MiB),
])
def test_alignment(size: int, up: int, down: int) -> None:
    assert (align_up(size), align_down(size)) == (up, down)


@pytest.mark.parametrize(("size", "overhead", "expected"), [
    (6442450944, Fraction(55, 1000), 6817408407),  # upstream's own worked example
    (6 * GiB, Fraction(0), 6 * GiB),
    (1, Fraction(6, 100), 1115507),  # 1 byte needs an aligned MiB, inflated
])
def test_required_space(size: int, overhead: Fraction, expected: int) -> None:
    assert required_space(size=size, overhead=overhead) == expected


@pytest.mark.parametrize(("capacity", "overhead", "expected"), [
    (6817408407, Fraction(55, 1000), 6442450944),  # round trip of the example
    (GiB, Fraction(6, 100), 962 * MiB),
    (GiB, Fraction(0), GiB),
    (GiB + 5, Fraction(0), GiB),
    (MiB, Fraction(1), 0),
])
def test_usable_space(capacity: int, overhead: Fraction, expected: int) -> None:
    assert usable_space(capacity=capacity, overhead=overhead) == expected


@pytest.mark.parametrize("size", [MiB, 512 * MiB, 10 * GiB + 3])
@pytest.mark.parametrize("overhead", [Fraction(6, 100), Fraction(55, 1000), Fraction(1, 3)])
def test_required_then_usable_holds_the_image(size: int, overhead: Fraction) -> None:
    assert usable_space(capacity=required_space(size=size, overhead=overhead),
                        overhead=overhead) >= size


@pytest.mark.parametrize(("text", "ok"), [
    ("0", True), ("0.06", True), ("0.055", True), ("1", True), ("0.0555", False),
    ("1.1", False), ("-0.1", False), ("abc", False), (".5", False),
])
def test_overhead(text: str, ok: bool) -> None:
    if ok:
        assert 0 <= parse_overhead(text) <= 1
    else:
        with pytest.raises(ValueError, match="overhead"):
            parse_overhead(text)


def test_required_space_rejects_full_overhead() -> None:
    with pytest.raises(ValueError):
        required_space(size=MiB, overhead=Fraction(1))
