"""How a record's fields are read: once each, as text or as JSON, from the row image or
the Kafka key; which of them may hold Debezium's TOAST placeholder; and the row images
the schema-drift step reads."""

from __future__ import annotations

from sync.config import ColumnConfig, TableConfig
from sync.debezium.vocabulary import TOAST_PLACEHOLDER_TEXTS
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.policy import known_fields, redacted_image_sql
from sync.sql.semantic import DecodeSql

TOASTABLE_FAMILIES = ("char", "varchar", "super", "varbyte")


# The stage query's names for a column's values, by the column's position (`v0`: the
# first value column, `i0`/`k0`: the first key column read from the row image / the Kafka
# key): short, unique within 63 characters, and (starting with `_`) never a target column.


def raw_alias(i: int) -> str:
    """The `i`-th value field as read from the row image."""
    return f"_j_v{i}"


def image_alias(i: int) -> str:
    """The `i`-th key field as read from the row image."""
    return f"_j_i{i}"


def key_alias(i: int) -> str:
    """The `i`-th key field as read from the Kafka key."""
    return f"_j_k{i}"


def mark_alias(i: int) -> str:
    """Whether the `i`-th value field holds the TOAST placeholder."""
    return f"_u_v{i}"


def merged_levels(decoded: list[DecodeSql]) -> list[dict[str, str]]:
    """The intermediate values of all decoded columns, merged depth by depth."""
    depth = max((len(r.levels) for r in decoded), default=0)
    return [{alias: expr for r in decoded if i < len(r.levels) for alias, expr in r.levels[i].items()} for i in range(depth)]


def drift_image_sql(d: PostgresDialect, table: TableConfig) -> str:
    """6. The row image of a c/r/u event whose fields differ from the configured ones, else
    NULL: the schema-drift statement reads only these. An image with every configured
    field (non-null) and nothing else has no drift; anything else is checked in full."""
    keys = [i for i, c in enumerate(table.key_columns) if c in table.image_key_columns]
    present = [f"f.{image_alias(i)} IS NOT NULL" for i in keys]
    present += [f"f.{raw_alias(i)} IS NOT NULL" for i in range(len(table.value_columns))]
    exact = " AND ".join([*present, d.object_has_only_keys("f._img", known_fields(table))])
    image = redacted_image_sql(d, table, "f._img")  # column policies: no clear value in the stage
    return f"CASE WHEN f._op IN ('c', 'r', 'u') AND {d.json_is_object('f._img')} AND NOT ({exact}) THEN {image} END"


def toastable(col: ColumnConfig) -> bool:
    """Columns PostgreSQL may store out of line (TOAST), so Debezium may send the placeholder."""
    return col.sql_type.family in TOASTABLE_FAMILIES


def has_toast(table: TableConfig) -> bool:
    return any(toastable(c) for c in table.value_columns)


def read_as_text(d: PostgresDialect, col: ColumnConfig) -> bool:
    """Whether the column's field is read as text (`->>`) rather than as JSON."""
    return d.text_fields and col.semantic is None and col.sql_type.family in ("char", "varchar")


def raw_field_sql(d: PostgresDialect, obj: str, col: ColumnConfig) -> str:
    """The column's field of a JSON object, read once: as text or as JSON."""
    return d.json_get_text(obj, col.name) if read_as_text(d, col) else d.json_get(obj, col.name)


def kafka_key_field_sql(d: PostgresDialect, table: TableConfig, col: ColumnConfig) -> str:
    """A key field from the Kafka key: a member of the key object, or, for a one-column
    key, the key itself when it is a bare value (ExtractField$Key, or a producer keying
    by the id)."""
    member = raw_field_sql(d, "f._key_env", col)
    if len(table.key_columns) > 1:
        return member
    bare = d.json_scalar_text("f._key_env") if read_as_text(d, col) else "f._key_env"
    return f"CASE WHEN {d.json_is_object('f._key_env')} THEN {member} ELSE {bare} END"


def raw_is_null(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """The field is missing or JSON null (read as text, both are NULL)."""
    return f"{raw} IS NULL" if read_as_text(d, col) else d.json_is_null(raw)


def placeholder_sql(text: str) -> str:
    """True when the field's text is the placeholder: keep the stored value of the column."""
    forms = ", ".join(quote_literal(f) for f in TOAST_PLACEHOLDER_TEXTS)
    return f"COALESCE({text} IN ({forms}), false)"


def unavailable_sql(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """`placeholder_sql` of the field `raw`."""
    return placeholder_sql(raw if read_as_text(d, col) else d.json_number_text(raw))


def named_texts(d: PostgresDialect, obj: str, fields: list[str], prefix: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The text of each of the `fields` of the JSON object `obj`, named once where the
    dialect names texts (`text_levels`): the levels that compute them, and the name of each
    field's text (no levels and no names where the dialect reads a member as text in place)."""
    levels: list[DecodeSql] = []
    named = {}
    for i, field in enumerate(fields):
        text = d.text_levels(d.json_get(obj, field), f"{prefix}{i}")
        if text is not None:
            levels.append(DecodeSql(text[0]))
            named[field] = text[1]
    return merged_levels(levels), named
