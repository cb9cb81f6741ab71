"""`incremental_sync_<table>()`: the procedure that merges a topic's new records into its
target table. One text for both dialects; the dialect supplies JSON access, casts and a
handful of spellings. The numbered comments follow the procedure contract (README, "How a sync works").

The procedure is a list of named steps (`SYNC_STEPS`, and `APPLY_STEPS` over a batch
that has records), in output order: each is a function returning the SQL of one step
for a table, with the variables it uses (DECLARE lists those of every step) and the
tables it is for. The stage query's nested levels and the classification rules
(`classification_checks`: first match wins) are built here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.debezium.vocabulary import TOAST_PLACEHOLDER, TOAST_PLACEHOLDER_TEXTS, Reason, field_reason, key_reason
from sync.sql import schemas
from sync.sql.apply import insert_deleted_keys_sql, key_match, soft_delete_sql
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.envelope import envelope_sql, source_sql, unwrap_schema
from sync.sql.names import RUN_LOG, table_names
from sync.sql.semantic import DecodeSql, check_column, decode_sql
from sync.sql.types import SqlType

_BIGINT = SqlType("bigint")  # source.ts_ms: milliseconds since the epoch
# source.ts_ms values that are a time (1970-01-01 to 9999-12-31 23:59:59.999): outside
# them (a nanosecond clock, garbage) the conversion would raise, so the record is
# quarantined and its conversion reads NULL.
SOURCE_TS_MS_RANGE = (0, 253402300799999)
# Read order of the stream for bounded runs and record isolation: a prefix of it is a
# prefix of every partition (a refresh reads each partition's offsets in order).
READ_ORDER = "s.refresh_time, s.kafka_partition, s.kafka_offset"
# One partition's watermark as the run log writes it ("partition:offset"), over rows `r`.
WATERMARK_ITEM = "CAST(r.kafka_partition AS varchar(20)) || ':' || CAST(r.last_offset AS varchar(20))"
# A run that is not bounded reads up to this refresh time.
UNBOUNDED = "TIMESTAMP '9999-12-31 00:00:00'"
# The call's one reading of the clock (UTC: PINNED_SETTING), taken once the lock is held:
# the run log's start, _synced_at, _deleted_at, the lag and every control-table time.
CALL_TIME = "v_started"
# The winning event of each key, in the stage row `s`.
WINNERS = "s._rn = 1 AND s._action IN ('upsert', 'delete')"
# What the run log counts of a batch, by run-log column: expressions over the stage.
OUTCOMES = {
    "upserted": "COUNT(CASE WHEN _rn = 1 AND _action = 'upsert' THEN 1 END)",
    "deleted": "COUNT(CASE WHEN _rn = 1 AND _action = 'delete' THEN 1 END)",
    "quarantined": "COUNT(CASE WHEN _action = 'quarantine' THEN 1 END)",
    "tombstones": "COUNT(CASE WHEN _action = 'tombstone' THEN 1 END)",
    "stale": "COUNT(CASE WHEN _action IN ('stale', 'truncated') THEN 1 END)",
    "superseded": "COUNT(CASE WHEN _rn > 1 AND _action IN ('upsert', 'delete') THEN 1 END)",
    "truncates": "COUNT(CASE WHEN _action = 'truncate' THEN 1 END)",
}


@dataclass(frozen=True)
class Check:
    """One classification rule: records matching `condition` get `action` and `reason`."""

    condition: str
    action: str
    reason: str  # SQL expression


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


def _subquery(d: PostgresDialect, level: str, alias: str) -> str:
    """FROM a nested level of the stage query, evaluated once per record (fenced where the
    dialect needs it), not re-expanded at each reference above."""
    fenced = f"{level}\n{d.subquery_fence}" if d.subquery_fence else level
    return f"FROM (\n{_indent(fenced, 2)}\n) {alias}"


@dataclass(frozen=True)
class Relations:
    """The qualified names of a table's relations and of the shared run log."""

    target: str
    stage: str
    stream: str
    watermark: str
    deleted: str
    quarantine: str
    run_log: str
    schema_drift: str

    def held(self, table: TableConfig) -> list[str]:
        """What is stored for a key: its row, or (hard mode) its deleted-key record."""
        return [self.target] + ([self.deleted] if table.delete_mode == "hard" else [])


