"""Pure helpers on object identity: generated names and unknown-field detection."""

from __future__ import annotations

import secrets
from typing import Any

# The alphabet kube-apiserver draws generateName suffixes from (no vowels, no 0/1/3).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_name(prefix: str) -> str:
    """``prefix`` plus five random characters, trimmed so the result is ≤ 63 characters."""
    base = prefix[:58]
    return base + "".join(secrets.choice(_ALPHABET) for _ in range(5))


def dropped_fields(before: Any, after: Any, path: str = "") -> list[str]:
    """Paths present in ``before`` but missing from ``after`` (what pruning removed)."""
    out: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in before.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(sub)
            else:
                out += dropped_fields(value, after[key], sub)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            out += dropped_fields(b, a, f"{path}[{i}]")
    return out
