"""A column added to a table, filled for the rows already there.

The stream relation keeps the history of the topic (the streaming MV holds what the topic
retains; locally every ingested record). The revision that adds a column reads the row
images of the key's retained records again and converts the field exactly as the procedure
does (the same field access, semantic decoding and type conversion). Each stored row takes
the value of the newest record of its key at or before its position that carries a value:
the TOAST placeholder (`__debezium_unavailable_value`) means "unchanged", so an earlier
record holds the value. At or before: a lower `_source_pos`; the same one, when the
procedure read the record and did not quarantine it (the record that wrote the row, a
change of the same transaction before it, or a copy a restart re-sent); where positions
are missing, the record that wrote the row (`_kafka_partition`, `_kafka_offset`) or one
earlier in Kafka order. Records after the stored position (stale, quarantined or not yet
synced) never count. Kafka order is the procedure's (sync/sql/procedure/ordering.py): a
key's records span two partitions once the topic's partition count grows, so across
partitions the Kafka time decides, then the partition. Newest is ranked as the procedure
ranks a key's records (`rank_order`, `kafka_order` over `kafka_time`, here over the
retained records of each partition); at or before the record that wrote the row is
judged as the procedure judges a record against a stored row (`kafka_later`, the
records' Kafka timestamps, the row's read from the stream). A value that does not
convert, or a field the record lacks, leaves the column NULL.

Where every retained record carries the placeholder, the value is unknown: the row stays
NULL, and `unknown_values_sql` counts such rows (the record that wrote them carries the
placeholder and the column is NULL: PostgreSQL never TOASTs a NULL), which `status` and
`deploy` show.
"""

from __future__ import annotations

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.apply import key_match
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.envelope import envelope_sql, source_sql, unwrap_schema
from sync.sql.names import QUARANTINE, table_names
from sync.sql.policy import newest_key_sql, policy_value_sql
from sync.sql.procedure import rank_order, raw_field_sql, read_as_text, toastable, unavailable_sql
from sync.sql.procedure.ordering import kafka_later, kafka_order, kafka_time
from sync.sql.procedure.text import indent
from sync.sql.semantic import check_column, decode_sql


def _nest(d: PostgresDialect, select: str, inner: str) -> str:
    """`select` over the subquery `inner` (fenced, so each level is evaluated once)."""
    body = f"{inner}\n{d.subquery_fence}" if d.subquery_fence else inner
    return f"{select}\nFROM (\n" + "\n".join("  " + line if line else line for line in body.splitlines()) + "\n) f"


def _indent(text: str) -> str:
    return "\n".join("  " + line if line else line for line in text.splitlines())


def _raw(col: ColumnConfig) -> str:
    return f"j__{col.target_name}"


def _images(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, cols: list[ColumnConfig], where: str = "") -> str:
    """The stream's records (`where` over the stream row `s`) with the fields of `cols`,
    read from the row image (`before` for a delete); without `where` (the fill), also their
    source position and `settled`: 1 when the procedure read the record (at or below the
    watermark) and did not quarantine it."""
    n = table_names(pipeline, table)
    stream = d.qualified(n.schema, n.stream)
    carried = "f.kafka_partition, f.kafka_offset"
    if where:
        records = (
            f"SELECT s.kafka_partition, s.kafka_offset,\n       {unwrap_schema(d, 's.payload')} AS env\nFROM {stream} s{where}"
        )
    else:
        carried += ", f.kafka_timestamp, f.kafka_time, f.settled"
        quarantined = (
            f"SELECT DISTINCT kafka_partition, kafka_offset FROM {d.qualified(n.schema, QUARANTINE)}"
            f" WHERE table_name = {quote_literal(table.name)}"
        )
        records = (
            f"SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp,\n       {unwrap_schema(d, 's.payload')} AS env,\n"
            f"       {indent(kafka_time('s.'), 7).lstrip()} AS kafka_time,\n"
            "       CASE WHEN s.kafka_offset <= w.last_offset AND q.kafka_offset IS NULL THEN 1 ELSE 0 END AS settled\n"
            f"FROM {stream} s\n"
            f"LEFT JOIN {d.qualified(n.schema, n.watermark)} w ON w.kafka_partition = s.kafka_partition\n"
            f"LEFT JOIN ({quarantined}) q\n"
            "  ON q.kafka_partition = s.kafka_partition AND q.kafka_offset = s.kafka_offset"
        )
    env = envelope_sql(d, table, "f.env")
    level = _nest(d, f"SELECT {carried},\n       {env.image} AS img,\n       {env.source} AS src", records)
    fields = [f"{raw_field_sql(d, 'f.img', c)} AS {d.q(_raw(c))}" for c in cols]
    if not where:
        fields.insert(0, f"{source_sql(d, table, 'f.src').position} AS source_pos")
    return _nest(d, f"SELECT {carried},\n" + ",\n".join("       " + f for f in fields), level)