def relations(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> Relations:
    n = table_names(pipeline, table)
    names = (n.target, n.stage, n.stream, n.watermark, n.deleted_keys, n.quarantine, RUN_LOG, n.schema_drift)
    return Relations(*(d.qualified(n.schema, name) for name in names))


def _keys(table: TableConfig) -> list[str]:
    return [c.target_name for c in table.key_columns]


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


def kafka_key_field_sql(d: PostgresDialect, table: TableConfig, col: ColumnConfig) -> str:
    """A key field from the Kafka key: a member of the key object, or, for a one-column
    key, the key itself when it is a bare value (ExtractField$Key, or a producer keying
    by the id)."""
    member = raw_field_sql(d, "f.key_env", col)
    if len(table.key_columns) > 1:
        return member
    bare = d.json_scalar_text("f.key_env") if read_as_text(d, col) else "f.key_env"
    return f"CASE WHEN {d.json_is_object('f.key_env')} THEN {member} ELSE {bare} END"


def raw_is_null(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """The field is missing or JSON null (read as text, both are NULL)."""
    return f"{raw} IS NULL" if read_as_text(d, col) else d.json_is_null(raw)


def unavailable_sql(d: PostgresDialect, raw: str, col: ColumnConfig) -> str:
    """True when the field is the placeholder: keep the stored value of the column."""
    forms = ", ".join(quote_literal(f) for f in TOAST_PLACEHOLDER_TEXTS)
    text = raw if read_as_text(d, col) else d.json_number_text(raw)
    return f"COALESCE({text} IN ({forms}), false)"


def classification_checks(d: PostgresDialect, table: TableConfig) -> list[Check]:
    """Ordered rules over the typed record `t`; the first match decides."""
    q = d.q
    tombstone_action = "delete" if table.format == "debezium-unwrap" else "tombstone"
    key_present = " AND ".join(f"t.{q(c.target_name)} IS NOT NULL" for c in table.key_columns)
    checks = [
        Check("t.raw_value IS NOT NULL", "quarantine", quote_literal(Reason.NOT_JSON)),
    ]
    if tombstone_action == "delete":
        checks.append(Check(f"{d.json_is_null('t.env')} AND {key_present}", "delete", "NULL"))
    checks += [
        Check(d.json_is_null("t.env"), "tombstone", "NULL"),
        Check(f"NOT {d.json_is_object('t.env')}", "quarantine", quote_literal(Reason.NOT_OBJECT)),
        Check("t.op IS NULL", "quarantine", quote_literal(Reason.NO_OP)),
        Check("t.op = 't'", "truncate", "NULL"),
        Check(
            "t.op NOT IN ('c', 'r', 'u', 'd')",
            "quarantine",
            f"'unknown op \"' || {d.prefix_bytes('t.op', 64)} || '\"'",
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
                quote_literal(key_reason(col.name, col.semantic, col.sql_type)),
            )
        )
    if d.key_byte_limit is not None:
        # An index entry of the primary key has a size limit (PostgreSQL's btree: about
        # 2.7 kB); a longer key would fail the whole CALL on every run.
        widths = [f"OCTET_LENGTH(t.{q(c.target_name)})" for c in table.key_columns if c.sql_type.family in ("char", "varchar")]
        fixed = 16 * (len(table.key_columns) - len(widths))
        if (
            widths
            and sum(c.sql_type.byte_limit for c in table.key_columns if c.sql_type.family in ("char", "varchar")) + fixed
            > d.key_byte_limit
        ):
            checks.append(
                Check(
                    f"{' + '.join(widths)} > {d.key_byte_limit - fixed}",
                    "quarantine",
                    quote_literal(f"primary key is longer than the {d.key_byte_limit} bytes a warehouse index entry holds"),
                )
            )
    lo, hi = SOURCE_TS_MS_RANGE
    checks.append(
        Check(
            f"t.has_source_ts AND (t.source_ts_ms IS NULL OR t.source_ts_ms NOT BETWEEN {lo} AND {hi})",
            "quarantine",
            "'source time (ts_ms) is not milliseconds since the epoch between 1970 and 9999'",
        )
    )
    for col in table.value_columns:
        raw = f"t.{q(_raw_alias(col))}"
        keeps_stored = f" AND NOT t.{q(_mark_alias(col))}" if toastable(col) else ""
        checks.append(
            Check(
                f"t.op <> 'd' AND NOT {raw_is_null(d, raw, col)} AND t.{q(col.target_name)} IS NULL{keeps_stored}",
                "quarantine",
                quote_literal(field_reason(col.name, col.semantic, col.sql_type)),
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


def kafka_time(record: str) -> str:
    """A record's Kafka time (stream columns `record`kafka_partition, ...; `_` for the
    stage's): the newest Kafka timestamp of its partition up to it. It never decreases
    along a partition, so Kafka order across partitions, (Kafka time, partition, offset),
    keeps each partition's offset order even where a producer's clock stepped back. Over
    a batch: every record of it, so the stage insert and the stage agree."""
    return (
        f"MAX({record}kafka_timestamp) OVER (PARTITION BY {record}kafka_partition ORDER BY {record}kafka_offset\n"
        "  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )


def kafka_order(time: str, partition: str, offset: str, newest_first: bool = True) -> str:
    """Kafka order: offsets within a partition; across partitions the Kafka time (see
    `kafka_time`; a record without one is the oldest), then partition and offset: Kafka
    orders nothing across partitions, the producer's timestamp is the only evidence."""
    if newest_first:
        return f"{time} DESC NULLS LAST, {partition} DESC, {offset} DESC"
    return f"{time} ASC NULLS FIRST, {partition}, {offset}"


def rank_order(position: str, kafka: str) -> str:
    """4. The order of a key's events, newest first: source position, then `kafka`
    (Kafka order, newest first)."""
    return f"{position} DESC NULLS LAST, {kafka}"


def kafka_earlier(a: str, b: str) -> str:
    """The record of the row `a` is earlier in Kafka order than the record of the row `b`
    (both carry `_kafka_partition`, `_kafka_offset`; NULL, so false, when either lacks them)."""
    return (
        f"({a}._kafka_partition < {b}._kafka_partition"
        f" OR ({a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset < {b}._kafka_offset))"
    )


def replayed(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, row: str = "s") -> str:
    """The stage row `row` is a replayed quarantined record: at or below its partition's
    watermark (the stream's records of a batch are above it)."""
    return (
        f"EXISTS (SELECT 1 FROM {relations(d, pipeline, table).watermark} w"
        f" WHERE w.kafka_partition = {row}._kafka_partition AND {row}._kafka_offset <= w.last_offset)"
    )


def positionless(prefix: str = "") -> str:
    """An upsert or delete without a source position (columns of the stage row `prefix`)."""
    return f"{prefix}_source_pos IS NULL AND {prefix}_action IN ('upsert', 'delete')"


def rerank_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Events without a source position (tombstones, PostgreSQL incremental-snapshot
    reads) come after the row stored for their key, whatever the batch replays before
    them: their rank is raised to the stored position and their keys are ranked again.
    "Before" is Kafka order (`kafka_order`): a key's records span two partitions once
    the topic's partition count grows."""
    q, rel, keys = d.q, relations(d, pipeline, table), _keys(table)
    stage = rel.stage

    stored_wanted = f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 't')})"
    raise_to_stored = "".join(
        f"  UPDATE {stage} s SET _rank_pos = t._source_pos\n"
        f"  FROM {stored_rows(d, relation, keys, stored_wanted)} t\n"
        f"  WHERE {positionless('s.')} AND {key_match(d, keys, 't', 's')}\n"
        "    AND t._source_pos IS NOT NULL AND (s._rank_pos IS NULL OR s._rank_pos < t._source_pos);\n"
        for relation in rel.held(table)
    )
    oldest_first = kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset", newest_first=False)
    order = rank_order("x._rank_pos", kafka_order("x._kafka_time", "x._kafka_partition", "x._kafka_offset"))
    key_list = ", ".join("x." + q(k) for k in keys)
    same_key_positionless = f"EXISTS (SELECT 1 FROM {stage} y WHERE {positionless('y.')} AND {key_match(d, keys, 'y', 'x')})"
    # The events of keys with a positionless one, with their Kafka time (over the whole stage).
    events = (
        f"FROM (SELECT z.*, {_indent(kafka_time('z._'), 14).lstrip()} AS _kafka_time\n"
        f"              FROM {stage} z) x\n"
        "        WHERE x._action IN ('upsert', 'delete')\n"
        f"          AND {same_key_positionless}) r\n"
    )
    return (
        "-- 4. Events without a source position: each takes the newest position seen before it\n"
        "--    for its key in Kafka order (so it supersedes what precedes it and loses to what\n"
        "--    follows), and ranks after what is stored for its key (row or deleted key).\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _rank_pos = r.rank_pos\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               MAX(x._source_pos) OVER (PARTITION BY {key_list} ORDER BY {oldest_first}\n"
        "                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rank_pos\n"
        f"        {events}"
        f"  WHERE {positionless('s.')}\n"
        "    AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        + raise_to_stored
        + f"  UPDATE {stage} s SET _rn = r.rn\n"
        f"  FROM (SELECT x._kafka_partition, x._kafka_offset,\n"
        f"               ROW_NUMBER() OVER (PARTITION BY {key_list} ORDER BY {order}) AS rn\n"
        f"        {events}"
        "  WHERE s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;\n"
        "END IF;"
    )


def redundant_tombstones_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Unwrapped topics: a tombstone right after a delete event of its key (the SMT's
    `rewrite-with-tombstone` mode; a connector restart re-sends both) adds nothing: the
    delete event carries the position, and is stale when it is a replay. Only a tombstone
    without such a delete before it is a delete (the `tombstone` and
    `delete-to-tombstone` modes). The record before a tombstone is in the batch, or, for
    the first record of a partition in the batch, the record at the partition's watermark
    (the last one read), looked up in the stream by offset and refresh time."""
    q, rel, keys = d.q, relations(d, pipeline, table), _keys(table)
    stage, stream = rel.stage, rel.stream
    previous = ",\n".join(
        f"               LAG({q(k)}) OVER (PARTITION BY _kafka_partition ORDER BY _kafka_offset) AS {q('prev_' + k)}"
        for k in keys
    )
    same_key = " AND ".join(f"s.{q(k)} = p.{q('prev_' + k)}" for k in keys)
    tombstone = "s._action = 'delete' AND s._op IS NULL"
    # b is a delete event: `__deleted` is "true", in the record or in its schemas.enable wrapper.
    delete_event = (
        "("
        + "\n         OR ".join(
            f"{d.json_get_text(obj, '__deleted')} = 'true'" for obj in ("b.payload", d.json_get("b.payload", "payload"))
        )
        + ")"
    )
    return (
        "-- 3. A tombstone right after a delete event of its key adds nothing (the delete event\n"
        "--    carries the position; Debezium's rewrite-with-tombstone mode, and its replays).\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {stage} s SET _action = 'tombstone'\n"
        "  FROM (SELECT _kafka_partition, _kafka_offset,\n"
        "               LAG(_op) OVER (PARTITION BY _kafka_partition ORDER BY _kafka_offset) AS prev_op,\n"
        f"{previous}\n"
        f"        FROM {stage}) p\n"
        f"  WHERE {tombstone}\n"
        "    AND s._kafka_partition = p._kafka_partition AND s._kafka_offset = p._kafka_offset\n"
        f"    AND p.prev_op = 'd' AND {same_key};\n"
        "  -- The first record of its partition in this batch: the record before it was read last run.\n"
        f"  UPDATE {stage} s SET _action = 'tombstone'\n"
        f"  FROM {rel.watermark} w, {stream} a, {stream} b\n"
        f"  WHERE {tombstone}\n"
        "    AND w.kafka_partition = s._kafka_partition\n"
        "    AND a.kafka_partition = s._kafka_partition AND a.kafka_offset = s._kafka_offset AND a.refresh_time = s._refresh_time\n"
        "    AND b.kafka_partition = w.kafka_partition AND b.kafka_offset = w.last_offset AND b.refresh_time = w.last_refresh_time\n"
        f"    AND s._kafka_offset = (SELECT MIN(x._kafka_offset) FROM {stage} x WHERE x._kafka_partition = s._kafka_partition)\n"
        "    AND b.kafka_key = a.kafka_key\n"
        f"    AND {delete_event};\n"
        "END IF;"
    )


def pending_condition() -> str:
    """Records of the stream `s` past the watermark `w` (LEFT JOINed on the partition).
    `refresh_time` only prunes: at or after the newest refresh read so far (a bounded run
    may stop inside a refresh), so the offsets decide."""
    return "s.refresh_time >= v_since\n  AND s.kafka_offset > COALESCE(w.last_offset, -1)"


def pending_in_order_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, columns: str, into: str, rank: str) -> str:
    """SELECT `columns` of the `rank`-th pending record in READ_ORDER INTO `into` (no row,
    so NULLs, when there are fewer)."""
    rel = relations(d, pipeline, table)
    return (
        f"SELECT {columns}\n"
        f"INTO {into}\n"
        f"FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY {READ_ORDER}) AS read_no\n"
        f"      FROM {rel.stream} s\n"
        f"      LEFT JOIN {rel.watermark} w ON w.kafka_partition = s.kafka_partition\n"
        f"      WHERE {_indent(pending_condition(), 6).lstrip()}) x\n"
        f"WHERE x.read_no = {rank}"
    )


def batch_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The records of this run (past the watermark) with their operation, row image
    (`img`), Kafka key (`key_env`) and source block (`src`)."""
    rel = relations(d, pipeline, table)
    env = envelope_sql(d, table, "e.env")
    # Level 1: records past the watermark, with the schemas.enable wrapper removed.
    level1 = (
        "SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp, s.refresh_time,\n"
        "       s.payload, s.raw_value,\n"
        f"       {unwrap_schema(d, 's.payload')} AS env,\n"
        f"       {unwrap_schema(d, 's.key_payload')} AS key_env\n"
        f"FROM {rel.stream} s\n"
        f"LEFT JOIN {rel.watermark} w ON w.kafka_partition = s.kafka_partition\n"
        f"WHERE {pending_condition()}\n"
        "  AND (s.refresh_time < v_until_time\n"
        "       OR (s.refresh_time = v_until_time\n"
        "           AND (s.kafka_partition < v_until_partition\n"
        "                OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))\n"
        + replay_sql(d, pipeline, table)
    )
    # Level 2: operation, row image and source block, each read once.
    return (
        "SELECT e.kafka_partition, e.kafka_offset, e.kafka_timestamp, e.refresh_time,\n"
        "       e.payload, e.raw_value, e.env, e.key_env,\n"
        f"       {env.op} AS op,\n"
        f"       {env.image} AS img,\n"
        f"       {env.source} AS src\n" + _subquery(d, level1, "e")
    )


def replay_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Quarantined records that `redshift-sync quarantine replay` marked for this run: read
    with the stream's records, so the same classification and merge rules apply to them.
    The quarantine keeps the value, not the Kafka key: a replayed key comes from the value."""
    return (
        "UNION ALL\n"
        "-- Quarantined records being replayed (at or below the watermark: already read once).\n"
        "SELECT r.kafka_partition, r.kafka_offset, r.kafka_timestamp, r.run_started_at,\n"
        "       r.payload, r.raw_value,\n"
        f"       {unwrap_schema(d, 'r.payload')} AS env,\n"
        f"       CAST(NULL AS {d.json_type}) AS key_env\n"
        f"FROM {relations(d, pipeline, table).quarantine} r\n"
        f"WHERE v_replayed > 0 AND r.table_name = {quote_literal(table.name)} AND r.handled = 'replaying'"
    )


def kafka_later(a: str, a_time: str, b: str, b_time: str) -> str:
    """Record `a` (its `_kafka_partition`, `_kafka_offset`, and Kafka timestamp `a_time`)
    is later in Kafka order than `b`: by offset in one partition; across partitions by
    timestamp, then partition (a tie, or a time unknown)."""
    return (
        f"({a}._kafka_partition = {b}._kafka_partition AND {a}._kafka_offset > {b}._kafka_offset\n"
        f" OR {a}._kafka_partition <> {b}._kafka_partition\n"
        f"    AND ({a_time} > {b_time}\n"
        f"         OR (COALESCE({a_time} = {b_time}, true) AND {a}._kafka_partition > {b}._kafka_partition)))"
    )


def replay_stale_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Kafka order (no source position): a replayed winner older in Kafka order than the
    row stored, or the delete remembered, for its key is stale. A replayed record is one
    at or below its partition's watermark (records of the stream are above it). A stored
    row's Kafka timestamp is its record's in the stream; a deleted key keeps its own."""
    rel = relations(d, pipeline, table)
    match = key_match(d, _keys(table), "t", "s")
    stored = {
        rel.target: (
            f"{rel.target} t\n              LEFT JOIN {rel.stream} m"
            " ON m.kafka_partition = t._kafka_partition AND m.kafka_offset = t._kafka_offset",
            "m.kafka_timestamp",
        ),
        rel.deleted: (f"{rel.deleted} t", "t._kafka_timestamp"),
    }
    newer = "\n         OR ".join(
        f"EXISTS (SELECT 1 FROM {stored[relation][0]}\n"
        f"            WHERE {match}\n"
        f"              AND {_indent(kafka_later('t', stored[relation][1], 's', 's._kafka_timestamp'), 14).lstrip()})"
        for relation in rel.held(table)
    )
    return (
        "-- 5. (replay) Never regress: a replayed record older than what is stored for its key is stale.\n"
        "IF v_replayed > 0 THEN\n"
        f"  UPDATE {rel.stage} s SET _action = 'stale'\n"
        f"  WHERE {WINNERS}\n"
        f"    AND {replayed(d, pipeline, table)}\n"
        f"    AND ({newer});\n"
        "END IF;"
    )


def _record_columns(*extra: str) -> str:
    return ", ".join(["f.kafka_partition", "f.kafka_offset", "f.kafka_timestamp", "f.refresh_time", *extra])


def stage_insert_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """One INSERT ... SELECT that reads every record past the watermark, classifies it,
    converts its fields to the column types and ranks it within its key."""
    q = d.q
    cols = table.columns

    # Level 3: source time and position, and every field as JSON, each navigated once;
    # everything above reads these columns.
    source = source_sql(d, table, "f.src")
    raw_lines = [f"{source.ts_ms} AS source_ts_ms", f"{source.position} AS source_pos"]
    for col in table.key_columns:
        raw_lines.append(f"{raw_field_sql(d, 'f.img', col)} AS {q(_image_alias(col))}")
        raw_lines.append(f"{kafka_key_field_sql(d, table, col)} AS {q(_key_alias(col))}")
    for col in table.value_columns:
        raw_lines.append(f"{raw_field_sql(d, 'f.img', col)} AS {q(_raw_alias(col))}")
    level_fields = (
        f"SELECT {_record_columns('f.payload', 'f.raw_value', 'f.env', 'f.img', 'f.op')},\n"
        + ",\n".join("       " + line for line in raw_lines)
        + "\n"
        + _subquery(d, batch_sql(d, pipeline, table), "f")
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
            "SELECT f.*,\n"
            + ",\n".join(f"       {expr} AS {q(alias)}" for alias, expr in level.items())
            + "\n"
            + _subquery(d, level_decoded, "f")
        )
    level_typed = (
        f"SELECT {_record_columns('f.payload', 'f.raw_value', 'f.env', 'f.img', 'f.op', 'f.source_pos')},\n"
        f"       {source_ts_ms} AS source_ts_ms,\n"
        f"       NOT {d.json_is_null('f.source_ts_ms')} AS has_source_ts,\n"
        + ",\n".join("       " + line for line in field_lines)
        + "\n"
        + _subquery(d, level_decoded, "f")
    )

    checks = classification_checks(d, table)
    # Only what the stage needs goes on: the JSON values (envelope, image) stay behind, and
    # the payload is kept for quarantined records only, so the sort above does not carry it.
    carried = ",\n".join(
        "       t." + name
        for name in [
            "kafka_partition",
            "kafka_offset",
            "kafka_timestamp",
            "refresh_time",
            "raw_value",
            "op",
            "source_ts_ms",
            "source_pos",
            "unavailable",
            "drift_img",
            *[q(col.target_name) for col in cols],
        ]
    )
    classified = (
        f"SELECT\n{carried},\n"
        "       t.payload,\n"
        "       t.has_source_ts,\n"
        f"{_indent(_first_match(checks), 7)} AS check_no\n" + _subquery(d, level_typed, "t")
    )
    quarantined = ", ".join(str(i) for i, chk in enumerate(checks, start=1) if chk.action == "quarantine")
    # The payload is kept for quarantined records, and for records with a TOAST
    # placeholder (quarantined later when no earlier value is known).
    keeps_payload = f"t.check_no IN ({quarantined})" + (
        " OR t.unavailable IS NOT NULL" if any(toastable(c) for c in table.value_columns) else ""
    )
    lo, hi = SOURCE_TS_MS_RANGE
    # The source time only where it is one (the conversion above would raise otherwise).
    bounded_ts = f"       CASE WHEN t.source_ts_ms BETWEEN {lo} AND {hi} THEN t.source_ts_ms END AS source_ts_ms"
    level_classified = (
        f"SELECT\n{carried.replace('       t.source_ts_ms', bounded_ts)},\n"
        f"{_indent(_lookup('t.check_no', [quote_literal(chk.action) for chk in checks], quote_literal('upsert')), 7)} AS action,\n"
        f"{_indent(_lookup('t.check_no', [chk.reason for chk in checks], 'NULL'), 7)} AS reason,\n"
        f"       CASE WHEN {keeps_payload} THEN t.payload END AS quarantine_payload,\n"
        f"       {_indent(kafka_time('t.'), 7).lstrip()} AS kafka_time\n" + _subquery(d, classified, "t")
    )

    key_list = ", ".join(f"c.{q(k.target_name)}" for k in table.key_columns)
    newest = kafka_order("c.kafka_time", "c.kafka_partition", "c.kafka_offset")
    if table.order_by == "kafka":
        order, rank_pos = newest, "NULL"
    else:
        # Events without a source position rank last here; the rare batches that hold
        # them are ranked again after the stage is written (`rerank_sql`).
        order, rank_pos = rank_order("c.source_pos", newest), "c.source_pos"
    values = {
        "_kafka_partition": "c.kafka_partition",
        "_kafka_offset": "c.kafka_offset",
        "_kafka_timestamp": "c.kafka_timestamp",
        "_refresh_time": "c.refresh_time",
        "_op": d.prefix_bytes("c.op", 64),
        "_action": "c.action",
        "_reason": "c.reason",
        # 4. Latest event per key wins; ROW_NUMBER, never RANK: a tie must not yield two rows.
        "_rn": f"ROW_NUMBER() OVER (\n         PARTITION BY CASE WHEN c.action IN ('upsert', 'delete') THEN 1 ELSE 0 END, {key_list}\n"
        f"         ORDER BY {order})",
        "_source_ts": d.epoch_ms_to_timestamp("c.source_ts_ms"),
        "_source_pos": "c.source_pos",
        "_rank_pos": rank_pos,
        **{col.target_name: f"c.{q(col.target_name)}" for col in cols},
        "_unavailable": "c.unavailable",
        "_payload": "c.quarantine_payload",
        "_raw_value": "CASE WHEN c.action = 'quarantine' THEN c.raw_value END",
        "_drift_img": "c.drift_img",
    }
    columns, selected = schemas.ordered(d, schemas.stage(table), values, quoted=True)
    return (
        f"INSERT INTO {relations(d, pipeline, table).stage} (\n"
        + _indent(",\n".join(columns), 2)
        + "\n)\nSELECT "
        + ",\n       ".join(selected)
        + "\n"
        + _subquery(d, level_classified, "c")
        + ";"
    )


def stored_rows(d: PostgresDialect, target: str, keys: list[str], wanted: str) -> str:
    """One stored row per key of the target rows matching `wanted` (a condition on the
    stage row `x` and the target row `t`), the newest when the key is stored more than once:
    a primary key is not enforced on Redshift, and an UPDATE ... FROM that matches a row
    twice must not depend on which match wins (stored rows keep no Kafka time: between
    copies of one key, partition and offset only make the choice deterministic)."""
    key_list = ", ".join(f"t.{d.q(k)}" for k in keys)
    return (
        f"(SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY {key_list}\n"
        f"          ORDER BY {rank_order('t._source_pos', 't._kafka_partition DESC, t._kafka_offset DESC')}) AS stored_rn__\n"
        f"        FROM {target} t WHERE {wanted}) o\n"
        "      WHERE o.stored_rn__ = 1)"
    )


def toast_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Winners whose columns carried the TOAST placeholder take the value from the newest
    earlier event of the batch that had it, else keep the value stored in the target."""
    toast_cols = [c.target_name for c in table.value_columns if toastable(c)]
    q, rel = d.q, relations(d, pipeline, table)
    stage, target = rel.stage, rel.target
    keys = _keys(table)
    key_cols = ", ".join(q(k) for k in keys)

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
                f"  AND {key_match(d, keys, 'm', 's')} AND {key_match(d, keys, 'p', 's')} AND p._rn = m.rn AND p._action = 'upsert';",
                2,
            )
        )
    keep = ",\n       ".join(
        f"{q(c)} = CASE WHEN s._unavailable LIKE {quote_literal(f'%|{c}|%')} THEN t.{q(c)} ELSE s.{q(c)} END" for c in toast_cols
    )
    placeholders = f"EXISTS (SELECT 1 FROM {stage} x WHERE x._rn = 1 AND x._action = 'upsert' AND x._unavailable IS NOT NULL AND {key_match(d, keys, 'x', 't')})"
    lines.append(
        _indent(
            f"UPDATE {stage} s SET {keep}\n"
            f"FROM {stored_rows(d, target, keys, placeholders)} t\n"
            f"WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable IS NOT NULL\n  AND {key_match(d, keys, 't', 's')};",
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
    rel = relations(d, pipeline, table)
    images = f"SELECT s._drift_img AS img, COUNT(*) OVER () AS images\nFROM {rel.stage} s\nWHERE s._drift_img IS NOT NULL"
    keys_join, field = d.object_keys_join("x0.img", "x")
    configured = "".join(f"\n            UNION ALL SELECT {quote_literal(c.name)}, 1, 0, 0" for c in table.columns)
    drift = {
        "table_name": quote_literal(table.name),
        "run_started_at": "v_started",
        "kind": "CASE WHEN k.configured = 1 THEN 'missing' ELSE 'unknown' END",
        "field": "k.field",
        "events": "CASE WHEN k.configured = 1 THEN k.images - k.seen ELSE k.seen END",
    }
    columns, values = schemas.ordered(d, schemas.SCHEMA_DRIFT, drift)
    return (
        f"INSERT INTO {rel.schema_drift} ({', '.join(columns)})\n"
        f"SELECT {_wrapped(values, (2, 4), ' ' * 7)}\n"
        "FROM (SELECT u.field, MAX(u.configured) AS configured, SUM(u.seen) AS seen,\n"
        "             MAX(MAX(u.images)) OVER () AS images\n"
        f"      FROM (SELECT {d.prefix_bytes(field, 256)} AS field, 0 AS configured, 1 AS seen, x0.images\n"
        f"            FROM (\n{_indent(images, 14)}\n            ) x0{keys_join}"
        f"{configured}) u\n"
        "      GROUP BY u.field) k\n"
        "WHERE (k.configured = 1 AND k.seen < k.images)\n"
        "   OR (k.configured = 0 AND SUBSTRING(k.field, 1, 2) <> '__');  -- '__' fields: unwrap metadata"
    )


def truncate_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Truncate events (on_truncate = 'delete'). A truncate has no key, so it may land on
    any partition: only the source position orders it against row events (Debezium:
    "ordering is guaranteed only for topics that use a single partition"). With a source
    order, the newest truncate's position T decides: stored rows older than T are removed
    (hard mode: remembered as deleted keys at T; soft mode: marked at T), events of the
    batch older than T are void, and everything newer stays. Without positions (order_by
    = 'kafka'), Kafka order decides: offsets within the truncate's partition, timestamps
    across partitions, and every stored row precedes it."""
    rel = relations(d, pipeline, table)
    stage, target, deleted = rel.stage, rel.target, rel.deleted
    now = CALL_TIME
    key_names = _keys(table)
    # Rows the truncate removes are recorded at its position (no Kafka coordinates of their own).
    truncate_position = {
        "_source_ts": "v_truncate_ts",
        "_source_pos": "v_truncate_pos",
        "_kafka_partition": "NULL",
        "_kafka_offset": "NULL",
    }

    def deleted_at_truncate(row: str) -> dict[str, str]:
        return {**schemas.row_values(d, schemas.data_columns(table.key_columns), row), **truncate_position, "_deleted_at": now}

    older = "(_source_pos IS NULL OR _source_pos < v_truncate_pos)"
    if table.delete_mode == "soft":
        clear_older = (
            f"UPDATE {target} SET _deleted = true, _source_ts = v_truncate_ts, _source_pos = v_truncate_pos,\n"
            f"       _kafka_partition = NULL, _kafka_offset = NULL, _synced_at = {now}\n"
            f"WHERE {older};"
        )
        clear_all = f"UPDATE {target} SET _deleted = true, _synced_at = {now};"
    else:
        clear_older = (
            insert_deleted_keys_sql(
                d,
                table,
                deleted,
                deleted_at_truncate("t"),
                f"{target} t",
                "(t._source_pos IS NULL OR t._source_pos < v_truncate_pos)\n"
                f"  AND NOT EXISTS (SELECT 1 FROM {deleted} k WHERE {key_match(d, key_names, 'k', 't')})",
            )
            + f"\nDELETE FROM {target}\nWHERE {older};"
        )
        clear_all = f"DELETE FROM {target};"
    unseen = f"NOT EXISTS (SELECT 1 FROM {target} t WHERE {key_match(d, key_names, 't', 's')})"
    if table.delete_mode == "soft":
        values = {
            **schemas.row_values(d, schemas.data_columns(table.columns), "s"),
            **truncate_position,
            "_synced_at": now,
            "_deleted": "true",
        }
        record_voided = schemas.insert_select_sql(
            d,
            target,
            schemas.target(table),
            values,
            f"FROM {stage} s\nWHERE s._rn = 1 AND s._action = 'truncated' AND {unseen};",
        )
    else:
        record_voided = insert_deleted_keys_sql(
            d,
            table,
            deleted,
            deleted_at_truncate("s"),
            f"{stage} s",
            f"s._rn = 1 AND s._action = 'truncated' AND {unseen}\n"
            f"  AND NOT EXISTS (SELECT 1 FROM {deleted} k WHERE {key_match(d, key_names, 'k', 's')})",
        )
    precedes = (
        "((x._kafka_partition = s._kafka_partition AND x._kafka_offset > s._kafka_offset)\n"
        "        OR (x._kafka_partition <> s._kafka_partition AND x._kafka_timestamp > s._kafka_timestamp))"
    )
    by_kafka_order = (
        f"{clear_all}\n"
        f"UPDATE {stage} s SET _action = 'truncated'\n"
        f"WHERE {WINNERS}\n"
        f"  AND EXISTS (SELECT 1 FROM {stage} x WHERE x._action = 'truncate'\n"
        f"    AND {precedes});"
    )
    lines = [
        "-- Truncate events (on_truncate = 'delete'): the newest truncate's source position",
        "-- decides what precedes it; without one, Kafka order does.",
        f"SELECT COUNT(*), MAX(_source_pos), MAX(_source_ts) INTO v_rows, v_truncate_pos, v_truncate_ts\nFROM {stage}\nWHERE _action = 'truncate';",
    ]
    if table.order_by == "kafka":
        lines += ["IF v_rows > 0 THEN", _indent(by_kafka_order, 2), "END IF;"]
    else:
        lines += [
            "IF v_rows > 0 AND v_truncate_pos IS NOT NULL THEN",
            _indent(clear_older, 2),
            _indent(
                f"UPDATE {stage} SET _action = 'truncated'\n"
                "WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND (_rank_pos IS NULL OR _rank_pos < v_truncate_pos);\n"
                "-- Keys whose only events this batch precede the truncate were deleted by it too: remembered,\n"
                "-- so a replay of those events stays stale.\n" + record_voided,
                2,
            ),
            "ELSIF v_rows > 0 THEN",
            _indent(by_kafka_order, 2),
            "END IF;",
        ]
    return "\n".join(lines)


def unknown_toast_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """3. (TOAST) A winner whose placeholder found no earlier value (none in the batch, no
    stored row) cannot be applied faithfully: quarantined with its payload, never a silent
    NULL. A backfill, then a quarantine replay, brings it in."""
    rel = relations(d, pipeline, table)
    same_key = key_match(d, _keys(table), "t", "s")
    return (
        "IF v_unavailable > 0 THEN\n"
        f"  UPDATE {rel.stage} s SET _action = 'quarantine',\n"
        f"         _reason = SUBSTRING('no earlier value is known for the TOAST placeholder ({TOAST_PLACEHOLDER}) in '\n"
        "                             || BTRIM(s._unavailable, '|'), 1, 1000)\n"
        "  WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable <> '|'\n"
        f"    AND NOT EXISTS (SELECT 1 FROM {rel.target} t WHERE {same_key});\n"
        "END IF;"
    )


def tied_changes_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """5. Winners at exactly the stored position were set stale with the older ones (one
    lookup per winner); those that change something apply after all: another change of
    the same transaction (a compressed MySQL transaction shares one position), in Kafka
    order. What stays stale at a tie is a re-sent copy of the stored event (the same
    values, or a delete of a key deleted there). Stale winners are rare (replays), so
    this runs only when there are some; `_reason` holds the action they had."""
    q, rel = d.q, relations(d, pipeline, table)
    stage, target, deleted = rel.stage, rel.target, rel.deleted
    differs = " OR ".join(d.differs(f"t.{q(c.target_name)}", f"s.{q(c.target_name)}", c.sql_type) for c in table.value_columns)
    tied = f"{key_match(d, _keys(table), 't', 's')} AND t._source_pos = s._source_pos"
    # (action it had, relation, what at the same position makes it a change)
    if table.delete_mode == "soft":
        cases = [
            ("upsert", target, f"(t._deleted{' OR ' + differs if differs else ''})"),
            ("delete", target, "NOT t._deleted"),
        ]
    else:
        cases = [("upsert", deleted, ""), ("delete", target, "")]
        if differs:
            cases.insert(0, ("upsert", target, f"({differs})"))
    # A replayed record was read before at its own offset: at a tie, when that is earlier
    # in Kafka order than the record that wrote what is stored, the replay is the older.
    replays = "\n".join(
        f"    UPDATE {stage} s SET _reason = NULL\n"
        "    WHERE s._rn = 1 AND s._action = 'stale' AND s._reason IS NOT NULL\n"
        f"      AND {replayed(d, pipeline, table)}\n"
        f"      AND EXISTS (SELECT 1 FROM {relation} t WHERE {tied}\n"
        f"        AND {kafka_earlier('s', 't')});"
        for relation in rel.held(table)
    )
    updates = "\n".join(
        f"  UPDATE {stage} s SET _action = s._reason, _reason = NULL\n"
        f"  WHERE s._rn = 1 AND s._action = 'stale' AND s._reason = '{action}'\n"
        f"    AND EXISTS (SELECT 1 FROM {relation} t WHERE {tied}" + (f"\n      AND {changes});" if changes else ");")
        for action, relation, changes in cases
    )
    return (
        "-- 5. A stale winner at exactly the stored position that changes something is another\n"
        "--    change of the same transaction (compressed MySQL binlog): it applies, in Kafka\n"
        "--    order. A re-sent copy of the stored event stays stale, and so does a replayed\n"
        "--    record earlier in Kafka order than the record that wrote what is stored (its\n"
        "--    `_reason` cleared). (One statement per case: Redshift takes no correlated\n"
        "--    subquery under an OR.)\n"
        f"SELECT COUNT(*) INTO v_rows FROM {stage} WHERE _action = 'stale';\n"
        "IF v_rows > 0 THEN\n"
        f"  IF v_replayed > 0 THEN\n{replays}\n  END IF;\n"
        f"{updates}\n"
        "END IF;"
    )


def session_settings_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return "\n".join(["-- 10. Session settings this procedure needs.", *d.session_settings])


def single_flight_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    lock = f"LOCK TABLE {relations(d, pipeline, table).watermark}{d.lock_mode};"
    comment = (
        "-- 1. Single flight: a second call (or a backfill) waits here until the first commits,\n"
        "--    then sees its watermark, so no record is applied twice. Only the control table\n"
        "--    is locked: on Redshift every LOCK is exclusive, and the target stays readable.\n"
    )
    return f"{comment}{lock}\n{CALL_TIME} := {d.now()};"


def watermark_before_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    wm = relations(d, pipeline, table).watermark
    summary = d.bounded_list(WATERMARK_ITEM, ",", "r.kafka_partition", wm, extra="MAX(r.last_refresh_time)")
    return (
        "-- The watermark summary lists as many partitions as fit the run log's text column.\n"
        + summary.replace("\nFROM ", "\nINTO v_since, v_wm_before\nFROM ", 1)
        + ";\nv_since := COALESCE(v_since, TIMESTAMP '1900-01-01 00:00:00');"
    )


def bound_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    first = pending_in_order_sql(
        d,
        pipeline,
        table,
        "x.refresh_time, x.kafka_partition, x.kafka_offset",
        "v_until_time, v_until_partition, v_until_offset",
        "p_max_records",
    )
    return (
        "-- A bounded run (record isolation by the caller) reads the first p_max_records pending\n"
        "-- records in (refresh_time, partition, offset) order: a prefix of every partition\n"
        "-- (0: none, which tells a failure of the procedure itself from one of a record).\n"
        f"v_until_time := {UNBOUNDED};\n"
        "IF p_max_records < 1 THEN\n"
        "  v_until_time := TIMESTAMP '1900-01-01 00:00:00';\n"
        "ELSIF p_max_records IS NOT NULL THEN\n"
        + _indent(f"{first};\nv_until_time := COALESCE(v_until_time, {UNBOUNDED});", 2)
        + "\nEND IF;"
    )


def replay_count_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- Quarantined records marked for replay in this transaction (`quarantine replay`).\n"
        f"SELECT COUNT(*) INTO v_replayed FROM {relations(d, pipeline, table).quarantine}\n"
        f"WHERE table_name = {quote_literal(table.name)} AND handled = 'replaying';"
    )


def stage_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- 2./3. Records past the watermark (refresh_time only prunes), classified, typed\n"
        "--       and ranked per key, into the stage. Everything below reads the stage only.\n"
        + stage_insert_sql(d, pipeline, table)
    )


