"""``as=Table`` responses: what ``kubectl get`` prints comes from the server.

kubectl asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
``columnDefinitions`` and row ``cells`` it gets back (priority-0 columns by default, all
with ``-o wide``). Like kube-apiserver:

- custom resources get ``Name`` plus the CRD version's ``additionalPrinterColumns``
  (evaluated with :mod:`.jsonpath`; the first match is the cell). A CRD that declares
  none gets ``Age``. Cells of type ``date`` are sent already humanised ("5m"), integers
  and numbers as JSON numbers, missing values as null;
- built-in kinds get their own column sets (:mod:`.printers`), where ages are
  strings;
- other kinds get ``Name`` and ``Created At`` (the raw creationTimestamp, type date).

Each row carries the object per ``includeObject``: ``None``, ``Metadata`` (a
PartialObjectMetadata, the default) or ``Object``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .columns import NAME_COLUMN, Column, human_age, parse_time
from .jsonpath import JSONPathError, find, parse
from .printers import PRINTERS

__all__ = ["TableError", "human_age", "to_table"]

INCLUDE_OBJECT = ("None", "Metadata", "Object")
_CREATED_AT = Column("Created At", "date",
                     "CreationTimestamp is a timestamp representing the server time when this "
                     "object was created.")


class TableError(ValueError):
    """A bad ``includeObject`` or printer column (a 400 for the server)."""


def _crd_columns(columns: Sequence[Mapping[str, Any]]) -> list[tuple[Column, Any]]:
    specs = list(columns) or [{"name": "Age", "type": "date",
                               "jsonPath": ".metadata.creationTimestamp"}]
    compiled = []
    for spec in specs:
        path = str(spec.get("jsonPath", ""))
        try:
            steps = parse(path)
        except JSONPathError as err:
            raise TableError(f"printer column {spec.get('name')!r}: {err}") from None
        description = spec.get("description") or (
            f"Custom resource definition column (in JSONPath format): {path}")
        compiled.append((Column(str(spec.get("name", "")), str(spec.get("type", "string")),
                                str(description), int(spec.get("priority", 0)),
                                str(spec.get("format", ""))), steps))
    return compiled


def _cell(column_type: str, values: list[Any], now: datetime) -> Any:
    if not values or values[0] is None:
        return None
    value = values[0]
    if column_type == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if column_type == "integer":
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) \
            else None
    if column_type == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
            else None
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        if not isinstance(value, str):
            return None
        when = parse_time(value)
        return "<invalid>" if when is None else human_age(when, now)
    return None


def _row_object(obj: Mapping[str, Any], include_object: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return dict(obj)
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": dict(obj.get("metadata") or {})}


def to_table(
    objects: Sequence[Mapping[str, Any]],
    *,
    kind: str,
    columns: Sequence[Mapping[str, Any]] | None,
    list_meta: Mapping[str, Any],
    include_object: str = "Metadata",
    now: datetime | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table for ``objects`` of ``kind``.

    ``columns`` is the CRD version's ``additionalPrinterColumns`` for custom resources
    (``[]`` when the CRD lists none) and ``None`` for built-in kinds.
    """
    if include_object not in INCLUDE_OBJECT:
        raise TableError(f'includeObject: Unsupported value: "{include_object}": supported '
                         f'values: "None", "Metadata", "Object"')
    when = now or datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    if columns is not None:
        compiled = _crd_columns(columns)
        definitions = [NAME_COLUMN, *(c for c, _ in compiled)]
        for obj in objects:
            cells = [(obj.get("metadata") or {}).get("name", "")]
            cells += [_cell(c.type, find(steps, obj), when) for c, steps in compiled]
            rows.append(_row(cells, obj, include_object))
    elif kind in PRINTERS:
        printer_columns, printer = PRINTERS[kind]
        definitions = list(printer_columns)
        for obj in objects:
            rows.append(_row(printer(obj, when), obj, include_object))
    else:
        definitions = [NAME_COLUMN, _CREATED_AT]
        for obj in objects:
            meta = obj.get("metadata") or {}
            rows.append(_row([meta.get("name", ""), meta.get("creationTimestamp")], obj,
                             include_object))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(list_meta),
        "columnDefinitions": [c.definition() for c in definitions],
        "rows": rows,
    }


def _row(cells: list[Any], obj: Mapping[str, Any], include_object: str) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": cells}
    included = _row_object(obj, include_object)
    if included is not None:
        row["object"] = included
    return row