def _typed(d: PostgresDialect, table: TableConfig, level: str, cols: list[ColumnConfig]) -> tuple[str, dict[str, str]]:
    """`level` with the intermediate values the conversion of `cols` needs; and each
    column's converted value over it (alias `f`)."""
    values: dict[str, str] = {}
    depth: list[dict[str, str]] = []
    for i, col in enumerate(cols):
        check_column(col, table.name)
        raw = f"f.{d.q(_raw(col))}"
        if read_as_text(d, col):
            values[col.target_name] = d.text_to_char(raw, col.sql_type)
            continue
        decoded = decode_sql(d, col, raw, f"c{i}")
        for n, extra in enumerate(decoded.levels):
            if n == len(depth):
                depth.append({})
            depth[n].update(extra)
        values[col.target_name] = decoded.value
    for extra in depth:
        level = _nest(d, "SELECT f.*,\n" + ",\n".join(f"       {expr} AS {d.q(alias)}" for alias, expr in extra.items()), level)
    return level, values


def column_fill_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, col: ColumnConfig) -> str:
    """UPDATE of the target that sets `col` from the newest record of each row's key, at
    or before the row's position, that carries a value (not the TOAST placeholder)."""
    if table.is_keyless:
        return keyless_fill_sql(d, pipeline, table, col)
    q = d.q
    n = table_names(pipeline, table)
    target = d.qualified(n.schema, n.target)
    keys = [k.target_name for k in table.key_columns]
    level, values = _typed(d, table, _images(d, pipeline, table, [*table.key_columns, col]), [*table.key_columns, col])
    raw = f"f.{q(_raw(col))}"
    carries = f"\nWHERE NOT {unavailable_sql(d, raw, col)}" if toastable(col) else ""
    key_values = ",\n".join(f"       {values[k]} AS {q(k)}" for k in keys)
    candidates = (
        _nest(
            d,
            "SELECT f.kafka_partition AS _kafka_partition, f.kafka_offset AS _kafka_offset, f.kafka_timestamp AS _kafka_timestamp,\n"
            f"       f.kafka_time, f.source_pos, f.settled,\n{key_values},\n"
            f"       {policy_value_sql(d, col, values[col.target_name], newest_key_sql(d, pipeline))} AS value",
            level,
        )
        + carries
    )
    # At or before the stored row's position: a lower position; the same position, read and
    # not quarantined (the record that wrote the row, a tied change before it, or a re-sent
    # copy of it); or (positions equal or missing) the record that wrote the row or one
    # earlier in Kafka order (`m`: that record in the stream, for its Kafka timestamp).
    earlier = kafka_later("w", "m.kafka_timestamp", "c", "c._kafka_timestamp")
    at_or_before = (
        "(c.source_pos < w._source_pos\n"
        "       OR (c.source_pos = w._source_pos AND c.settled = 1)\n"
        "       OR ((c.source_pos = w._source_pos OR c.source_pos IS NULL OR w._source_pos IS NULL)\n"
        "           AND (c._kafka_partition = w._kafka_partition AND c._kafka_offset = w._kafka_offset\n"
        f"                OR {indent(earlier, 16).lstrip()})))"
    )
    key_list = ", ".join(f"w.{q(k)}" for k in keys)
    newest = rank_order("c.source_pos", kafka_order("c.kafka_time", "c._kafka_partition", "c._kafka_offset"))
    ranked = (
        f"SELECT {key_list}, c.value,\n"
        f"       ROW_NUMBER() OVER (PARTITION BY {key_list}\n"
        f"         ORDER BY {newest}) AS rn\n"
        f"FROM (\n{_indent(candidates)}\n) c\n"
        f"JOIN {target} w ON {key_match(d, keys, 'w', 'c')}\n"
        f"LEFT JOIN {d.qualified(n.schema, n.stream)} m ON m.kafka_partition = w._kafka_partition AND m.kafka_offset = w._kafka_offset\n"
        f"WHERE {at_or_before}"
    )
    return (
        f"-- {table.name}.{col.target_name} for the rows already stored: the value of the newest record of the\n"
        "-- key at or before the row's position that carries one (the TOAST placeholder means unchanged);\n"
        "-- NULL when no retained record does or the value does not convert.\n"
        f"UPDATE {target} t SET {q(col.target_name)} = v.value\n"
        f"FROM (\n{_indent(ranked)}\n) v\n"
        f"WHERE {key_match(d, keys, 't', 'v')} AND v.rn = 1\n"
        "  AND v.value IS NOT NULL;"
    )