def batch_counts_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """One pass counts the batch and tells which of the rarely needed steps it needs."""
    counted = {"v_read": "COUNT(*)", "v_drift": "COUNT(_drift_img)"}
    if _source_order(d, table):
        counted["v_positionless"] = f"COUNT(CASE WHEN {positionless()} THEN 1 END)"
    if _has_toast(d, table):
        counted["v_unavailable"] = "COUNT(CASE WHEN _unavailable IS NOT NULL THEN 1 END)"
    stage = relations(d, pipeline, table).stage
    return "SELECT " + ",\n       ".join(counted.values()) + f"\nINTO {', '.join(counted)}\nFROM {stage};"


def analyze_stage_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    keys = ", ".join(d.q(k) for k in _keys(table))
    return (
        "-- Fresh statistics for a large stage, refilled every run: without them the planner\n"
        "-- takes it for empty and joins it to itself row by row (20k events: 13 s, not 1 s).\n"
        "-- The columns the joins and filters use are enough (a quarter of the full cost).\n"
        f"IF v_read > 1000 THEN\n  ANALYZE {relations(d, pipeline, table).stage} (_action, _rn, {keys});\nEND IF;"
    )


def apply_batch_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Steps 3 to 7 over the stage, when the batch has records (APPLY_STEPS)."""
    return "IF v_read > 0 THEN\n" + _indent(_steps_sql(d, pipeline, table, APPLY_STEPS), 2) + "\nEND IF;"


def watermark_after_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    wm = relations(d, pipeline, table).watermark
    return d.bounded_list(WATERMARK_ITEM, ",", "r.kafka_partition", wm).replace("\nFROM ", "\nINTO v_wm_after\nFROM ", 1) + ";"


def run_log_row_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    counts = {name: f"v_{name}" for name in OUTCOMES}
    values = {
        "events_read": "v_read",
        **counts,
        "watermark_before": "v_wm_before",
        "watermark_after": "v_wm_after",
        "lag_seconds": "v_lag",
        "status": "'ok'",
    }
    return "-- 8. One run-log row per call, also when nothing was new (9.).\n" + run_log_insert_sql(d, pipeline, table, values)


def stale_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """5. A lookup of the stored position per winning key (a correlated MAX: at most one
    row, NULL when there is none), so the cost follows the batch, not the table."""
    rel = relations(d, pipeline, table)
    statements = [
        f"UPDATE {rel.stage} s SET _action = 'stale', _reason = s._action\n"
        f"WHERE {WINNERS} AND s._source_pos IS NOT NULL\n"
        f"  AND s._source_pos <= (SELECT MAX(t._source_pos) FROM {relation} t WHERE {key_match(d, _keys(table), 't', 's')});"
        for relation in rel.held(table)
    ]
    return "-- 5. Never regress: a winner not newer than what is stored for its key is stale.\n" + "\n".join(statements)


def positionless_position_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- A winner without a source position was never stale; it is recorded at the position\n"
        "-- it ranked by, so replays of what it superseded stay stale.\n"
        "IF v_positionless > 0 THEN\n"
        f"  UPDATE {relations(d, pipeline, table).stage} SET _source_pos = _rank_pos\n"
        "  WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND _source_pos IS NULL;\n"
        "END IF;"
    )


def outcome_counts_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """What the batch comes to, for the run log: each count, and the lag."""
    values = [*OUTCOMES.values(), d.seconds_between(CALL_TIME, "MAX(_kafka_timestamp)")]
    into = [*(f"v_{name}" for name in OUTCOMES), "v_lag"]
    return "SELECT " + ",\n       ".join(values) + f"\nINTO {', '.join(into)}\nFROM {relations(d, pipeline, table).stage};"


def _load_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, deleted_flag: str, where: str) -> str:
    """INSERT INTO the target the stage rows `s` matching `where` (soft mode: with their
    `_deleted` flag)."""
    rel = relations(d, pipeline, table)
    values = {
        **schemas.row_values(d, [*schemas.data_columns(table.columns), *schemas.POSITION], "s"),
        "_synced_at": CALL_TIME,
        **({"_deleted": deleted_flag} if table.delete_mode == "soft" else {}),
    }
    rest = f"FROM {rel.stage} s\nWHERE {where};"
    return schemas.insert_select_sql(d, rel.target, schemas.target(table), values, rest, quoted=True)


def apply_hard_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    rel, keys = relations(d, pipeline, table), _keys(table)
    # Redshift's DELETE takes no alias for its target: the key match names it in full,
    # and the stage's alias starts with '_', which no table name can (a table named "s"
    # would otherwise clash with an alias s).
    remembered = {**schemas.row_values(d, schemas.deleted_keys(table), "s"), "_deleted_at": CALL_TIME}
    return "\n".join(
        [
            "-- 6. Apply: remove the current row of every key with a winning event (the join is\n"
            "--    on the key, which is the DISTKEY, so it is collocated), then insert the upserts.\n"
            f"DELETE FROM {rel.target}\nUSING {rel.stage} _s\nWHERE _s._rn = 1 AND _s._action IN ('upsert', 'delete')\n"
            f"  AND {key_match(d, keys, rel.target, '_s')};",
            "-- Deleted keys are remembered, so neither a replay nor a backfill resurrects them.\n"
            f"DELETE FROM {rel.deleted}\nUSING {rel.stage} s\nWHERE {WINNERS}\n  AND {key_match(d, keys, rel.deleted, 's')};",
            insert_deleted_keys_sql(d, table, rel.deleted, remembered, f"{rel.stage} s", "s._rn = 1 AND s._action = 'delete'"),
            _load_sql(d, pipeline, table, "false", "s._rn = 1 AND s._action = 'upsert'"),
        ]
    )


def delete_values_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """Soft mode: a delete's values where its before image has none."""
    rel, keys, q = relations(d, pipeline, table), _keys(table), d.q
    value_cols = [c.target_name for c in table.value_columns]
    keys_sql = ", ".join(q(k) for k in keys)
    fill = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, p.{q(c)})" for c in value_cols)
    stored = ",\n       ".join(f"{q(c)} = COALESCE(s.{q(c)}, t.{q(c)})" for c in value_cols)
    deleting = f"EXISTS (SELECT 1 FROM {rel.stage} x WHERE x._rn = 1 AND x._action = 'delete' AND {key_match(d, keys, 'x', 't')})"
    return (
        "-- A delete whose before image holds only the key (REPLICA IDENTITY DEFAULT, unwrap\n"
        "-- rewrite) keeps the values of the newest earlier upsert of the batch.\n"
        f"UPDATE {rel.stage} s SET {fill}\n"
        f"FROM {rel.stage} p,\n"
        f"     (SELECT {keys_sql}, MIN(_rn) AS rn FROM {rel.stage}\n"
        f"      WHERE _action = 'upsert' AND _rn > 1 GROUP BY {keys_sql}) m\n"
        "WHERE s._rn = 1 AND s._action = 'delete'\n"
        f"  AND {key_match(d, keys, 'm', 's')} AND {key_match(d, keys, 'p', 's')} AND p._rn = m.rn AND p._action = 'upsert';\n"
        "-- Without such an upsert, the stored row is the newest earlier state: a delete takes\n"
        "-- its values where the before image has none (never an older value over a newer\n"
        "-- NULL: the stored row is not consulted when the batch updated the key).\n"
        f"UPDATE {rel.stage} s SET {stored}\n"
        f"FROM {stored_rows(d, rel.target, keys, deleting)} t\n"
        f"WHERE s._rn = 1 AND s._action = 'delete' AND {key_match(d, keys, 't', 's')}\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {rel.stage} x WHERE x._action = 'upsert' AND x._rn > 1 AND {key_match(d, keys, 'x', 's')});"
    )


