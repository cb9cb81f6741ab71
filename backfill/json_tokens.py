"""JSON helpers that run on the executors as Python UDFs: the standard library only, so
an executor needs nothing but PySpark (no compiled package, not even pydantic's core)."""

from __future__ import annotations

import json
import typing as t
from decimal import Decimal


def strict_json(text: str) -> t.Any:
    """JSON as PostgreSQL's jsonb and Redshift's JSON_PARSE read it: no NaN or Infinity."""

    def refuse(constant: str) -> t.NoReturn:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_float=Decimal, parse_constant=refuse)


def _number_as_float(value: t.Any) -> float:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def token_text(json_text: str | None, field: str) -> str | None:
    """The token of `field` in a JSON object, as JSON text (a string keeps its quotes);
    NULL when the text is no object, the field is missing or JSON null."""
    try:
        record = strict_json(json_text) if json_text is not None else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get(field) is None:
        return None
    return json.dumps(record[field], default=_number_as_float)


def parses(text: str | None) -> bool | None:
    if text is None:
        return None
    try:
        strict_json(text)
    except ValueError:
        return False
    return True
