"""`infer` from messages without schemas (the JsonConverter with `schemas.enable=false`):
each field's type guessed from the values the sample holds, every guess said, and the
fields the values cannot settle flagged for a look.

With `schemas.enable=false` the JsonConverter writes the payload alone: no Connect types,
no semantic names, no key schema. What the values show is all there is, so every column
is a guess. The guesses are deliberately wide; what no guess can know is flagged:

- integers: `bigint` (an int32 column's values fit it too);
- numbers with a fraction: `double precision`; a source DECIMAL under
  `decimal.handling.mode=double` arrives so too, and one under the default `precise` mode
  arrives as a base64 string, which no value can be told apart from text;
- strings: `varchar(65535)`; strings that all read as ISO 8601 times are flagged (a
  `ZonedTimestamp` or an `io.debezium.time.*String` column, for which a semantic is needed);
- objects and arrays: `super`;
- a field with values of several JSON types, or only nulls in the sample: flagged, typed
  `varchar(65535)` until someone decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sync.debezium.vocabulary import Semantic

NUMBER_TEXT = re.compile(r"-?\d+\.\d+|-?\d+")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
# The JSON type of a value -> the Connect type `column_for` maps to a column type.
CONNECT_TYPES = {
    "boolean": "boolean",
    "integer": "int64",
    "number": "float64",
    "string": "string",
    "object": "struct",
    "array": "array",
}


def json_type(value: Any) -> str:
    """The JSON type of a parsed value (`json.loads`: an int is an integer, a float a number)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@dataclass
class FieldValues:
    """The values one field took in the sample."""

    types: dict[str, int] = field(default_factory=dict)  # JSON type -> values of it
    nulls: int = 0
    all_times: bool = True  # every string value reads as an ISO 8601 time
    all_numbers: bool = True  # every string value reads as a number

    def add(self, value: Any) -> None:
        if value is None:
            self.nulls += 1
            return
        kind = json_type(value)
        self.types[kind] = self.types.get(kind, 0) + 1
        if kind == "string":
            self.all_times = self.all_times and ISO_TIME.fullmatch(value) is not None
            self.all_numbers = self.all_numbers and NUMBER_TEXT.fullmatch(value) is not None

    def guess(self, name: str) -> tuple[str, str | None, str | None]:
        """(Connect type, what was guessed, what needs a look)."""
        if not self.types:
            return "string", None, f"{name}: only nulls in the sample ({self.nulls}): its type cannot be guessed"
        if len(self.types) > 1 and set(self.types) != {"integer", "number"}:
            seen = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
            return "string", None, f"{name}: values of several JSON types ({seen}): check the source column"
        kind = "number" if "number" in self.types else next(iter(self.types))
        count = sum(self.types.values())
        guessed = f"{name}: from {count} {kind} value(s)"
        look = None
        if kind == "string" and self.all_times:
            look = f"{name}: every value reads as an ISO 8601 time: a timestamp column needs its semantic (e.g. {Semantic.ZONED_TIMESTAMP})"
        elif kind == "string" and self.all_numbers:
            look = f"{name}: every value reads as a number: a DECIMAL under decimal.handling.mode=string? Type it decimal(p,s)"
        if kind == "number":
            guessed += " (a DECIMAL in decimal.handling.mode=double arrives so too)"
        return CONNECT_TYPES[kind], guessed, look


@dataclass
class ValueSample:
    """Schemaless messages of one topic: row fields and their values, the key's fields."""

    fields: dict[str, FieldValues] = field(default_factory=dict)
    key: list[str] = field(default_factory=list)
    format: str = "debezium"
    connector: str | None = None
    messages: int = 0

    def add(self, key: Any, value: Any) -> None:
        if not isinstance(value, dict) or "schema" in value:
            return
        if isinstance(key, dict) and not self.key:
            self.key = list(key)
        rows: list[dict[str, Any]]
        if "op" in value and ("after" in value or "before" in value):
            if value.get("op") in ("t", "m"):
                return  # a truncate or message event: no row
            rows = [r for r in (value.get("after"), value.get("before")) if isinstance(r, dict)]
            source = value.get("source")
            if isinstance(source, dict) and isinstance(source.get("connector"), str):
                self.connector = self.connector or source["connector"]
        elif any(name.startswith("__") for name in value):
            self.format = "debezium-unwrap"
            rows = [{k: v for k, v in value.items() if not k.startswith("__")}]
        else:
            self.format = "row"
            rows = [value]
        for row in rows:
            for name, v in row.items():
                self.fields.setdefault(name, FieldValues()).add(v)
        self.messages += 1

    def connect_fields(self) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
        """(Connect-like fields for `column_for`, the guesses, the fields that need a look)."""
        fields, guesses, looks = {}, [], []
        for name, values in self.fields.items():
            connect_type, guessed, look = values.guess(name)
            fields[name] = {"field": name, "type": connect_type}
            guesses += [guessed] if guessed else []
            looks += [look] if look else []
        return fields, guesses, looks
