"""Field errors printed the way kube-apiserver prints them.

A 422 Invalid answer lists causes such as ``spec.source: Required value`` or
``spec.replicas: Invalid value: "x": spec.replicas in body must be of type integer: "x"``;
clients (kubectl, kopf's logs) show these strings verbatim, so the wording is the
interface. ``type`` holds the ``reason`` of the Status cause (``FieldValueInvalid``...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
TOO_MANY = "FieldValueTooMany"
TOO_LONG = "FieldValueTooLong"
FORBIDDEN = "FieldValueForbidden"
TYPE_INVALID = "FieldValueTypeInvalid"

_LABELS = {
    INVALID: "Invalid value",
    REQUIRED: "Required value",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
    TOO_MANY: "Too many",
    TOO_LONG: "Too long",
    FORBIDDEN: "Forbidden",
    TYPE_INVALID: "Invalid value",
}

# Errors whose text shows the offending value after the label.
_SHOWS_VALUE = {INVALID, NOT_SUPPORTED, DUPLICATE, TOO_MANY, TYPE_INVALID}


def render_value(value: Any) -> str:
    """A value as Kubernetes quotes it in messages: strings quoted, numbers bare."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a request body."""

    path: str
    type: str
    message: str = ""
    value: Any = field(default=None, compare=False)

    def __str__(self) -> str:
        label = _LABELS.get(self.type, "Invalid value")
        text = f"{self.path}: {label}" if self.path else label
        if self.type in _SHOWS_VALUE:
            text += f": {render_value(self.value)}"
        if self.message:
            text += f": {self.message}"
        return text

    def as_cause(self) -> dict[str, str]:
        """The entry of a Status ``details.causes`` list."""
        return {"reason": self.type, "message": str(self), "field": self.path}


def join(path: str, key: str) -> str:
    """Child path: ``spec`` + ``replicas`` -> ``spec.replicas``."""
    return f"{path}.{key}" if path else key


def index(path: str, i: int) -> str:
    """Array element path: ``spec.items[3]``."""
    return f"{path}[{i}]"
