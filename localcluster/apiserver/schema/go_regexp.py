"""Go's regular-expression dialect (RE2), for CRD ``pattern`` and CEL's ``matches``.

kube-apiserver checks ``pattern`` with Go's ``regexp`` package, which is RE2: inline flags
anywhere (``^(?i)(abort|warn)?$`` in prometheus-operator's CRDs), POSIX classes
(``[[:alpha:]]``), no look-around and no back-references. Python's ``re`` differs on each
of these, so patterns are compiled with the RE2 binding; a pattern RE2 refuses is refused
when the CRD is created, as upstream refuses it. Compiled patterns are cached.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2


class PatternError(ValueError):
    """The pattern is not valid in Go's dialect (the message says why)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # an invalid pattern is an answer, not a log line
    return options


_OPTIONS = _options()


@lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Any:
    """The compiled pattern; :class:`PatternError` when RE2 refuses it."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern must be a string")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as err:
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PatternError(f"error parsing regexp: {detail}") from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (Go's ``MatchString``)."""
    return compile_pattern(pattern).search(text) is not None
