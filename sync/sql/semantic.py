"""Decoding Debezium semantic types in SQL, one text for both dialects.

A column that declares `semantic = ...` is decoded from its JSON encoding here; the
dialect supplies only the few primitives the engines spell differently (base64 to hex,
hex to bigint, days to date, text to timestamp/decimal/JSON). The plain-Python reference
decoder `sync/debezium/decode.py` defines the expected results; tests hold the two together.

Decoding a value may need intermediate values (the hex digits of a decimal, its
magnitude): `decode_sql` returns them as extra projection levels the stage query
evaluates between the envelope level and the typed level, so no expression is repeated.
Every expression reads the previous level through the alias `f`. A value that does not
decode yields NULL, which the procedure turns into a quarantine reason naming the column.

Every intermediate value that a cast or a raising function reads is made valid first,
inside that function's argument (or at a previous level): Redshift may evaluate a CASE
branch for rows the CASE does not select, so a cast guarded only by an enclosing CASE
can still fail a CALL (docs/redshift.md). A level's value is NULL or valid; what reads it
needs no guard of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sync.config import ColumnConfig
from sync.debezium.decode import MAX_DECIMAL_DIGITS
from sync.debezium.vocabulary import BASE64_PATTERN, EPOCH_UNITS, TIME_UNITS, ZONED_PATTERN, Semantic
from sync.sql.dialect import PostgresDialect
from sync.sql.types import SqlType

_BIGINT = SqlType("bigint")
_INTEGER = SqlType("integer")
# Timestamps both warehouses hold: 0001-01-01 00:00:00 .. 9999-12-31 23:59:59 (seconds).
MIN_EPOCH_SECONDS = -62_135_596_800
MAX_EPOCH_SECONDS = 253_402_300_799
MIN_EPOCH_DAYS, MAX_EPOCH_DAYS = -719_162, 2_932_896
# A 16-byte two's complement split into hex chunks that fit a bigint: 2 + 7 + 7 bytes.
CHUNK_HI_MAX, CHUNK_MAX = 0xFFFF, 2**56 - 1
TWO_56, TWO_112 = 2**56, 2**112
# |value| <= 10**38 - 1  <=>  hi < HI_LIMIT or (hi = HI_LIMIT and low <= LOW_LIMIT)
HI_LIMIT = (10**MAX_DECIMAL_DIGITS - 1) // TWO_112
LOW_LIMIT = 10**MAX_DECIMAL_DIGITS - 1 - HI_LIMIT * TWO_112

# Column types whose conversion (or TOAST placeholder test) reads the field's text.
NAMED_TEXT_FAMILIES = ("char", "varchar", "timestamp", "varbyte", "super")
# Which column types each decoded kind may land in.
TARGET_FAMILIES = {
    "timestamp": ("timestamp", "timestamptz", "date"),
    "date": ("date", "timestamp"),
    "time": ("time",),
    "decimal": ("decimal", "double", "real"),
    "json": ("super", "varchar"),
}


@dataclass
class DecodeSql:
    levels: list[dict[str, str]] = field(default_factory=list)  # alias -> expression, per level
    value: str = "NULL"
    text: str | None = None  # the value's text, named in the levels, where it is


def natural_kind(semantic: str) -> str | None:
    if semantic in EPOCH_UNITS or semantic == Semantic.ZONED_TIMESTAMP:
        return "timestamp"
    if semantic in TIME_UNITS:
        return "time"
    if semantic == Semantic.DATE:
        return "date"
    if semantic in (Semantic.DECIMAL, Semantic.VARIABLE_SCALE_DECIMAL):
        return "decimal"
    if semantic == Semantic.JSON:
        return "json"
    return None  # encoded as the plain JSON of its type: the ordinary conversion applies


def check_column(col: ColumnConfig, table: str) -> None:
    """Refuse a semantic type whose decoded value cannot land in the column's type."""
    if col.semantic is None:
        return
    kind = natural_kind(col.semantic)
    allowed = TARGET_FAMILIES.get(kind or "", None)
    if allowed is not None and col.sql_type.family not in allowed:
        raise ValueError(
            f"table {table}, column {col.name}: semantic {col.semantic} decodes to a {kind}, "
            f"which does not fit type {col.type} (use {' or '.join(allowed)})"
        )
    if col.semantic == Semantic.MICRO_DURATION and not col.sql_type.is_integer:
        raise ValueError(
            f"table {table}, column {col.name}: semantic {col.semantic} is a number of microseconds, "
            f"which does not fit type {col.type} (use bigint)"
        )
    if col.semantic == Semantic.DECIMAL and col.scale is None:
        raise ValueError(
            f"table {table}, column {col.name}: semantic {col.semantic} needs scale = <n> (the schema's 'scale' parameter)"
        )


