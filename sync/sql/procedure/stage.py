"""2./3. The stage query: one INSERT ... SELECT that reads every record of the batch,
navigates each field once, converts it to its column type, classifies the record and
ranks it within its key. A chain of named steps (a WITH clause, which Redshift takes in
INSERT INTO ... SELECT: r_WITH_clause): the batch and its envelope (`batch_chain`), the
fields as JSON, intermediate decoded values, the typed record, its check number, its
action and reason; the SELECT over them ranks each record."""

from __future__ import annotations

from sync.config import ColumnConfig
from sync.sql import schemas
from sync.sql.dialect import quote_literal
from sync.sql.envelope import position_fields, source_sql
from sync.sql.policy import has_policies, hashed_texts, policy_value_sql, redacted_sql
from sync.sql.policy_replay import replay_text
from sync.sql.procedure.batch import batch_chain
from sync.sql.procedure.classify import SOURCE_TS_MS_RANGE, action_of, classification_checks, first_match, lookup
from sync.sql.procedure.context import APPLIED, Action, TableSql
from sync.sql.procedure.fields import (
    drift_image_sql,
    image_alias,
    kafka_key_field_sql,
    key_alias,
    mark_alias,
    merged_levels,
    named_texts,
    placeholder_sql,
    raw_alias,
    raw_field_sql,
    read_as_text,
    toastable,
    unavailable_sql,
)
from sync.sql.procedure.ordering import kafka_order, kafka_time, rank_order
from sync.sql.procedure.routing import carried_columns, own_drift_image, routing_checks
from sync.sql.procedure.text import WIDE, Chain, indent, packed
from sync.sql.semantic import DecodeSql, check_column, decode_sql
from sync.sql.types import SqlType

_BIGINT = SqlType("bigint")  # source.ts_ms: milliseconds since the epoch


def _record_columns(*extra: str) -> str:
    return ", ".join(["f._kafka_partition", "f._kafka_offset", "f._kafka_timestamp", "f._refresh_time", *extra])


def _fields_step(ctx: TableSql) -> Chain:
    """`fields`: source time and position, and every field as JSON, each navigated once;
    everything after reads these columns."""
    d, table = ctx.d, ctx.table
    chain = batch_chain(ctx)
    # The text of each field the source position is made of, named once before this step.
    levels, named = named_texts(d, "f._src", position_fields(table), "p")
    chain.extend_levels("envelope", levels)
    source = source_sql(d, table, "f._src", named)
    raw_lines = [f"{source.ts_ms} AS _ts_ms", f"{source.position} AS _source_pos", *carried_columns(ctx, "f.")]
    for i, col in enumerate(table.key_columns):
        raw_lines.append(f"{raw_field_sql(d, 'f._img', col)} AS {image_alias(i)}")
        raw_lines.append(f"{kafka_key_field_sql(d, table, col)} AS {key_alias(i)}")
    for i, col in enumerate(table.value_columns):
        raw_lines.append(f"{raw_field_sql(d, 'f._img', col)} AS {raw_alias(i)}")
    record = _record_columns("f._payload", "f._raw_value", "f._env", "f._img", "f._op")
    chain.add(
        "fields",
        f"SELECT {packed([record, *raw_lines], ' ' * 7, WIDE)}\nFROM {chain.last} f",
    )
    return chain


