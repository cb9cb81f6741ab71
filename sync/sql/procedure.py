"""`incremental_sync_<table>()`: the procedure that merges a topic's new records into its
target table. One text for both dialects; the dialect supplies JSON access, casts and a
handful of spellings. The numbered comments follow the procedure contract in DESIGN.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.dialects import PostgresDialect, quote_literal
from sync.sql.envelope import envelope_sql, source_sql, unwrap_schema
from sync.sql.semantic import DecodeSql, check_column, decode_sql
from sync.sql.names import QUARANTINE, RUN_LOG, SCHEMA_DRIFT, table_names
from sync.sql.types import SqlType

_BIGINT = SqlType("bigint")  # source.ts_ms: milliseconds since the epoch


@dataclass(frozen=True)
class Check:
    """One classification rule: records matching `condition` get `action` and `reason`."""

    condition: str
    action: str
    reason: str  # SQL expression


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


def _fenced(d: PostgresDialect, level: str) -> str:
    """A nested level evaluated once per record, not re-expanded at each reference above."""
    return f"{level}\n{d.subquery_fence}" if d.subquery_fence else level


def _raw_alias(col: ColumnConfig) -> str:
    return f"j__{col.target_name}"


def _image_alias(col: ColumnConfig) -> str:
    return f"ji__{col.target_name}"


def _key_alias(col: ColumnConfig) -> str:
    return f"jk__{col.target_name}"


def _mark_alias(col: ColumnConfig) -> str:
    return f"u__{col.target_name}"


def _merged_levels(decoded: list[DecodeSql]) -> list[dict[str, str]]:
    """The intermediate values of all decoded columns, merged depth by depth."""
    depth = max((len(r.levels) for r in decoded), default=0)
    return [{alias: expr for r in decoded if i < len(r.levels) for alias, expr in r.levels[i].items()} for i in range(depth)]


def drift_image_sql(d: PostgresDialect, table: TableConfig) -> str:
    """6. The row image of a c/r/u event whose fields differ from the configured ones, else
    NULL: the schema-drift statement reads only these. An image with every configured
    field (non-null) and nothing else has no drift; anything else is checked in full."""
    present = [f"f.{d.q(_image_alias(c))} IS NOT NULL" for c in table.key_columns]
    present += [f"f.{d.q(_raw_alias(c))} IS NOT NULL" for c in table.value_columns]
    exact = " AND ".join([*present, d.object_has_only_keys("f.img", [c.name for c in table.columns])])
    return f"CASE WHEN f.op IN ('c', 'r', 'u') AND {d.json_is_object('f.img')} AND NOT ({exact}) THEN f.img END"


# The TOAST placeholder in its text, bytea (base64) and text[] forms (reference/debezium.md).
UNAVAILABLE_FORMS = ("__debezium_unavailable_value", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", '["__debezium_unavailable_value"]')
TOASTABLE_FAMILIES = ("char", "varchar", "super", "varbyte")


def toastable(col: ColumnConfig) -> bool:
    """Columns PostgreSQL may store out of line (TOAST), so Debezium may send the placeholder."""
    return col.sql_type.family in TOASTABLE_FAMILIES


def read_as_text(d: PostgresDialect, col: ColumnConfig) -> bool:
    """Whether the column's field is read as text (`->>`) rather than as JSON."""
    return d.text_fields and col.semantic is None and col.sql_type.family in ("char", "varchar")


def raw_field_sql(d: PostgresDialect, obj: str, col: ColumnConfig) -> str:
    """The column's field of a JSON object, read once: as text or as JSON."""
    return d.json_get_text(obj, col.name) if read_as_text(d, col) else d.json_get(obj, col.name)