def apply_soft_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    rel, keys = relations(d, pipeline, table), _keys(table)
    last_values = {c.target_name: f"s.{d.q(c.target_name)}" for c in table.value_columns}
    deletes = "s._rn = 1 AND s._action = 'delete'"
    return "\n".join(
        [
            "-- 6. Apply (soft deletes): upserts replace the row; deletes only mark it, keeping\n"
            "--    its last values (or record the key when it was never seen).\n"
            f"DELETE FROM {rel.target}\nUSING {rel.stage} _s\nWHERE _s._rn = 1 AND _s._action = 'upsert'\n"
            f"  AND {key_match(d, keys, rel.target, '_s')};",
            _load_sql(d, pipeline, table, "false", "s._rn = 1 AND s._action = 'upsert'"),
            "-- A delete keeps the row's last values, completed above.\n"
            + soft_delete_sql(d, table, rel.target, last_values, f"{rel.stage} s", deletes),
            _load_sql(
                d,
                pipeline,
                table,
                "true",
                f"{deletes}\n  AND NOT EXISTS (SELECT 1 FROM {rel.target} t WHERE {key_match(d, keys, 't', 's')})",
            ),
        ]
    )


def drift_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- 6. Schema drift: unknown fields in the row images, configured fields missing from them\n"
        "--    (only images set aside by the stage query can have either).\n"
        "IF v_drift > 0 THEN\n" + _indent(schema_drift_sql(d, pipeline, table), 2) + "\nEND IF;"
    )


