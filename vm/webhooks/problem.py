"""One refusal of an admission webhook: the field and what is wrong with it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    verbatim: bool = False
    """The message is upstream's own text, which already names the field."""

    def __str__(self) -> str:
        return self.message if self.verbatim else f"{self.field}: {self.message}"