def _epoch_to_timestamp(int_expr: str, per_second: int) -> str:
    """Epoch units (an integer already in the timestamp range, or NULL) -> timestamp,
    exact: whole seconds plus the remainder in microseconds (integer division and modulo
    truncate toward zero in both engines)."""
    remainder = f"({int_expr} % {per_second})"
    micros = f"{remainder} * {1_000_000 // per_second}" if per_second <= 1_000_000 else f"{remainder} / {per_second // 1_000_000}"
    return (
        f"TIMESTAMP '1970-01-01 00:00:00'"
        f" + ({int_expr} / {per_second}) * INTERVAL '1 second' + {micros} * INTERVAL '1 microsecond'"
    )


def _in_range(int_expr: str, lo: int, hi: int) -> str:
    """The integer when lo <= it <= hi, else NULL: a level value later arithmetic reads."""
    return f"CASE WHEN {int_expr} BETWEEN {lo} AND {hi} THEN {int_expr} END"


def _epoch_range(per_second: int) -> tuple[int, int]:
    lo = max(MIN_EPOCH_SECONDS * per_second, -(2**63))
    hi = min((MAX_EPOCH_SECONDS + 1) * per_second - 1, 2**63 - 1)
    return lo, hi


def _text(d: PostgresDialect, raw: str, alias: str) -> tuple[list[dict[str, str]], str, bool]:
    """The text of the JSON value `raw`: the levels that name it where the dialect names
    texts (`text_levels`: JSON_SIZE once per value), and whether it is named; else the
    text in place."""
    named = d.text_levels(raw, f"{alias}t")
    if named is None:
        return [], d.json_number_text(raw), False
    return named[0], named[1], True