def quarantine_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    stage_values = {"reason": "_reason", "payload": "_payload", "raw_value": "_raw_value"}
    rest = f"FROM {relations(d, pipeline, table).stage}\nWHERE _action = 'quarantine';"
    return (
        "-- 3. Records that cannot be applied are kept with the raw value and the reason.\n"
        "IF v_quarantined > 0 THEN\n"
        + _indent(quarantine_insert_sql(d, pipeline, table, stage_values, "_", rest), 2)
        + "\nEND IF;"
    )


def replayed_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- Replayed records are recorded as such; one that failed again was quarantined anew above.\n"
        "IF v_replayed > 0 THEN\n"
        f"  UPDATE {relations(d, pipeline, table).quarantine} SET handled = 'replayed', handled_at = {CALL_TIME}\n"
        f"  WHERE table_name = {quote_literal(table.name)} AND handled = 'replaying';\n"
        "END IF;"
    )


def advance_watermark_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    rel, now = relations(d, pipeline, table), CALL_TIME
    batch = (
        "(SELECT _kafka_partition, MAX(_kafka_offset) AS last_offset, MAX(_refresh_time) AS last_refresh_time\n"
        f"      FROM {rel.stage} GROUP BY _kafka_partition) b"
    )
    first_seen = {
        "kafka_partition": "b._kafka_partition",
        "last_offset": "b.last_offset",
        "last_refresh_time": "b.last_refresh_time",
        "updated_at": now,
    }
    return (
        "-- 7. Advance the per-partition watermark in the same transaction (never back: replayed\n"
        "--    records lie below it).\n"
        f"UPDATE {rel.watermark} w SET last_offset = b.last_offset, last_refresh_time = b.last_refresh_time, updated_at = {now}\n"
        f"FROM {batch}\n"
        "WHERE w.kafka_partition = b._kafka_partition AND b.last_offset > w.last_offset;\n"
        "-- Partitions seen for the first time (aggregated first: one probe per partition).\n"
        + schemas.insert_select_sql(
            d,
            rel.watermark,
            schemas.WATERMARK,
            first_seen,
            f"FROM {batch}\nWHERE NOT EXISTS (SELECT 1 FROM {rel.watermark} w WHERE w.kafka_partition = b._kafka_partition);",
        )
    )


