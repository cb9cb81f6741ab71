"""Column types of the pipeline file, parsed into a small closed model.

A type string is never pasted into SQL: it is parsed here and rendered by a dialect.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

ALIASES = {
    "int2": "smallint",
    "smallint": "smallint",
    "int": "integer",
    "int4": "integer",
    "integer": "integer",
    "int8": "bigint",
    "bigint": "bigint",
    "decimal": "decimal",
    "numeric": "decimal",
    "real": "real",
    "float4": "real",
    "float": "double",
    "float8": "double",
    "double precision": "double",
    "double": "double",
    "bool": "boolean",
    "boolean": "boolean",
    "char": "char",
    "character": "char",
    "nchar": "char",
    "bpchar": "char",
    "varchar": "varchar",
    "character varying": "varchar",
    "nvarchar": "varchar",
    "text": "varchar",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp without time zone": "timestamp",
    "timestamptz": "timestamptz",
    "timestamp with time zone": "timestamptz",
    "time": "time",
    "time without time zone": "time",
    "timetz": "timetz",
    "time with time zone": "timetz",
    "super": "super",
    "varbyte": "varbyte",
    "varbinary": "varbyte",
    "binary varying": "varbyte",
}

INTEGER_BOUNDS = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}

VARCHAR_MAX = 65535
CHAR_MAX = 4096
VARBYTE_MAX = 16_777_216
VARBYTE_DEFAULT = 64_000

# Type changes that keep every value exactly, besides a longer varchar and more decimal
# digits at the same scale (`widens`).
WIDER_FAMILIES = {"smallint": ("integer", "bigint"), "integer": ("bigint",), "real": ("double",)}

_TYPE = re.compile(r"^\s*([a-z][a-z0-9 ]*?)\s*(?:\(\s*([0-9a-z]+)\s*(?:,\s*([0-9]+)\s*)?\))?\s*$")


@dataclass(frozen=True)
class SqlType:
    family: str
    length: int | None = None  # char/varchar/varbyte; None for the default
    precision: int | None = None  # decimal
    scale: int | None = None  # decimal

    @property
    def is_integer(self) -> bool:
        return self.family in INTEGER_BOUNDS

    @property
    def is_text(self) -> bool:
        return self.family in ("char", "varchar")

    @property
    def byte_limit(self) -> int | None:
        """Largest value in bytes that fits, for text and binary types."""
        if self.family == "varchar":
            return self.length or 256
        if self.family == "char":
            return self.length or 1
        if self.family == "varbyte":
            return self.length or VARBYTE_DEFAULT
        return None

    def __str__(self) -> str:
        if self.family == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.length is not None:
            return f"{self.family}({self.length})"
        return self.family


def widens(old: SqlType, new: SqlType) -> bool:
    """True when every value of `old` is a value of `new`, unchanged: a longer varchar, more
    decimal digits at the same scale, smallint -> integer/bigint, integer -> bigint,
    real -> double."""
    if old.family == new.family == "varchar":
        return (new.byte_limit or 0) > (old.byte_limit or 0)
    if old.family == new.family == "decimal":
        return new.scale == old.scale and (new.precision or 0) > (old.precision or 0)
    return new.family in WIDER_FAMILIES.get(old.family, ())


@functools.lru_cache(maxsize=None)  # called per value by the backfill's Spark UDFs
def parse_type(text: str) -> SqlType:
    m = _TYPE.match(text.lower())
    if not m:
        raise ValueError(f"type {text!r} is not a column type like varchar(64), bigint, decimal(12,2)")
    name, arg1, arg2 = m.group(1).strip(), m.group(2), m.group(3)
    name = re.sub(r"\s+", " ", name)
    family = ALIASES.get(name)
    if family is None:
        raise ValueError(f"type {text!r}: unknown type {name!r}; known: {', '.join(sorted(set(ALIASES.values())))}")
    if family == "decimal":
        precision = int(arg1) if arg1 and arg1.isdigit() else 18
        scale = int(arg2) if arg2 else 0
        if arg1 and not arg1.isdigit():
            raise ValueError(f"type {text!r}: precision must be a number")
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"type {text!r}: decimal needs 1 <= precision <= 38 and 0 <= scale <= precision")
        return SqlType("decimal", precision=precision, scale=scale)
    if family in ("char", "varchar", "varbyte"):
        if arg2 is not None:
            raise ValueError(f"type {text!r}: {family} takes one length")
        limit = {"char": CHAR_MAX, "varchar": VARCHAR_MAX, "varbyte": VARBYTE_MAX}[family]
        if arg1 is None:
            length = VARCHAR_MAX if name == "text" else None
        elif arg1 == "max":
            length = limit
        elif arg1.isdigit() and 1 <= int(arg1) <= limit:
            length = int(arg1)
        else:
            raise ValueError(f"type {text!r}: length must be 1..{limit} or max")
        return SqlType(family, length=length)
    if arg1 is not None:
        raise ValueError(f"type {text!r}: {family} takes no length or precision")
    return SqlType(family)
