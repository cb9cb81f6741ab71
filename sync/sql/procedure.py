"""`incremental_sync_<table>()`: the procedure that merges a topic's new records into its
target table. One text for both dialects; the dialect supplies JSON access, casts and a
handful of spellings. The numbered comments follow the procedure contract in DESIGN.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.sql.dialects import PostgresDialect, quote_literal
from sync.sql.envelope import envelope_sql, unwrap_schema
from sync.sql.names import QUARANTINE, RUN_LOG, table_names
from sync.sql.types import SqlType

APPLY_ACTIONS = ("upsert", "delete")
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


def _column_alias(col: ColumnConfig) -> str:
    return col.target_name


def _raw_alias(col: ColumnConfig) -> str:
    return f"j__{col.target_name}"


def _key_alias(col: ColumnConfig) -> str:
    return f"jk__{col.target_name}"


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
                quote_literal(f"primary key field {col.name} is missing or not a {col.sql_type}"),
            )
        )
    for col in table.value_columns:
        raw = f"t.{q(_raw_alias(col))}"
        checks.append(
            Check(
                f"t.op <> 'd' AND NOT {d.json_is_null(raw)} AND t.{q(col.target_name)} IS NULL",
                "quarantine",
                quote_literal(f"field {col.name} does not convert to {col.sql_type}"),
            )
        )
    checks.append(Check("t.op = 'd'", "delete", "NULL"))
    return checks


def _case(checks: list[Check], attr: str, default: str) -> str:
    lines = ["CASE"]
    for chk in checks:
        lines.append(f"  WHEN {chk.condition} THEN {getattr(chk, attr) if attr == 'reason' else quote_literal(chk.action)}")
    lines.append(f"  ELSE {default}")
    lines.append("END")
    return "\n".join(lines)


def stage_insert_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """One INSERT ... SELECT that reads every record past the watermark, classifies it,
    converts its fields to the column types and ranks it within its key."""
    n = table_names(pipeline, table)
    q = d.q
    cols = table.columns
    env = envelope_sql(d, table, "e.env")

    stage_columns = [
        "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_refresh_time",
        "_op", "_action", "_reason", "_rn", "_source_ts", "_source_pos",
        *[c.target_name for c in cols],
        "_payload", "_raw_value",
    ]

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

    # Level 2: operation, row image, source time and position.
    level2 = (
        "SELECT e.kafka_partition, e.kafka_offset, e.kafka_timestamp, e.refresh_time,\n"
        "       e.payload, e.raw_value, e.env, e.key_env,\n"
        f"       {env.op} AS op,\n"
        f"       {env.image} AS img,\n"
        f"       {env.source_ts_ms} AS source_ts_ms,\n"
        f"       {env.position} AS source_pos\n"
        f"FROM (\n{_indent(level1, 2)}\n) e"
    )

    # Level 3: each field as JSON, then converted to its column type (NULL when it does not
    # convert; level 4 tells that apart from a real NULL). Keys fall back to the Kafka key.
    field_lines = []
    for col in table.key_columns:
        from_image = d.cast_json(d.json_get("f.img", col.name), col.sql_type)
        from_key = d.cast_json(d.json_get("f.key_env", col.name), col.sql_type)
        field_lines.append(f"COALESCE({from_image},\n         {from_key}) AS {q(col.target_name)}")
    for col in table.value_columns:
        raw = d.json_get("f.img", col.name)
        field_lines.append(f"{raw} AS {q(_raw_alias(col))}")
        field_lines.append(f"{d.cast_json(raw, col.sql_type)} AS {q(col.target_name)}")
    source_ts = d.epoch_ms_to_timestamp(f"{d.cast_json('f.source_ts_ms', _BIGINT)}")
    level3 = (
        "SELECT f.kafka_partition, f.kafka_offset, f.kafka_timestamp, f.refresh_time,\n"
        "       f.payload, f.raw_value, f.env, f.img, f.op, f.source_pos,\n"
        f"       {source_ts} AS source_ts,\n"
        + ",\n".join("       " + line for line in field_lines)
        + f"\nFROM (\n{_indent(level2 + d.subquery_fence, 2)}\n) f"
    )

    checks = classification_checks(d, table)
    action = _case(checks, "action", "'upsert'")
    reason = _case(checks, "reason", "NULL")
    level4 = (
        "SELECT t.*,\n"
        f"{_indent(action, 7)} AS action,\n"
        f"{_indent(reason, 7)} AS reason\n"
        f"FROM (\n{_indent(level3 + d.subquery_fence, 2)}\n) t"
    )

    key_list = ", ".join(f"c.{q(k.target_name)}" for k in table.key_columns)
    order = "c.source_pos DESC NULLS LAST, c.kafka_partition DESC, c.kafka_offset DESC"
    if table.order_by == "kafka":
        order = "c.kafka_partition DESC, c.kafka_offset DESC"
    select_columns = [
        "c.kafka_partition", "c.kafka_offset", "c.kafka_timestamp", "c.refresh_time",
        "SUBSTRING(c.op, 1, 64)", "c.action", "c.reason",
        # 4. Latest event per key wins; ROW_NUMBER, never RANK: a tie must not yield two rows.
        f"ROW_NUMBER() OVER (\n         PARTITION BY CASE WHEN c.action IN ('upsert', 'delete') THEN 1 ELSE 0 END, {key_list}\n"
        f"         ORDER BY {order})",
        "c.source_ts", "c.source_pos",
        *[f"c.{q(col.target_name)}" for col in cols],
        "CASE WHEN c.action = 'quarantine' AND c.raw_value IS NULL THEN c.payload END",
        "CASE WHEN c.action = 'quarantine' THEN c.raw_value END",
    ]
    return (
        f"INSERT INTO {d.qualified(n.schema, n.stage)} (\n"
        + _indent(",\n".join(q(c) for c in stage_columns), 2)
        + "\n)\nSELECT "
        + ",\n       ".join(select_columns)
        + f"\nFROM (\n{_indent(level4, 2)}\n) c;"
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
        stale = (
            "-- 5. Never regress: a winner not newer than what is stored for its key is stale.\n"
            f"UPDATE {stage} s SET _action = 'stale'\n"
            f"FROM {target} t\n"
            f"WHERE {winners}\n  AND {key_match('t', 's')}\n"
            "  AND s._source_pos IS NOT NULL AND t._source_pos IS NOT NULL AND s._source_pos <= t._source_pos;"
        )
        step(stale)
        if not soft:
            step(
                f"UPDATE {stage} s SET _action = 'stale'\n"
                f"FROM {deleted} t\n"
                f"WHERE {winners}\n  AND {key_match('t', 's')}\n"
                "  AND s._source_pos IS NOT NULL AND t._source_pos IS NOT NULL AND s._source_pos <= t._source_pos;"
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
        step(
            "-- 6. Apply: remove the current row of every key with a winning event (the join is\n"
            "--    on the key, which is the DISTKEY, so it is collocated), then insert the upserts.\n"
            f"DELETE FROM {target} t\nUSING {stage} s\nWHERE {winners}\n  AND {key_match('t', 's')};"
        )
        step(
            "-- Deleted keys are remembered, so neither a replay nor a backfill resurrects them.\n"
            f"DELETE FROM {deleted} t\nUSING {stage} s\nWHERE {winners}\n  AND {key_match('t', 's')};"
        )
        step(
            f"INSERT INTO {deleted} ({', '.join(q(k) for k in keys)}, _source_ts, _source_pos, _kafka_partition, _kafka_offset, _deleted_at)\n"
            f"SELECT {', '.join('s.' + q(k) for k in keys)}, s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, {now}\n"
            f"FROM {stage} s\nWHERE s._rn = 1 AND s._action = 'delete';"
        )
        step(
            f"INSERT INTO {target} ({insert_cols})\n"
            f"SELECT {select_vals('false')}\nFROM {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert';"
        )
    else:
        step(
            "-- 6. Apply (soft deletes): upserts replace the row; deletes only mark it, keeping\n"
            "--    its last values (or record the key when it was never seen).\n"
            f"DELETE FROM {target} t\nUSING {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert'\n  AND {key_match('t', 's')};"
        )
        step(
            f"INSERT INTO {target} ({insert_cols})\n"
            f"SELECT {select_vals('false')}\nFROM {stage} s\nWHERE s._rn = 1 AND s._action = 'upsert';"
        )
        key_only = " AND ".join(f"s.{q(c)} IS NULL" for c in value_cols)
        if value_cols:
            key_cols = ", ".join(q(k) for k in keys)
            step(
                "-- A key-only delete preceded by an upsert of its key in this batch takes that\n"
                "-- upsert's values (the newest superseded one: the smallest _rn > 1).\n"
                f"UPDATE {stage} s SET "
                + ", ".join(f"{q(c)} = p.{q(c)}" for c in value_cols)
                + f"\nFROM {stage} p,\n"
                f"     (SELECT {key_cols}, MIN(_rn) AS _rn FROM {stage} WHERE _action = 'upsert' GROUP BY {key_cols}) m\n"
                f"WHERE s._rn = 1 AND s._action = 'delete' AND {key_only}\n"
                f"  AND {key_match('m', 's')} AND {key_match('p', 's')} AND p._rn = m._rn AND p._action = 'upsert';"
            )
        keep = ",\n       ".join(f"{q(c)} = CASE WHEN {key_only} THEN t.{q(c)} ELSE s.{q(c)} END" for c in value_cols)
        step(
            "-- A delete keeps the row's values: the event's before image when it is complete (a NULL\n"
            "-- there is the value the row had), else the stored ones (a key-only before image, as\n"
            "-- with REPLICA IDENTITY DEFAULT, has every non-key field NULL).\n"
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
        "-- 3. Records that cannot be applied are kept with the raw value and the reason.\n"
        f"INSERT INTO {qual(QUARANTINE)} (table_name, kafka_partition, kafka_offset, kafka_timestamp, reason, payload, raw_value, run_started_at)\n"
        f"SELECT {quote_literal(table.name)}, _kafka_partition, _kafka_offset, _kafka_timestamp, _reason, _payload, _raw_value, v_started\n"
        f"FROM {stage}\nWHERE _action = 'quarantine';"
    )
    step(
        "-- 7. Advance the per-partition watermark in the same transaction.\n"
        f"UPDATE {wm} w SET last_offset = b.last_offset, last_refresh_time = b.last_refresh_time, updated_at = {now}\n"
        f"FROM (SELECT _kafka_partition, MAX(_kafka_offset) AS last_offset, MAX(_refresh_time) AS last_refresh_time\n"
        f"      FROM {stage} GROUP BY _kafka_partition) b\n"
        "WHERE w.kafka_partition = b._kafka_partition;"
    )
    step(
        f"INSERT INTO {wm} (kafka_partition, last_offset, last_refresh_time, updated_at)\n"
        f"SELECT _kafka_partition, MAX(_kafka_offset), MAX(_refresh_time), {now}\n"
        f"FROM {stage} s\n"
        f"WHERE NOT EXISTS (SELECT 1 FROM {wm} w WHERE w.kafka_partition = s._kafka_partition)\n"
        "GROUP BY _kafka_partition;"
    )
    step(f"-- The stage is empty between runs (DELETE, not TRUNCATE: TRUNCATE would commit).\nDELETE FROM {stage};")

    add(f"SELECT COUNT(*) INTO v_read FROM {stage};")
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