def _zoned_levels(d: PostgresDialect, raw: str, alias: str) -> tuple[list[dict[str, str]], str]:
    """ISO-8601 text with 0-9 fraction digits and Z, +hh:mm or +hh:mm:ss -> UTC timestamp.
    The fraction is truncated to microseconds; the offset is subtracted. Level 1 keeps the
    text only when it matches the pattern; level 2 reads its numbers (digits there, by the
    pattern) and checks the calendar date, so the timestamp cast only sees real dates."""
    text_levels, text, _ = _text(d, raw, alias)
    z, y, mo, dd = (f"_{p}_{alias}" for p in ("z", "y", "mo", "dd"))
    valid = f"f.{z} IS NOT NULL"

    def number(start: str, length: int) -> str:
        return d.total_cast(valid, f"SUBSTRING(f.{z}, {start}, {length})", "integer")

    zulu = f"f.{z} LIKE '%Z'"
    # An offset with seconds (+hh:mm:ss) ends 3 characters after where +hh:mm would.
    with_seconds = f"SUBSTRING(f.{z}, LENGTH(f.{z}) - 5, 1) = ':'"
    shift = f"(CASE WHEN {with_seconds} THEN 3 ELSE 0 END)"
    hours = d.total_cast(f"NOT {zulu}", f"SUBSTRING(f.{z}, LENGTH(f.{z}) - 4 - {shift}, 2)", "integer")
    minutes = d.total_cast(f"NOT {zulu}", f"SUBSTRING(f.{z}, LENGTH(f.{z}) - 1 - {shift}, 2)", "integer")
    seconds = d.total_cast(f"NOT {zulu} AND {with_seconds}", f"SUBSTRING(f.{z}, LENGTH(f.{z}) - 1, 2)", "integer")
    sign = f"CASE WHEN SUBSTRING(f.{z}, LENGTH(f.{z}) - 5 - {shift}, 1) = '-' THEN -1 ELSE 1 END"
    fraction = d.regex_group(f"f.{z}", "^.{19}[.]([0-9]{1,9})")
    micros = d.total_cast(valid, f"RPAD(SUBSTRING(COALESCE({fraction}, ''), 1, 6), 6, '0')", "integer")
    level2 = {
        y: number("1", 4),
        mo: number("6", 2),
        dd: number("9", 2),
        f"_us_{alias}": micros,
        f"_sod_{alias}": f"{number('12', 2)} * 3600 + {number('15', 2)} * 60 + {number('18', 2)}",
        f"_off_{alias}": f"CASE WHEN {zulu} THEN 0 ELSE {sign} * ({hours} * 3600 + {minutes} * 60 + COALESCE({seconds}, 0)) END",
    }
    leap = f"(f.{y} % 4 = 0 AND (f.{y} % 100 <> 0 OR f.{y} % 400 = 0))"
    month_days = (
        f"CASE WHEN f.{mo} IN (4, 6, 9, 11) THEN 30 WHEN f.{mo} = 2 THEN CASE WHEN {leap} THEN 29 ELSE 28 END ELSE 31 END"
    )
    # The offset may move the first and the last day out of 0001-01-01 .. 9999-12-31
    # (a time before 01:00 at +01:00 on 0001-01-01): no value, as the reference decoder.
    in_range = (
        f"NOT (f.{y} = 1 AND f.{mo} = 1 AND f.{dd} = 1 AND f._sod_{alias} < f._off_{alias})"
        f" AND NOT (f.{y} = 9999 AND f.{mo} = 12 AND f.{dd} = 31 AND f._sod_{alias} - f._off_{alias} >= 86400)"
    )
    real_date = f"f.{y} >= 1 AND f.{mo} BETWEEN 1 AND 12 AND f.{dd} BETWEEN 1 AND {month_days} AND {in_range}"
    local = d.text_to_timestamp(f"CASE WHEN {real_date} THEN REPLACE(SUBSTRING(f.{z}, 1, 19), 'T', ' ') END")
    value = f"{local} + f._us_{alias} * INTERVAL '1 microsecond' - f._off_{alias} * INTERVAL '1 second'"
    level1 = {z: f"CASE WHEN {d.json_is_string(raw)} AND {text} ~ {d.lit(ZONED_PATTERN)} THEN {text} END"}
    return [*text_levels, level1, level2], value