def keyless_fill_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, col: ColumnConfig) -> str:
    """A table without a primary key: each stored row takes the value of the record that
    wrote it (its `_kafka_partition`, `_kafka_offset`), the only record that is that row."""
    q = d.q
    n = table_names(pipeline, table)
    target = d.qualified(n.schema, n.target)
    writers = (
        f"\nWHERE EXISTS (SELECT 1 FROM {target} t WHERE t._kafka_partition = s.kafka_partition"
        " AND t._kafka_offset = s.kafka_offset)"
    )
    level, values = _typed(d, table, _images(d, pipeline, table, [col], writers), [col])
    records = _nest(d, f"SELECT f.kafka_partition, f.kafka_offset, {values[col.target_name]} AS value", level)
    return (
        f"-- {table.name}.{col.target_name} for the rows already stored (no primary key): the value of the\n"
        "-- record that wrote each row; NULL when it lacks the field or the value does not convert.\n"
        f"UPDATE {target} t SET {q(col.target_name)} = v.value\n"
        f"FROM (\n{_indent(records)}\n) v\n"
        "WHERE t._kafka_partition = v.kafka_partition AND t._kafka_offset = v.kafka_offset\n"
        "  AND v.value IS NOT NULL;"
    )


def unknown_values_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str | None:
    """One row: per TOAST-able column, the stored rows whose value is unknown (NULL, and the
    record that wrote them carries the placeholder); None when the table has no such column."""
    cols = [c for c in table.value_columns if toastable(c)]
    if not cols:
        return None
    q = d.q
    n = table_names(pipeline, table)
    target = d.qualified(n.schema, n.target)
    any_null = " OR ".join(f"t.{q(c.target_name)} IS NULL" for c in cols)
    writers = f"\nWHERE EXISTS (SELECT 1 FROM {target} t WHERE t._kafka_partition = s.kafka_partition\n  AND t._kafka_offset = s.kafka_offset AND ({any_null}))"
    counts = ",\n       ".join(
        f"COUNT(CASE WHEN t.{q(c.target_name)} IS NULL AND {unavailable_sql(d, 'r.' + q(_raw(c)), c)} THEN 1 END)" for c in cols
    )
    return (
        f"SELECT {counts}\n"
        f"FROM {target} t\n"
        f"JOIN (\n{_indent(_images(d, pipeline, table, cols, writers))}\n) r\n"
        "  ON r.kafka_partition = t._kafka_partition AND r.kafka_offset = t._kafka_offset;"
    )