def empty_stage_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    return (
        "-- The stage is empty between runs (DELETE, not TRUNCATE: TRUNCATE would commit).\n"
        f"DELETE FROM {relations(d, pipeline, table).stage};"
    )


@dataclass(frozen=True)
class Variable:
    name: str
    type: str  # a SQL type, or one the dialect spells (schemas.LONG_TEXT)
    initial: str | None = None

    def declaration(self, d: PostgresDialect) -> str:
        return f"{self.name} {schemas.type_sql(d, self.type)}" + (f" := {self.initial}" if self.initial else "") + ";"


# The variables of the procedures, in the order DECLARE lists them.
VARIABLES = {
    v.name: v
    for v in (
        Variable("v_started", "timestamp"),
        Variable("v_since", "timestamp"),
        Variable("v_wm_before", schemas.LONG_TEXT),
        Variable("v_wm_after", schemas.LONG_TEXT),
        Variable("v_read", "bigint", "0"),
        *(Variable(f"v_{name}", "bigint", "0") for name in OUTCOMES),
        Variable("v_rows", "bigint", "0"),
        Variable("v_positionless", "bigint", "0"),
        Variable("v_unavailable", "bigint", "0"),
        Variable("v_drift", "bigint", "0"),
        Variable("v_replayed", "bigint", "0"),
        Variable("v_lag", "double precision"),
        Variable("v_until_time", "timestamp"),
        Variable("v_until_partition", "bigint"),
        Variable("v_until_offset", "bigint"),
        Variable("v_truncate_pos", "varchar(64)"),
        Variable("v_truncate_ts", "timestamp"),
        Variable("v_partition", "bigint"),
        Variable("v_offset", "bigint"),
        Variable("v_refresh_time", "timestamp"),
    )
}