def _decimal_levels(d: PostgresDialect, b64_json: str, alias: str, scale: str | int) -> list[dict[str, str]]:
    """Base64 two's complement + scale -> plain decimal text `t__` ('-12345.67'), one small
    step per level so that no expression is evaluated twice. `scale` is the column's
    (a number) or an expression over the previous level (VariableScaleDecimal); a
    negative scale appends zeros ('1234500' for 12345 at scale -2)."""
    text_levels, text, _ = _text(d, b64_json, alias)
    s, x, h, n = f"_s_{alias}", f"_x_{alias}", f"_h_{alias}", f"_n_{alias}"
    a, b, c, low, m, g = (f"_{p}_{alias}" for p in "abclmg")
    # The base64 text when it is base64 of 1 to 16 bytes, else NULL: all TO_VARBYTE sees.
    valid_b64 = (
        f"CASE WHEN {d.json_is_string(b64_json)} AND {text} ~ {d.lit(BASE64_PATTERN)}"
        f" AND LENGTH({text}) BETWEEN 4 AND 24 THEN {text} END"
    )
    # Sign-extended to 16 bytes; a negative number is read as its inverted bits + 1:
    # |n * max - chunk| is the chunk, or its complement when negative.
    sign = f"CASE WHEN SUBSTRING(f.{x}, 1, 1) >= '8' THEN 1 ELSE 0 END"
    padded = (
        f"CASE WHEN LENGTH(f.{x}) <= 32 THEN LPAD(f.{x}, 32, CASE WHEN SUBSTRING(f.{x}, 1, 1) >= '8' THEN 'f' ELSE '0' END) END"
    )

    def chunk(start: int, length: int, top: int) -> str:
        return f"ABS(f.{n} * {top} - {d.hex_to_bigint(f'SUBSTRING(f.{h}, {start}, {length})')})"

    # The product only for values below 10^38: above, it would overflow DECIMAL(38,0).
    fits = f"f.{a} < {HI_LIMIT} OR (f.{a} = {HI_LIMIT} AND f.{low} <= {LOW_LIMIT})"
    magnitude = f"CAST(CAST(CASE WHEN {fits} THEN f.{a} END AS decimal(38,0)) * {TWO_112} + f.{low} AS varchar(40))"
    # At least scale + 1 digits, so the integer part is never empty (a scale past 38 is
    # refused below; LEAST keeps the padding bounded meanwhile).
    # A column's own scale (a number) is folded into the text here: no arithmetic on constants.
    fixed = isinstance(scale, int) and 0 <= scale <= MAX_DECIMAL_DIGITS
    width = f"{scale + 1}" if fixed else f"LEAST({scale}, {MAX_DECIMAL_DIGITS}) + 1"
    digits = f"LPAD(f.{m}, GREATEST(LENGTH(f.{m}), {width}), '0')"
    minus = f"(CASE WHEN f.{n} = 1 THEN '-' ELSE '' END)"
    if fixed:
        start = f"LENGTH(f.{g})" + (f" - {scale - 1}" if scale > 1 else "")
        whole = f"SUBSTRING(f.{g}, 1, LENGTH(f.{g}) - {scale}) || '.' || SUBSTRING(f.{g}, {start})" if scale else f"f.{g}"
        point = f"WHEN f.{g} IS NOT NULL THEN {minus} || {whole}"
    else:
        point = (
            f"WHEN f.{g} IS NOT NULL AND {scale} BETWEEN 0 AND {MAX_DECIMAL_DIGITS} THEN "
            f"{minus} || SUBSTRING(f.{g}, 1, LENGTH(f.{g}) - {scale})"
            f" || (CASE WHEN {scale} > 0 THEN '.' || SUBSTRING(f.{g}, LENGTH(f.{g}) - {scale} + 1) ELSE '' END)"
        )
    # Zeros appended: 0 to 38 of them whatever the scale, so RPAD is bounded on every row;
    # the text only when the number keeps to 38 digits (zero at any scale).
    zeros = f"GREATEST(-GREATEST({scale}, -{MAX_DECIMAL_DIGITS}), 0)"
    shifted = (
        f"WHEN f.{g} IS NOT NULL AND {scale} BETWEEN -{MAX_DECIMAL_DIGITS} AND -1"
        f" AND (f.{m} = '0' OR LENGTH(f.{m}) + {zeros} <= {MAX_DECIMAL_DIGITS}) THEN "
        f"{minus} || RPAD(f.{m}, LENGTH(f.{m}) + {zeros}, '0')"
    )
    if isinstance(scale, int):
        branches = point if scale >= 0 else shifted
    else:
        branches = f"{point} {shifted}"
    decimal_text = f"CASE {branches} END"
    return [
        *text_levels,
        {s: valid_b64},
        {x: d.base64_to_hex(f"f.{s}")},
        {h: padded, n: sign},
        {a: chunk(1, 4, CHUNK_HI_MAX), b: chunk(5, 14, CHUNK_MAX), c: chunk(19, 14, CHUNK_MAX)},
        {low: f"CAST(f.{b} AS decimal(38,0)) * {TWO_56} + f.{c} + f.{n}"},
        {m: magnitude},
        {g: digits},
        {f"_t_{alias}": decimal_text},
    ]