def _typed_step(ctx: TableSql) -> Chain:
    """`typed`: each field decoded/converted to its column type (NULL when it does not
    convert; the classification tells that apart from a real NULL). Keys fall back to the
    Kafka key. Semantic types may need intermediate values, and TOAST placeholders are
    marked once per field: the steps `fields_<n>` before it, built here."""
    d, table, q = ctx.d, ctx.table, ctx.q
    decoded: list[DecodeSql] = []

    def decode(col: ColumnConfig, raw: str, alias: str) -> DecodeSql:
        check_column(col, table.name)
        if read_as_text(d, col):
            return DecodeSql([], d.text_to_char(raw, col.sql_type), raw)
        result = decode_sql(d, col, raw, alias)
        decoded.append(result)
        return result

    field_lines = []
    # Intermediate values are named by column position: short, and unique within 63 characters.
    for i, col in enumerate(table.key_columns):
        from_image = decode(col, f"f.{image_alias(i)}", f"i{i}").value
        from_key = decode(col, f"f.{key_alias(i)}", f"k{i}").value
        field_lines.append(f"COALESCE({from_image}, {from_key}) AS {q(col.target_name)}")
    # The field holds the TOAST placeholder, by level: where its text is (the raw field, or
    # the text a decode named) -> alias -> SQL.
    marks: dict[int, dict[str, str]] = {}
    unavailable = []
    for i, col in enumerate(table.value_columns):
        raw = f"f.{raw_alias(i)}"
        result = decode(col, raw, f"v{i}")
        value = result.value
        if toastable(col):
            # 3. (TOAST) the placeholder keeps the stored value: NULL here, filled in later.
            mark = f"f.{mark_alias(i)}"
            if result.text is None:
                marks.setdefault(0, {})[mark_alias(i)] = unavailable_sql(d, raw, col)
            else:
                marks.setdefault(len(result.levels), {})[mark_alias(i)] = placeholder_sql(result.text)
            value = f"CASE WHEN {mark} THEN NULL ELSE {value} END"
            unavailable.append(f"CASE WHEN {mark} THEN {quote_literal(col.target_name + '|')} ELSE '' END")
        field_lines.append(f"{value} AS {q(col.target_name)}")
    unavailable_list = "NULLIF('|' || " + " || ".join(unavailable) + ", '|')" if unavailable else "NULL"
    field_lines.append(f"{unavailable_list} AS _unavailable")
    field_lines.append(f"{drift_image_sql(d, table)} AS _drift_img")
    # source.ts_ms as a number here; it becomes a timestamp in the outer SELECT, which reads
    # it twice: on PostgreSQL the conversion would otherwise run twice per record.
    source_ts_ms = d.cast_json("f._ts_ms", _BIGINT)
    intermediate = merged_levels(decoded)
    for depth, named in sorted(marks.items()):
        intermediate += [{} for _ in range(depth + 1 - len(intermediate))]
        intermediate[depth] = {**named, **intermediate[depth]}
    chain = _fields_step(ctx)
    chain.extend_levels("fields", intermediate)
    chain.add(
        "typed",
        "SELECT "
        + packed(
            [
                "f.*",
                f"{source_ts_ms} AS _source_ts_ms",
                f"NOT {d.json_is_null('f._ts_ms')} AS _has_source_ts",
                *field_lines,
            ],
            " " * 7,
            WIDE,
        )
        + f"\nFROM {chain.last} f",
    )
    return chain


def _carried(ctx: TableSql, source_ts_ms: str = "t._source_ts_ms", final: bool = False, replay: str | None = None) -> str:
    """What the stage needs of the typed record `t`, one per line: the JSON values
    (envelope, image) stay behind, and the payload is kept for quarantined records only,
    so the sort above does not carry it."""
    names = [
        "t._kafka_partition",
        "t._kafka_offset",
        "t._kafka_timestamp",
        "t._refresh_time",
        "t._raw_value",
        "t._op",
        source_ts_ms,
        "t._source_pos",
        "t._unavailable",
        "t._drift_img",
        *[_column(ctx, col, final, replay) for col in ctx.table.columns],
        *carried_columns(ctx, "t.", final=True),
    ]
    return "       " + packed(names, " " * 7)


def _column(ctx: TableSql, col: ColumnConfig, final: bool, replay: str | None = None) -> str:
    """A typed column of `t`; in the last step (`final`) as its column policy stores it
    (sync.sql.policy), applied to the value named once in `typed`."""
    name = f"t.{ctx.q(col.target_name)}"
    stored = policy_value_sql(ctx.d, col, name, replayed=replay) if final else name
    return name if stored == name else f"{stored} AS {ctx.q(col.target_name)}"