def raw_is_null(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """The field is missing or JSON null (read as text, both are NULL)."""
    return f"{raw} IS NULL" if read_as_text(d, col) else d.json_is_null(raw)


def unavailable_sql(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """True when the field is the placeholder: keep the stored value of the column."""
    forms = ", ".join(quote_literal(f) for f in UNAVAILABLE_FORMS)
    text = raw if read_as_text(d, col) else d.json_number_text(raw)
    return f"COALESCE({text} IN ({forms}), false)"


def key_reason(col: ColumnConfig) -> str:
    """The quarantine reason of a key field that is missing or does not convert (the
    backfill rejects with the same words)."""
    encoding = f"{col.semantic} " if col.semantic else ""
    return f"primary key field {col.name} is missing or not a {encoding}{col.sql_type}"


def field_reason(col: ColumnConfig) -> str:
    """The quarantine reason of a present value that does not convert to its column."""
    encoding = f"from {col.semantic} " if col.semantic else ""
    return f"field {col.name} does not convert {encoding}to {col.sql_type}"


def classification_checks(d: PostgresDialect, table: TableConfig) -> list[Check]:
    """Ordered rules over the typed record `t`; the first match decides."""
    q = d.q
    tombstone_action = "delete" if table.format == "debezium-unwrap" else "tombstone"
    key_present = " AND ".join(f"t.{q(c.target_name)} IS NOT NULL" for c in table.key_columns)
    checks = [
        Check("t.raw_value IS NOT NULL", "quarantine", "'value is not valid JSON'"),
    ]
    if tombstone_action == "delete":
        checks.append(Check(f"{d.json_is_null('t.env')} AND {key_present}", "delete", "NULL"))
    checks += [
        Check(d.json_is_null("t.env"), "tombstone", "NULL"),
        Check(f"NOT {d.json_is_object('t.env')}", "quarantine", "'value is not a JSON object'"),
        Check("t.op IS NULL", "quarantine", "'no op field: not a Debezium change event'"),
        Check("t.op = 't'", "truncate", "NULL"),
        Check(
            "t.op NOT IN ('c', 'r', 'u', 'd')",
            "quarantine",
            "'unknown op \"' || SUBSTRING(t.op, 1, 64) || '\"'",
        ),
        # A c/r/u event without an after image would otherwise become a row of NULLs.
        Check(
            f"t.op <> 'd' AND ({d.json_is_null('t.img')} OR NOT {d.json_is_object('t.img')})",
            "quarantine",
            "'no row image: after is missing or not an object'",
        ),
    ]
    for col in table.key_columns:
        checks.append(
            Check(
                f"t.{q(col.target_name)} IS NULL",
                "quarantine",
                quote_literal(key_reason(col)),
            )
        )
    for col in table.value_columns:
        raw = f"t.{q(_raw_alias(col))}"
        keeps_stored = f" AND NOT t.{q(_mark_alias(col))}" if toastable(col) else ""
        checks.append(
            Check(
                f"t.op <> 'd' AND NOT {raw_is_null(d, raw, col)} AND t.{q(col.target_name)} IS NULL{keeps_stored}",
                "quarantine",
                quote_literal(field_reason(col)),
            )
        )
    checks.append(Check("t.op = 'd'", "delete", "NULL"))
    return checks


def _first_match(checks: list[Check]) -> str:
    """The number (1, 2, ...) of the first check that matches, 0 when none does: the
    checks run once per record, and action and reason are looked up from the number."""
    lines = ["CASE"]
    lines += [f"  WHEN {chk.condition} THEN {i}" for i, chk in enumerate(checks, start=1)]
    lines += ["  ELSE 0", "END"]
    return "\n".join(lines)


def _lookup(number: str, values: list[str], default: str) -> str:
    """values[n - 1] for the check numbered n (see `_first_match`), else `default`."""
    lines = [f"CASE {number}", *[f"  WHEN {i} THEN {v}" for i, v in enumerate(values, start=1)], f"  ELSE {default}", "END"]
    return "\n".join(lines)


def rank_order(position: str, partition: str, offset: str) -> str:
    """4. The order of a key's events, newest first: source position, then Kafka order."""
    return f"{position} DESC NULLS LAST, {partition} DESC, {offset} DESC"


def positionless(prefix: str = "") -> str:
    """An upsert or delete without a source position (columns of the stage row `prefix`)."""
    return f"{prefix}_source_pos IS NULL AND {prefix}_action IN ('upsert', 'delete')"


def rerank_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Events without a source position (tombstones, PostgreSQL incremental-snapshot
    reads) come after the row stored for their key, whatever the batch replays before
    them: their rank is raised to the stored position and their keys are ranked again."""
    n = table_names(pipeline, table)
    q = d.q
    stage, target = d.qualified(n.schema, n.stage), d.qualified(n.schema, n.target)
    keys = [c.target_name for c in table.key_columns]

    def match(a: str, b: str) -> str:
        return " AND ".join(f"{a}.{q(k)} = {b}.{q(k)}" for k in keys)

    order = rank_order("x._rank_pos", "x._kafka_partition", "x._kafka_offset")
    key_list = ", ".join("x." + q(k) for k in keys)
    same_key_positionless = f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {match('y', 'x')})"
    return (
        "-- 4. Events without a source position: each takes the newest position seen before it\n"
        "--    for its key in Kafka order (so it supersedes what precedes it and loses to what\n"
        "--    follows), and ranks after the row stored for its key.\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _rank_pos = r.rank_pos\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               MAX(x._source_pos) OVER (PARTITION BY {key_list}\n"
        "                 ORDER BY x._kafka_partition, x._kafka_offset ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rank_pos\n"
        f"        FROM {stage} x\n"
        "        WHERE x._action IN ('upsert', 'delete')\n"
        f"          AND {same_key_positionless}) r\n"
        f"  WHERE {positionless('s.')}\n"
        "    AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        f"  UPDATE {stage} s SET _rank_pos = t._source_pos\n"
        f"  FROM {target} t\n"
        f"  WHERE {positionless('s.')} AND {match('t', 's')}\n"
        "    AND t._source_pos IS NOT NULL AND (s._rank_pos IS NULL OR s._rank_pos < t._source_pos);\n"
        f"  UPDATE {stage} s SET _rn = r.rn\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               ROW_NUMBER() OVER (PARTITION BY {', '.join('x.' + q(k) for k in keys)} ORDER BY {order}) AS rn\n"
        f"        FROM {stage} x\n"
        "        WHERE x._action IN ('upsert', 'delete')\n"
        f"          AND {same_key_positionless}) r\n"
        "  WHERE s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        "END IF;"
    )


def batch_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The records of this run (past the watermark) with their operation, row image
    (`img`), Kafka key (`key_env`) and source block (`src`)."""
    n = table_names(pipeline, table)
    env = envelope_sql(d, table, "e.env")
    # Level 1: records past the watermark, with the schemas.enable wrapper removed.
    level1 = (
        "SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp, s.refresh_time,\n"
        "       s.payload, s.raw_value,\n"
        f"       {unwrap_schema(d, 's.payload')} AS env,\n"
        f"       {unwrap_schema(d, 's.key_payload')} AS key_env\n"
        f"FROM {d.qualified(n.schema, n.stream)} s\n"
        f"LEFT JOIN {d.qualified(n.schema, n.watermark)} w ON w.kafka_partition = s.kafka_partition\n"
        "WHERE s.refresh_time > v_since\n"
        "  AND s.kafka_offset > COALESCE(w.last_offset, -1)"
    )
    # Level 2: operation, row image and source block, each read once.
    return (
        "SELECT e.kafka_partition, e.kafka_offset, e.kafka_timestamp, e.refresh_time,\n"
        "       e.payload, e.raw_value, e.env, e.key_env,\n"
        f"       {env.op} AS op,\n"
        f"       {env.image} AS img,\n"
        f"       {env.source} AS src\n"
        f"FROM (\n{_indent(_fenced(d, level1), 2)}\n) e"
    )


def _record_columns(*extra: str) -> str:
    return ", ".join(["f.kafka_partition", "f.kafka_offset", "f.kafka_timestamp", "f.refresh_time", *extra])


def stage_insert_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """One INSERT ... SELECT that reads every record past the watermark, classifies it,
    converts its fields to the column types and ranks it within its key."""
    n = table_names(pipeline, table)
    q = d.q
    cols = table.columns

    stage_columns = [
        "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_refresh_time",
        "_op", "_action", "_reason", "_rn", "_source_ts", "_source_pos", "_rank_pos",
        *[c.target_name for c in cols],
        "_unavailable",
        "_payload", "_raw_value", "_drift_img",
    ]

    # Level 3: source time and position, and every field as JSON, each navigated once;
    # everything above reads these columns.
    source = source_sql(d, table, "f.src")
    raw_lines = [f"{source.ts_ms} AS source_ts_ms", f"{source.position} AS source_pos"]
    for col in table.key_columns:
        raw_lines.append(f"{raw_field_sql(d, 'f.img', col)} AS {q(_image_alias(col))}")
        raw_lines.append(f"{raw_field_sql(d, 'f.key_env', col)} AS {q(_key_alias(col))}")
    for col in table.value_columns:
        raw_lines.append(f"{raw_field_sql(d, 'f.img', col)} AS {q(_raw_alias(col))}")
    level_fields = (
        f"SELECT {_record_columns('f.payload', 'f.raw_value', 'f.env', 'f.img', 'f.op')},\n"
        + ",\n".join("       " + line for line in raw_lines)
        + f"\nFROM (\n{_indent(_fenced(d, batch_sql(d, pipeline, table)), 2)}\n) f"
    )

    # Level 4: each field decoded/converted to its column type (NULL when it does not
    # convert; the classification tells that apart from a real NULL). Keys fall back to the
    # Kafka key. Semantic types may need intermediate values, and TOAST placeholders are
    # marked once per field: levels between 3 and 4, built below.
    decoded: list[DecodeSql] = []

    def decode(col: ColumnConfig, raw: str, alias: str) -> str:
        check_column(col, table.name)
        if read_as_text(d, col):
            return d.text_to_char(raw, col.sql_type)
        result = decode_sql(d, col, raw, alias)
        decoded.append(result)
        return result.value

    field_lines = []
    # Intermediate values are named by column position: short, and unique within 63 characters.
    for i, col in enumerate(table.key_columns):
        from_image = decode(col, f"f.{q(_image_alias(col))}", f"i{i}")
        from_key = decode(col, f"f.{q(_key_alias(col))}", f"k{i}")
        field_lines.append(f"COALESCE({from_image},\n         {from_key}) AS {q(col.target_name)}")
    marks: dict[str, str] = {}  # alias -> SQL: the field holds the TOAST placeholder
    unavailable = []
    for i, col in enumerate(table.value_columns):
        raw = f"f.{q(_raw_alias(col))}"
        value = decode(col, raw, f"v{i}")
        field_lines.append(f"{raw} AS {q(_raw_alias(col))}")
        if toastable(col):
            # 3. (TOAST) the placeholder keeps the stored value: NULL here, filled in later.
            mark = f"f.{q(_mark_alias(col))}"
            marks[_mark_alias(col)] = unavailable_sql(d, raw, col)
            value = f"CASE WHEN {mark} THEN NULL ELSE {value} END"
            unavailable.append(f"CASE WHEN {mark} THEN {quote_literal(col.target_name + '|')} ELSE '' END")
            field_lines.append(f"{mark} AS {q(_mark_alias(col))}")
        field_lines.append(f"{value} AS {q(col.target_name)}")
    unavailable_list = "NULLIF('|' || " + " || ".join(unavailable) + ", '|')" if unavailable else "NULL"
    field_lines.append(f"{unavailable_list} AS unavailable")
    field_lines.append(f"{drift_image_sql(d, table)} AS drift_img")
    # source.ts_ms as a number here; it becomes a timestamp in the outer SELECT, which reads
    # it twice: on PostgreSQL the conversion would otherwise run twice per record.
    source_ts_ms = d.cast_json("f.source_ts_ms", _BIGINT)
    intermediate = _merged_levels(decoded)
    if marks:
        intermediate = intermediate or [{}]
        intermediate[0] = {**marks, **intermediate[0]}
    level_decoded = level_fields
    for level in intermediate:
        level_decoded = (
            f"SELECT f.*,\n"
            + ",\n".join(f"       {expr} AS {q(alias)}" for alias, expr in level.items())
            + f"\nFROM (\n{_indent(_fenced(d, level_decoded), 2)}\n) f"
        )
    level_typed = (
        f"SELECT {_record_columns('f.payload', 'f.raw_value', 'f.env', 'f.img', 'f.op', 'f.source_pos')},\n"
        f"       {source_ts_ms} AS source_ts_ms,\n"
        + ",\n".join("       " + line for line in field_lines)
        + f"\nFROM (\n{_indent(_fenced(d, level_decoded), 2)}\n) f"
    )

    checks = classification_checks(d, table)
    # Only what the stage needs goes on: the JSON values (envelope, image) stay behind, and
    # the payload is kept for quarantined records only, so the sort above does not carry it.
    carried = ",\n".join(
        "       t." + name
        for name in [
            "kafka_partition", "kafka_offset", "kafka_timestamp", "refresh_time", "raw_value",
            "op", "source_ts_ms", "source_pos", "unavailable", "drift_img", *[q(col.target_name) for col in cols],
        ]
    )
    classified = (
        f"SELECT\n{carried},\n"
        "       t.payload,\n"
        f"{_indent(_first_match(checks), 7)} AS check_no\n"
        f"FROM (\n{_indent(_fenced(d, level_typed), 2)}\n) t"
    )
    quarantined = ", ".join(str(i) for i, chk in enumerate(checks, start=1) if chk.action == "quarantine")
    level_classified = (
        f"SELECT\n{carried},\n"
        f"{_indent(_lookup('t.check_no', [quote_literal(chk.action) for chk in checks], quote_literal('upsert')), 7)} AS action,\n"
        f"{_indent(_lookup('t.check_no', [chk.reason for chk in checks], 'NULL'), 7)} AS reason,\n"
        f"       CASE WHEN t.check_no IN ({quarantined}) THEN t.payload END AS quarantine_payload\n"
        f"FROM (\n{_indent(_fenced(d, classified), 2)}\n) t"
    )

    key_list = ", ".join(f"c.{q(k.target_name)}" for k in table.key_columns)
    if table.order_by == "kafka":
        order, rank_pos = "c.kafka_partition DESC, c.kafka_offset DESC", "NULL"
    else:
        # Events without a source position rank last here; the rare batches that hold
        # them are ranked again after the stage is written (`rerank_sql`).
        order, rank_pos = rank_order("c.source_pos", "c.kafka_partition", "c.kafka_offset"), "c.source_pos"
    select_columns = [
        "c.kafka_partition", "c.kafka_offset", "c.kafka_timestamp", "c.refresh_time",
        "SUBSTRING(c.op, 1, 64)", "c.action", "c.reason",
        # 4. Latest event per key wins; ROW_NUMBER, never RANK: a tie must not yield two rows.
        f"ROW_NUMBER() OVER (\n         PARTITION BY CASE WHEN c.action IN ('upsert', 'delete') THEN 1 ELSE 0 END, {key_list}\n"
        f"         ORDER BY {order})",
        d.epoch_ms_to_timestamp("c.source_ts_ms"), "c.source_pos", rank_pos,
        *[f"c.{q(col.target_name)}" for col in cols],
        "c.unavailable",
        "c.quarantine_payload",
        "CASE WHEN c.action = 'quarantine' THEN c.raw_value END",
        "c.drift_img",
    ]
    return (
        f"INSERT INTO {d.qualified(n.schema, n.stage)} (\n"
        + _indent(",\n".join(q(c) for c in stage_columns), 2)
        + "\n)\nSELECT "
        + ",\n       ".join(select_columns)
        + f"\nFROM (\n{_indent(_fenced(d, level_classified), 2)}\n) c;"
    )


def toast_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, toast_cols: list[str]) -> str:
    """Winners whose columns carried the TOAST placeholder take the value from the newest
    earlier event of the batch that had it, else keep the value stored in the target."""
    n = table_names(pipeline, table)
    q = d.q
    stage, target = d.qualified(n.schema, n.stage), d.qualified(n.schema, n.target)
    keys = [c.target_name for c in table.key_columns]
    key_cols = ", ".join(q(k) for k in keys)

    def match(a: str, b: str) -> str:
        return " AND ".join(f"{a}.{q(k)} = {b}.{q(k)}" for k in keys)

    lines = [
        "-- 3. (TOAST) Unchanged out-of-line values arrive as a placeholder and keep what is known.",
        "IF v_unavailable > 0 THEN",
    ]
    for col in toast_cols:
        mark = quote_literal(f"%|{col}|%")
        lines.append(
            _indent(
                f"UPDATE {stage} s SET {q(col)} = p.{q(col)}, _unavailable = REPLACE(s._unavailable, {quote_literal('|' + col + '|')}, '|')\n"
                f"FROM {stage} p,\n"
                f"     (SELECT {key_cols}, MIN(_rn) AS rn FROM {stage}\n"
                f"      WHERE _action = 'upsert' AND _rn > 1 AND COALESCE(_unavailable, '') NOT LIKE {mark}\n"
                f"      GROUP BY {key_cols}) m\n"
                f"WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable LIKE {mark}\n"
                f"  AND {match('m', 's')} AND {match('p', 's')} AND p._rn = m.rn AND p._action = 'upsert';",
                2,
            )
        )
    keep = ",\n       ".join(
        f"{q(c)} = CASE WHEN s._unavailable LIKE {quote_literal(f'%|{c}|%')} THEN t.{q(c)} ELSE s.{q(c)} END" for c in toast_cols
    )
    lines.append(
        _indent(
            f"UPDATE {stage} s SET {keep}\n"
            f"FROM {target} t\n"
            f"WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable IS NOT NULL\n  AND {match('t', 's')};",
            2,
        )
    )
    lines.append("END IF;")
    return "\n".join(lines)


def schema_drift_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """6. Schema drift over this run's row images (c/r/u): fields the pipeline file does not
    list (counted, never dropped without a trace) and configured fields the events lack.
    Reads the images the stage query set aside (`drift_image_sql`): the others have exactly
    the configured fields, so counts over these alone are the counts over the batch. One
    pass over their member names (jsonb_object_keys / PartiQL UNPIVOT); the number of
    images rides along as a window count."""
    n = table_names(pipeline, table)
    images = (
        "SELECT s._drift_img AS img, COUNT(*) OVER () AS images\n"
        f"FROM {d.qualified(n.schema, n.stage)} s\n"
        "WHERE s._drift_img IS NOT NULL"
    )
    keys_join, field = d.object_keys_join("x0.img", "x")
    configured = "".join(f"\n            UNION ALL SELECT {quote_literal(c.name)}, 1, 0, 0" for c in table.columns)
    return (
        f"INSERT INTO {d.qualified(n.schema, SCHEMA_DRIFT)} (table_name, run_started_at, kind, field, events)\n"
        f"SELECT {quote_literal(table.name)}, v_started,\n"
        "       CASE WHEN k.configured = 1 THEN 'missing' ELSE 'unknown' END, k.field,\n"
        "       CASE WHEN k.configured = 1 THEN k.images - k.seen ELSE k.seen END\n"
        "FROM (SELECT u.field, MAX(u.configured) AS configured, SUM(u.seen) AS seen,\n"
        "             MAX(MAX(u.images)) OVER () AS images\n"
        f"      FROM (SELECT SUBSTRING({field}, 1, 256) AS field, 0 AS configured, 1 AS seen, x0.images\n"
        f"            FROM (\n{_indent(images, 14)}\n            ) x0{keys_join}"
        f"{configured}) u\n"
        "      GROUP BY u.field) k\n"
        "WHERE (k.configured = 1 AND k.seen < k.images)\n"
        "   OR (k.configured = 0 AND SUBSTRING(k.field, 1, 2) <> '__');  -- '__' fields: unwrap metadata"
    )


def procedure_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, origin: str) -> str:
    n = table_names(pipeline, table)
    q = d.q
    qual = lambda name: d.qualified(n.schema, name)  # noqa: E731
    target, stage, wm, deleted = qual(n.target), qual(n.stage), qual(n.watermark), qual(n.deleted_keys)
    keys = [c.target_name for c in table.key_columns]
    key_match = lambda a, b: " AND ".join(f"{a}.{q(k)} = {b}.{q(k)}" for k in keys)  # noqa: E731
    winners = "s._rn = 1 AND s._action IN ('upsert', 'delete')"
    soft = table.delete_mode == "soft"
    source_order = table.order_by != "kafka"
    now = d.now()
    cols = [c.target_name for c in table.columns]
    value_cols = [c.target_name for c in table.value_columns]
    meta_cols = ["_source_ts", "_source_pos", "_kafka_partition", "_kafka_offset", "_synced_at"]
    wm_text = d.string_agg(
        "CAST(kafka_partition AS varchar(20)) || ':' || CAST(last_offset AS varchar(20))", ",", "kafka_partition"
    )

    body: list[str] = []
    add = body.append

    for setting in d.session_settings:
        add("-- 10. Session settings this procedure needs (no cluster parameter change).")
        add(setting)
    add(
        "-- 1. Single flight: a second call waits here until the first commits, then sees its\n"
        "--    watermark, so no record is applied twice.\n"
        f"LOCK TABLE {wm}, {target}{d.lock_mode};"
    )
    add(f"v_started := {now};")
    add(
        f"SELECT MAX(last_refresh_time), {wm_text}\n"
        f"INTO v_since, v_wm_before\nFROM {wm};"
    )
    add("v_since := COALESCE(v_since, TIMESTAMP '1900-01-01 00:00:00');")
    add(
        "-- 2./3. Records past the watermark (refresh_time only prunes), classified, typed\n"
        "--       and ranked per key, into the stage. Everything below reads the stage only."
    )
    add(stage_insert_sql(d, pipeline, table))

    apply_steps: list[str] = []
    step = apply_steps.append
    if source_order:
        step(rerank_sql(d, pipeline, table))
    toast_cols = [c.target_name for c in table.value_columns if toastable(c)]
    if toast_cols:
        step(toast_sql(d, pipeline, table, toast_cols))
    if source_order:
        def stale(held: str) -> str:
            # A lookup of the stored position per winning key (a correlated MAX: at most one
            # row, NULL when there is none), so the cost follows the batch, not the table.
            return (
                f"UPDATE {stage} s SET _action = 'stale'\n"
                f"WHERE {winners} AND s._source_pos IS NOT NULL\n"
                f"  AND s._source_pos <= (SELECT MAX(t._source_pos) FROM {held} t WHERE {key_match('t', 's')});"
            )

        step("-- 5. Never regress: a winner not newer than what is stored for its key is stale.\n" + stale(target))
        if not soft:
            step(stale(deleted))
    if source_order:
        step(
            "-- A winner without a source position was never stale; it is recorded at the position\n"
            "-- it ranked by, so replays of what it superseded stay stale.\n"
            "IF v_positionless > 0 THEN\n"
            f"  UPDATE {stage} SET _source_pos = _rank_pos\n"
            "  WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND _source_pos IS NULL;\n"
            "END IF;"
        )
    if table.on_truncate == "delete":
        precedes = (
            "((x._kafka_partition = s._kafka_partition AND x._kafka_offset > s._kafka_offset)\n"
            "          OR (x._kafka_partition <> s._kafka_partition AND x._kafka_timestamp > s._kafka_timestamp))"
        )
        clear = f"UPDATE {target} SET _deleted = true, _synced_at = {now};" if soft else f"DELETE FROM {target};"
        step(
            "-- Truncate events (on_truncate = 'delete'): rows written before the batch all precede\n"
            "-- the truncate; events of this batch that precede it are void.\n"
            f"SELECT COUNT(*) INTO v_rows FROM {stage} WHERE _action = 'truncate';\n"
            "IF v_rows > 0 THEN\n"
            f"  {clear}\n"
            f"  UPDATE {stage} s SET _action = 'truncated'\n"
            f"  WHERE {winners}\n"
            f"    AND EXISTS (SELECT 1 FROM {stage} x WHERE x._action = 'truncate'\n"
            f"      AND {precedes});\n"
            "END IF;"
        )
    step(
        "SELECT COUNT(CASE WHEN _rn = 1 AND _action = 'upsert' THEN 1 END),\n"
        "       COUNT(CASE WHEN _rn = 1 AND _action = 'delete' THEN 1 END),\n"
        "       COUNT(CASE WHEN _action = 'quarantine' THEN 1 END),\n"
        "       COUNT(CASE WHEN _action = 'tombstone' THEN 1 END),\n"
        "       COUNT(CASE WHEN _action IN ('stale', 'truncated') THEN 1 END),\n"
        "       COUNT(CASE WHEN _rn > 1 AND _action IN ('upsert', 'delete') THEN 1 END),\n"
        "       COUNT(CASE WHEN _action = 'truncate' THEN 1 END),\n"
        f"       {d.seconds_between(now, 'MAX(_kafka_timestamp)')}\n"
        "INTO v_upserted, v_deleted, v_quarantined, v_tombstones, v_stale, v_superseded, v_truncates, v_lag\n"
        f"FROM {stage};"
    )
    insert_cols = ", ".join(q(c) for c in [*cols, *meta_cols, *(["_deleted"] if soft else [])])
    def select_vals(deleted_flag: str) -> str:
        return ", ".join(
            [f"s.{q(c)}" for c in cols]
            + ["s._source_ts", "s._source_pos", "s._kafka_partition", "s._kafka_offset", now]
            + ([deleted_flag] if soft else [])
        )

    if not soft:
        # Redshift's DELETE takes no alias for its target: the key match names it in full.
        step(
            "-- 6. Apply: remove the current row of every key with a winning event (the join is\n"
            "--    on the key, which is the DISTKEY, so it is collocated), then insert the upserts.\n"
            f"DELETE FROM {target}\nUSING {stage} s\nWHERE {winners}\n  AND {key_match(target, 's')};"
        )
        step(
            "-- Deleted keys are remembered, so neither a replay nor a backfill resurrects them.\n"
            f"DELETE FROM {deleted}\nUSING {stage} s\nWHERE {winners}\n  AND {key_match(deleted, 's')};"
        )
        step(
            f"INSERT INTO {deleted} ({', '.join(q(k) for k in keys)}, _source_ts, _source_pos, _kafka_partition, _kafka_offset, _kafka_timestamp, _deleted_at)\n"
            f"SELECT {', '.join('s.' + q(k) for k in keys)}, s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, s._kafka_timestamp, {now}\n"
            f"FROM {stage} s\nWHERE s._rn = 1 AND s._action = 'delete';"
        )
        step(
            f"INSERT INTO {target} ({insert_cols})\n"
            f"SELECT {select_vals('false')}\nFROM {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert';"
        )
    else:
        if value_cols:
            keys_sql = ", ".join(q(k) for k in keys)
            fill = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, p.{q(c)})" for c in value_cols)
            step(
                "-- A delete whose before image holds only the key (REPLICA IDENTITY DEFAULT, unwrap\n"
                "-- rewrite) keeps the values of the newest earlier upsert of the batch.\n"
                f"UPDATE {stage} s SET {fill}\n"
                f"FROM {stage} p,\n"
                f"     (SELECT {keys_sql}, MIN(_rn) AS rn FROM {stage}\n"
                f"      WHERE _action = 'upsert' AND _rn > 1 GROUP BY {keys_sql}) m\n"
                "WHERE s._rn = 1 AND s._action = 'delete'\n"
                f"  AND {key_match('m', 's')} AND {key_match('p', 's')} AND p._rn = m.rn AND p._action = 'upsert';"
            )
            stored = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, t.{q(c)})" for c in value_cols)
            step(
                "-- Without such an upsert, the stored row is the newest earlier state: a delete takes\n"
                "-- its values where the before image has none (never an older value over a newer\n"
                "-- NULL: the stored row is not consulted when the batch updated the key).\n"
                f"UPDATE {stage} s SET {stored}\n"
                f"FROM {target} t\n"
                f"WHERE s._rn = 1 AND s._action = 'delete' AND {key_match('t', 's')}\n"
                f"  AND NOT EXISTS (SELECT 1 FROM {stage} x WHERE x._action = 'upsert' AND x._rn > 1 AND {key_match('x', 's')});"
            )
        step(
            "-- 6. Apply (soft deletes): upserts replace the row; deletes only mark it, keeping\n"
            "--    its last values (or record the key when it was never seen).\n"
            f"DELETE FROM {target}\nUSING {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert'\n  AND {key_match(target, 's')};"
        )
        step(
            f"INSERT INTO {target} ({insert_cols})\n"
            f"SELECT {select_vals('false')}\nFROM {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert';"
        )
        keep = ",\n       ".join(f"{q(c)} = s.{q(c)}" for c in value_cols)
        step(
            "-- A delete keeps the row's last values, completed above.\n"
            f"UPDATE {target} t SET _deleted = true,\n"
            + (f"       {keep},\n" if keep else "")
            + "       _source_ts = s._source_ts, _source_pos = s._source_pos,\n"
            f"       _kafka_partition = s._kafka_partition, _kafka_offset = s._kafka_offset, _synced_at = {now}\n"
            f"FROM {stage} s\nWHERE s._rn = 1 AND s._action = 'delete'\n  AND {key_match('t', 's')};"
        )
        step(
            f"INSERT INTO {target} ({insert_cols})\n"
            f"SELECT {select_vals('true')}\nFROM {stage} s\nWHERE s._rn = 1 AND s._action = 'delete'\n"
            f"  AND NOT EXISTS (SELECT 1 FROM {target} t WHERE {key_match('t', 's')});"
        )
    step(
        "-- 6. Schema drift: unknown fields in the row images, configured fields missing from them\n"
        "--    (only images set aside by the stage query can have either).\n"
        "IF v_drift > 0 THEN\n" + _indent(schema_drift_sql(d, pipeline, table), 2) + "\nEND IF;"
    )
    step(
        "-- 3. Records that cannot be applied are kept with the raw value and the reason.\n"
        "IF v_quarantined > 0 THEN\n"
        f"  INSERT INTO {qual(QUARANTINE)} (table_name, kafka_partition, kafka_offset, kafka_timestamp, reason, payload, raw_value, run_started_at)\n"
        f"  SELECT {quote_literal(table.name)}, _kafka_partition, _kafka_offset, _kafka_timestamp, _reason, _payload, _raw_value, v_started\n"
        f"  FROM {stage}\n  WHERE _action = 'quarantine';\n"
        "END IF;"
    )
    step(
        "-- 7. Advance the per-partition watermark in the same transaction.\n"
        f"UPDATE {wm} w SET last_offset = b.last_offset, last_refresh_time = b.last_refresh_time, updated_at = {now}\n"
        f"FROM (SELECT _kafka_partition, MAX(_kafka_offset) AS last_offset, MAX(_refresh_time) AS last_refresh_time\n"
        f"      FROM {stage} GROUP BY _kafka_partition) b\n"
        "WHERE w.kafka_partition = b._kafka_partition;"
    )
    step(
        "-- Partitions seen for the first time (aggregated first: one probe per partition).\n"
        f"INSERT INTO {wm} (kafka_partition, last_offset, last_refresh_time, updated_at)\n"
        f"SELECT b._kafka_partition, b.last_offset, b.last_refresh_time, {now}\n"
        f"FROM (SELECT _kafka_partition, MAX(_kafka_offset) AS last_offset, MAX(_refresh_time) AS last_refresh_time\n"
        f"      FROM {stage} GROUP BY _kafka_partition) b\n"
        f"WHERE NOT EXISTS (SELECT 1 FROM {wm} w WHERE w.kafka_partition = b._kafka_partition);"
    )
    step(f"-- The stage is empty between runs (DELETE, not TRUNCATE: TRUNCATE would commit).\nDELETE FROM {stage};")

    # One pass counts the batch and tells which of the rarely needed steps it needs.
    counted = {"v_read": "COUNT(*)", "v_drift": "COUNT(_drift_img)"}
    if source_order:
        counted["v_positionless"] = f"COUNT(CASE WHEN {positionless()} THEN 1 END)"
    if toast_cols:
        counted["v_unavailable"] = "COUNT(CASE WHEN _unavailable IS NOT NULL THEN 1 END)"
    add(
        "SELECT " + ",\n       ".join(counted.values())
        + f"\nINTO {', '.join(counted)}\nFROM {stage};"
    )
    if d.analyze_stage:
        add(
            "-- Fresh statistics for a large stage, refilled every run: without them the planner\n"
            "-- takes it for empty and joins it to itself row by row (20k events: 13 s, not 1 s).\n"
            "-- The columns the joins and filters use are enough (a quarter of the full cost).\n"
            f"IF v_read > 1000 THEN\n  ANALYZE {stage} (_action, _rn, {', '.join(q(k) for k in keys)});\nEND IF;"
        )
    add("IF v_read > 0 THEN\n" + _indent("\n".join(apply_steps), 2) + "\nEND IF;")
    add(f"SELECT {wm_text} INTO v_wm_after FROM {wm};")
    add(
        "-- 8. One run-log row per call, also when nothing was new (9.).\n"
        f"INSERT INTO {qual(RUN_LOG)} (table_name, backend_pid, started_at, finished_at, events_read, upserted, deleted,\n"
        "  quarantined, tombstones, stale, superseded, truncates, watermark_before, watermark_after, lag_seconds, status)\n"
        f"VALUES ({quote_literal(table.name)}, PG_BACKEND_PID(), v_started, {now}, v_read, v_upserted, v_deleted,\n"
        "  v_quarantined, v_tombstones, v_stale, v_superseded, v_truncates, v_wm_before, v_wm_after, v_lag, 'ok');"
    )

    declare = [
        "v_started timestamp;",
        "v_since timestamp;",
        f"v_wm_before {d.long_text_type};",
        f"v_wm_after {d.long_text_type};",
        "v_read bigint := 0;",
        "v_upserted bigint := 0;",
        "v_deleted bigint := 0;",
        "v_quarantined bigint := 0;",
        "v_tombstones bigint := 0;",
        "v_stale bigint := 0;",
        "v_superseded bigint := 0;",
        "v_truncates bigint := 0;",
        "v_rows bigint := 0;",
        "v_positionless bigint := 0;",
        "v_unavailable bigint := 0;",
        "v_drift bigint := 0;",
        "v_lag double precision;",
    ]
    return (
        f"CREATE OR REPLACE PROCEDURE {qual(n.procedure)}()\n"
        "AS $$\n"
        f"-- Generated by redshift-sync from {origin} (table {table.name}, topic {table.topic}).\n"
        "-- Merges new records of the topic into the target; see DESIGN.md, 'the procedure contract'.\n"
        "DECLARE\n"
        + _indent("\n".join(declare), 2)
        + "\nBEGIN\n"
        + _indent("\n".join(body), 2)
        + "\nEND;\n$$ LANGUAGE plpgsql;"
    )
