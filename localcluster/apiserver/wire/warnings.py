"""The ``Warning`` headers of an answer (pure), as kube-apiserver's warning recorder
(``pkg/endpoints/filters/warning.go``) writes them.

Every warning a request collected (a deprecated version, unknown fields under
fieldValidation Warn, admission webhooks' ``warnings``) becomes one
``299 - "<text>"`` header: empty and repeated texts are dropped, a text with a control
character (which a header cannot carry) too. The texts may add up to 4096 runes; past that
every text is cut to 256 runes, earlier ones included, and once the cut texts reach 4096
runes the rest are dropped.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

TOTAL_RUNES = 4 * 1024
ITEM_RUNES = 256


def header(text: str) -> str:
    """An RFC 7234 ``Warning`` value with code 299 and no agent (``-``)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _valid(text: str) -> bool:
    return not any(unicodedata.category(ch) == "Cc" for ch in text)


def headers(texts: Iterable[str], *, total: int = TOTAL_RUNES,
            item: int = ITEM_RUNES) -> list[str]:
    """The ``Warning`` header values for ``texts``, in order (Python strings count runes,
    as Go's utf8.RuneCountInString does)."""
    seen: set[str] = set()
    ordered: list[str] = []
    out: list[str] = []
    written, truncating = 0, False
    for text in texts:
        if not text or (truncating and written >= total) or text in seen:
            continue
        seen.add(text)
        ordered.append(text)
        shown = text[:item] if truncating else text
        if not _valid(shown):
            continue
        if written + len(shown) <= total or truncating:
            written += len(shown)
            out.append(header(shown))
            continue
        truncating, written, out = True, 0, []
        for earlier in ordered:  # replay every text so far, cut
            cut = earlier[:item]
            if _valid(cut):
                written += len(cut)
                out.append(header(cut))
    return out
