"""The Warning headers of an answer, as kube-apiserver's warning recorder writes them
(cases ported from its filters/warning_test.go; this server has no agent: always ``-``)."""

from __future__ import annotations

import pytest

from localcluster.apiserver.wire.warnings import headers

RECORDER_CASES = [
    ("empty", [""], []),
    ("single", ["mytext"], ['299 - "mytext"']),
    ("duplicate", ["mytext", "mytext"], ['299 - "mytext"']),
    ("multiple", ["mytext1", "mytext2", "mytext3"],
     ['299 - "mytext1"', '299 - "mytext2"', '299 - "mytext3"']),
    ("invalid text", ["my\ntext"], []),
    ("quoted", ['a "b" \\c'], ['299 - "a \\"b\\" \\\\c"']),
]


@pytest.mark.parametrize(("label", "texts", "expected"), RECORDER_CASES,
                         ids=[c[0] for c in RECORDER_CASES])
def test_recorder(label: str, texts: list[str], expected: list[str]) -> None:
    assert headers(texts) == expected, label


def test_truncation() -> None:
    """TestTruncation with its limits (25 runes in all, 5 a text once over)."""
    texts = ["aaaaaaaaaa", "aaaaaaaaaa", "bb", "ccc", "Iñtërnâtiô"]
    assert headers(texts, total=25, item=5) == [
        '299 - "aaaaaaaaaa"', '299 - "bb"', '299 - "ccc"', '299 - "Iñtërnâtiô"']
    texts += ["e", "ffffffffff", "ffffffffff", "gggggggggg", "h"]
    assert headers(texts, total=25, item=5) == [
        '299 - "aaaaa"', '299 - "bb"', '299 - "ccc"', '299 - "Iñtër"', '299 - "e"',
        '299 - "fffff"', '299 - "ggggg"']


def test_the_real_limits() -> None:
    """4096 runes in all: the 41st text of 100 runes goes over, so every text is cut to
    256 runes (these are shorter) and, once 4096 is reached, the rest are dropped."""
    many = [f"{i:04} " + "x" * 95 for i in range(50)]
    assert headers(many) == [f'299 - "{text}"' for text in many[:41]]
    assert headers(["y" * 4096]) == [f'299 - "{"y" * 4096}"']
    assert headers(["y" * 4097]) == [f'299 - "{"y" * 256}"']