def _classified_step(ctx: TableSql) -> Chain:
    """`checked` and `classified`: the number of the record's first matching check, then
    its action, its reason and (for a record that may end in the quarantine) its payload."""
    d, table = ctx.d, ctx.table
    checks = routing_checks(ctx) + classification_checks(d, table)
    chain = _typed_step(ctx)
    # Column policies: the envelope, redacted below instead of the payload, and the text of
    # each hashed field of its images, named once.
    levels, hashed = hashed_texts(d, table, "f._env") if has_policies(table) else ([], {})
    chain.extend_levels("hashed", levels)
    # A replayed record's hashed fields are hashes already (sync.sql.policy_replay).
    replay_levels, replay = replay_text(d, table)
    chain.extend_levels("replayed", replay_levels)
    chain.add("checked", f"SELECT t.*,\n{indent(first_match(checks), 7)} AS _check_no\nFROM {chain.last} t")
    quarantined = ", ".join(str(i) for i, chk in enumerate(checks, start=1) if chk.action == Action.QUARANTINE)
    # The payload is kept for quarantined records, and for records with a TOAST
    # placeholder (quarantined later when no earlier value is known).
    keeps_payload = f"t._check_no IN ({quarantined})" + (
        " OR t._unavailable IS NOT NULL" if any(toastable(c) for c in table.value_columns) else ""
    )
    # Column policies: the envelope, redacted, instead of the payload.
    texts = {path: f"t.{name}" for path, name in hashed.items()}
    redacted = redacted_sql(d, table, "t._env", texts=texts, replayed=replay)  # a replay's hashes kept
    payload = indent(redacted, 7).lstrip() if has_policies(table) else "t._payload"
    lo, hi = SOURCE_TS_MS_RANGE
    # The source time only where it is one (the conversion above would raise otherwise).
    bounded_ts = f"CASE WHEN t._source_ts_ms BETWEEN {lo} AND {hi} THEN t._source_ts_ms END AS _source_ts_ms"
    chain.add(
        "classified",
        f"SELECT {_carried(ctx, bounded_ts, final=True, replay=replay).lstrip()},\n"
        f"{indent(action_of('t._check_no', checks), 7)} AS _action,\n"
        f"{indent(lookup('t._check_no', [chk.reason for chk in checks], 'NULL'), 7)} AS _reason,\n"
        f"       CASE WHEN {keeps_payload} THEN {payload} END AS _quarantine_payload,\n"
        f"       {indent(kafka_time('t._'), 7).lstrip()} AS _kafka_time\n"
        f"FROM {chain.last} t",
    )
    return chain


def stage_insert_sql(ctx: TableSql) -> str:
    """One INSERT ... SELECT that reads every record past the watermark, classifies it,
    converts its fields to the column types and ranks it within its key."""
    d, table, q = ctx.d, ctx.table, ctx.q
    # Per key (a keyless table: per batch; its own steps rank it again, sync/sql/procedure/keyless.py).
    ranked_by = ", ".join([f"CASE WHEN c._action IN {APPLIED} THEN 1 ELSE 0 END", *(f"c.{q(k)}" for k in ctx.keys)])
    newest = kafka_order("c._kafka_time", "c._kafka_partition", "c._kafka_offset")
    if ctx.source_order:
        # Events without a source position rank last here; the rare batches that hold
        # them are ranked again after the stage is written (`rerank_sql`).
        order, rank_pos = rank_order("c._source_pos", newest), "c._source_pos"
    else:
        order, rank_pos = newest, "NULL"
    values = {
        "_kafka_partition": "c._kafka_partition",
        "_kafka_offset": "c._kafka_offset",
        "_kafka_timestamp": "c._kafka_timestamp",
        "_kafka_time": "c._kafka_time",
        "_refresh_time": "c._refresh_time",
        "_op": d.prefix_bytes("c._op", 64),
        "_action": "c._action",
        "_reason": "c._reason",
        # 4. Latest event per key wins; ROW_NUMBER, never RANK: a tie must not yield two rows.
        "_rn": f"ROW_NUMBER() OVER (\n         PARTITION BY {ranked_by}\n         ORDER BY {order})",
        "_source_ts": d.epoch_ms_to_timestamp("c._source_ts_ms"),
        "_source_pos": "c._source_pos",
        "_rank_pos": rank_pos,
        **{col.target_name: f"c.{q(col.target_name)}" for col in table.columns},
        "_unavailable": "c._unavailable",
        "_payload": "c._quarantine_payload",
        # A raw value that did not parse cannot be redacted: not kept under column policies.
        "_raw_value": "NULL" if has_policies(table) else f"CASE WHEN c._action = '{Action.QUARANTINE}' THEN c._raw_value END",
        "_drift_img": own_drift_image(ctx, "c._drift_img"),
    }
    columns, selected = schemas.ordered(d, schemas.stage(table), values, quoted=True)
    return (
        f"INSERT INTO {ctx.rel.stage} (\n  {packed(columns, '  ')}\n)\n"
        f"{_classified_step(ctx).sql()}\n"
        f"SELECT {packed(selected, ' ' * 7)}\n"
        "FROM classified c;"
    )