def _land(d: PostgresDialect, kind: str, expr: str, t: SqlType) -> str:
    """A decoded value of `kind` in the column type `t`."""
    if kind == "timestamp" and t.family == "timestamptz":
        return f"(({expr}) AT TIME ZONE 'UTC')"
    if kind in ("timestamp", "date") and t.family in ("date", "timestamp") and kind != t.family:
        return f"CAST({expr} AS {t.family})"
    if kind == "decimal":
        if t.family == "decimal":
            return d.text_to_decimal(expr, t.precision or 18, t.scale or 0)
        # Up to 38 digits fit a double on both engines; a real only within its range.
        return d.total_cast(d.float_in_range(f"CAST({expr} AS double precision)", t), expr, d.type_sql(t))
    return expr


def decode_sql(d: PostgresDialect, col: ColumnConfig, raw: str, alias: str) -> DecodeSql:
    """SQL that decodes the JSON value `raw` (over alias `f`) of a column to its type."""
    semantic, t = col.semantic, col.sql_type
    kind = natural_kind(semantic) if semantic else None
    if kind is None:
        # The casts that read the value's text: computed once where the dialect names it.
        named = d.text_levels(raw, alias) if t.family in NAMED_TEXT_FAMILIES else None
        if named:
            levels, text = named
            return DecodeSql(levels, d.cast_text(raw, text, t), text)
        return DecodeSql([], d.cast_json(raw, t))
    integer = d.cast_json(raw, _BIGINT)
    # The integer in its range, or NULL: what the arithmetic below reads (level 1).
    e = f"_e_{alias}"
    if semantic in EPOCH_UNITS:
        per_second = EPOCH_UNITS[semantic]
        levels = [{e: _in_range(integer, *_epoch_range(per_second))}]
        return DecodeSql(levels, _land(d, kind, _epoch_to_timestamp(f"f.{e}", per_second), t))
    if semantic in TIME_UNITS:
        per_second = TIME_UNITS[semantic]
        levels = [{e: _in_range(integer, 0, 86_400 * per_second - 1)}]
        return DecodeSql(levels, f"CAST({_epoch_to_timestamp(f'f.{e}', per_second)} AS time)")
    if semantic == Semantic.DATE:
        levels = [{e: _in_range(integer, MIN_EPOCH_DAYS, MAX_EPOCH_DAYS)}]
        return DecodeSql(levels, _land(d, kind, d.epoch_days_to_date(f"f.{e}"), t))
    if semantic == Semantic.ZONED_TIMESTAMP:
        levels, value = _zoned_levels(d, raw, alias)
        return DecodeSql(levels, _land(d, kind, value, t))
    if semantic == Semantic.JSON:
        levels, text, named = _text(d, raw, alias)
        if t.family == "super":
            value = f"CASE WHEN {d.json_is_string(raw)} THEN {d.parse_json_text(text)} END"
            return DecodeSql(levels, value, text if named else None)
        # The JSON text itself, when it is JSON (invalid text is quarantined, as for SUPER).
        valid = f"{d.json_is_string(raw)} AND {d.parse_json_text(text)} IS NOT NULL"
        value = d.cast_text(raw, text, t) if named else d.cast_json(raw, t)
        return DecodeSql(levels, f"CASE WHEN {valid} THEN {value} END", text if named else None)
    if semantic == Semantic.DECIMAL:
        levels = _decimal_levels(d, raw, alias, col.scale or 0)
        return DecodeSql(levels, _land(d, kind, f"f._t_{alias}", t))
    # VariableScaleDecimal: {"scale": n, "value": base64}; the scale travels with the value.
    levels = _decimal_levels(d, d.json_get(raw, "value"), alias, f"f._k_{alias}")
    levels[0][f"_k_{alias}"] = d.cast_json(d.json_get(raw, "scale"), _INTEGER)
    return DecodeSql(levels, _land(d, kind, f"f._t_{alias}", t))