def _always(d: PostgresDialect, table: TableConfig) -> bool:
    return True


def _source_order(d: PostgresDialect, table: TableConfig) -> bool:
    return table.order_by != "kafka"


def _has_toast(d: PostgresDialect, table: TableConfig) -> bool:
    return any(toastable(c) for c in table.value_columns)


@dataclass(frozen=True)
class Step:
    """One step of the procedure contract: its SQL for a table, the variables it uses
    (DECLARE lists those of every step), and the tables (and dialects) it is for."""

    sql: Callable[[PostgresDialect, Pipeline, TableConfig], str]
    uses: tuple[str, ...] = ()
    applies: Callable[[PostgresDialect, TableConfig], bool] = _always


# Steps 3 to 7 over the stage, in output order (run when the batch has records).
APPLY_STEPS = (
    Step(redundant_tombstones_sql, ("v_positionless",), lambda d, t: _source_order(d, t) and t.format == "debezium-unwrap"),
    Step(rerank_sql, ("v_positionless",), _source_order),
    Step(toast_sql, ("v_unavailable",), _has_toast),
    Step(unknown_toast_sql, ("v_unavailable",), _has_toast),
    Step(stale_sql, (), _source_order),
    Step(tied_changes_sql, ("v_rows", "v_replayed"), _source_order),
    Step(positionless_position_sql, ("v_positionless",), _source_order),
    Step(replay_stale_sql, ("v_replayed",), lambda d, t: not _source_order(d, t)),
    Step(truncate_sql, ("v_rows", "v_truncate_pos", "v_truncate_ts", CALL_TIME), lambda d, t: t.on_truncate == "delete"),
    Step(outcome_counts_sql, (*(f"v_{name}" for name in OUTCOMES), "v_lag", CALL_TIME)),
    Step(apply_hard_sql, (CALL_TIME,), lambda d, t: t.delete_mode == "hard"),
    Step(delete_values_sql, (), lambda d, t: t.delete_mode == "soft" and bool(t.value_columns)),
    Step(apply_soft_sql, (CALL_TIME,), lambda d, t: t.delete_mode == "soft"),
    Step(drift_sql, ("v_drift", "v_started")),
    Step(quarantine_sql, ("v_quarantined", "v_started")),
    Step(replayed_sql, ("v_replayed", CALL_TIME)),
    Step(advance_watermark_sql, (CALL_TIME,)),
    Step(empty_stage_sql),
)
# The steps of `incremental_sync_<table>(p_max_records)`, in output order.
SYNC_STEPS = (
    Step(session_settings_sql, (), lambda d, t: bool(d.session_settings)),
    Step(single_flight_sql, ("v_started",)),
    Step(watermark_before_sql, ("v_since", "v_wm_before")),
    Step(bound_sql, ("v_since", "v_until_time", "v_until_partition", "v_until_offset")),
    Step(replay_count_sql, ("v_replayed",)),
    Step(stage_sql, ("v_since", "v_until_time", "v_until_partition", "v_until_offset", "v_replayed")),
    Step(batch_counts_sql, ("v_read", "v_drift", "v_positionless", "v_unavailable")),
    Step(analyze_stage_sql, ("v_read",), lambda d, t: d.analyze_stage),
    Step(apply_batch_sql, ("v_read",)),
    Step(watermark_after_sql, ("v_wm_after",)),
    Step(run_log_row_sql, ("v_started", "v_read", *(f"v_{name}" for name in OUTCOMES), "v_wm_before", "v_wm_after", "v_lag")),
)


def _steps_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, steps: tuple[Step, ...]) -> str:
    return "\n".join(step.sql(d, pipeline, table) for step in steps if step.applies(d, table))


def _declare(d: PostgresDialect, steps: Iterable[Step]) -> list[str]:
    """The declarations of every variable the steps use, in VARIABLES order."""
    used = {name for step in steps for name in step.uses}
    return [v.declaration(d) for v in VARIABLES.values() if v.name in used]


def procedure_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, origin: str) -> str:
    n = table_names(pipeline, table)
    return _plpgsql_procedure(
        f"{d.qualified(n.schema, n.procedure)}(p_max_records bigint)",
        f"Generated by redshift-sync from {origin} (table {table.name}, topic {table.topic}).\n"
        "Merges new records of the topic into the target (p_max_records NULL: all of them);\n"
        "see the README, 'How a sync works: the procedure contract'.",
        _declare(d, [*SYNC_STEPS, *APPLY_STEPS]),
        [_steps_sql(d, pipeline, table, SYNC_STEPS)],
    )


def quarantine_insert_sql(
    d: PostgresDialect, pipeline: Pipeline, table: TableConfig, values: dict[str, str], record: str, rest: str
) -> str:
    """3. A record into the quarantine, with `values` (reason, payload, raw value) and its
    Kafka coordinates from the columns `record` prefixes (`s.`: the stream's, `_`: the
    stage's)."""
    kafka = {name: record + name for name in ("kafka_partition", "kafka_offset", "kafka_timestamp")}
    values = {"table_name": quote_literal(table.name), **kafka, **values, "run_started_at": "v_started"}
    return schemas.insert_select_sql(d, relations(d, pipeline, table).quarantine, schemas.QUARANTINE, values, rest)


def _wrapped(items: list[str], breaks: tuple[int, ...], indent: str = "  ") -> str:
    """`items`, comma-separated, on a new line (indented) at each of the positions `breaks`."""
    bounds = [0, *breaks, len(items)]
    return f",\n{indent}".join(", ".join(items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))


def run_log_insert_sql(
    d: PostgresDialect, pipeline: Pipeline, table: TableConfig, values: dict[str, str], breaks: tuple[int, ...] = (7,)
) -> str:
    """8. The run-log row of a call: `values` by column name (counts, watermarks, lag,
    status), with the call's identity and times."""
    values = {
        "table_name": quote_literal(table.name),
        "backend_pid": "PG_BACKEND_PID()",
        "started_at": "v_started",
        "finished_at": d.now(),
        **values,
    }
    columns, selected = schemas.ordered(d, schemas.RUN_LOG, values)
    return (
        f"INSERT INTO {relations(d, pipeline, table).run_log} ({_wrapped(columns, (7,))})\nVALUES ({_wrapped(selected, breaks)});"
    )


# Pinned by CREATE PROCEDURE's SET clause, which sets it when the CALL enters and restores
# the caller's value when it exits (r_CREATE_PROCEDURE; Redshift's syntax takes one such
# clause). Every time the procedure writes (run log, _synced_at, lag) is UTC, as the Kafka
# timestamps it is compared with are, whatever the caller's session time zone: Redshift's
# clock functions read the session's zone (r_GETDATE, r_TIMEOFDAY_function), and a
# database user's zone is set with ALTER USER ... SET timezone (r_timezone_config).
PINNED_SETTING = "SET timezone TO 'UTC'"


def _plpgsql_procedure(signature: str, comment: str, declare: list[str], body: list[str]) -> str:
    """CREATE OR REPLACE PROCEDURE with its header comment, declarations and body."""
    return (
        f"CREATE OR REPLACE PROCEDURE {signature}\n"
        "AS $$\n"
        + "".join(f"-- {line}\n" for line in comment.splitlines())
        + ("DECLARE\n" + _indent("\n".join(declare), 2) + "\n" if declare else "")
        + "BEGIN\n"
        + _indent("\n".join(body), 2)
        + "\nEND;\n$$ LANGUAGE plpgsql\n"
        + PINNED_SETTING
        + ";"
    )


def scheduled_procedure_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, origin: str) -> str:
    """`incremental_sync_<table>()`, the call the schedule makes: every pending record."""
    n = table_names(pipeline, table)
    qual = d.qualified(n.schema, n.procedure)
    return _plpgsql_procedure(
        f"{qual}()",
        f"Generated by redshift-sync from {origin} (table {table.name}, topic {table.topic}).\n"
        f"The scheduled sync: every pending record (see {n.procedure}(bigint)).",
        [],
        [f"CALL {qual}(CAST(NULL AS bigint));"],
    )


def isolate_record_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, origin: str) -> str:
    """`isolate_record_<table>(reason)`: the caller found that the first pending record (in
    the bounded read order) makes the engine raise; it goes to the quarantine with the
    engine's words and the watermark moves past it, so the rest of the topic flows. Under
    the same lock as the sync, so it cannot race one."""
    n, rel, now = table_names(pipeline, table), relations(d, pipeline, table), CALL_TIME
    stream, wm = rel.stream, rel.watermark
    first = pending_in_order_sql(
        d, pipeline, table, "x.kafka_partition, x.kafka_offset, x.refresh_time", "v_partition, v_offset, v_refresh_time", "1"
    )
    reason = d.prefix_bytes("'the warehouse could not apply this record: ' || COALESCE(p_reason, 'no error text')", 1000)
    body = [
        "-- 1. Single flight, as in the sync itself.",
        f"LOCK TABLE {wm}{d.lock_mode};",
        f"{CALL_TIME} := {d.now()};",
        f"SELECT MAX(last_refresh_time) INTO v_since FROM {wm};",
        "v_since := COALESCE(v_since, TIMESTAMP '1900-01-01 00:00:00');",
        first + ";",
        "IF v_partition IS NOT NULL THEN",
        _indent(
            quarantine_insert_sql(
                d,
                pipeline,
                table,
                {"reason": reason, "payload": "s.payload", "raw_value": "s.raw_value"},
                "s.",
                f"FROM {stream} s\n"
                "WHERE s.kafka_partition = v_partition AND s.kafka_offset = v_offset AND s.refresh_time = v_refresh_time;",
            )
            + "\n"
            f"UPDATE {wm} SET last_offset = v_offset, last_refresh_time = v_refresh_time, updated_at = {now}\n"
            "WHERE kafka_partition = v_partition;\n"
            + schemas.insert_select_sql(
                d,
                wm,
                schemas.WATERMARK,
                {
                    "kafka_partition": "v_partition",
                    "last_offset": "v_offset",
                    "last_refresh_time": "v_refresh_time",
                    "updated_at": now,
                },
                f"WHERE NOT EXISTS (SELECT 1 FROM {wm} WHERE kafka_partition = v_partition);",
            )
            + "\n"
            + run_log_insert_sql(
                d,
                pipeline,
                table,
                {
                    "events_read": "1",
                    **{name: "0" for name in OUTCOMES if name != "quarantined"},
                    "quarantined": "1",
                    "watermark_before": "CAST(v_partition AS varchar(20)) || ':' || CAST(v_offset - 1 AS varchar(20))",
                    "watermark_after": "CAST(v_partition AS varchar(20)) || ':' || CAST(v_offset AS varchar(20))",
                    "lag_seconds": "NULL",
                    "status": "'isolated'",
                },
                breaks=(7, 13),
            ),
            2,
        ),
        "END IF;",
    ]
    declare = [VARIABLES[name].declaration(d) for name in ("v_started", "v_since", "v_partition", "v_offset", "v_refresh_time")]
    return _plpgsql_procedure(
        f"{d.qualified(n.schema, n.isolate_procedure)}(p_reason {d.long_text_type})",
        f"Generated by redshift-sync from {origin} (table {table.name}, topic {table.topic}).\n"
        "Quarantines the first pending record, which the caller found to make the engine\n"
        "raise, with the engine's error text, and moves the watermark past it.",
        declare,
        body,
    )
