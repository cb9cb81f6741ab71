"""The records of a run: those of the stream past the watermark (up to a bound), with the
quarantined records being replayed, each with its envelope read once."""

from __future__ import annotations

from sync.sql.dialect import quote_literal
from sync.sql.envelope import envelope_fields, envelope_sql, unwrap_schema
from sync.sql.policy_replay import marked_replay
from sync.sql.procedure.context import NEVER, READ_ORDER, TableSql
from sync.sql.procedure.fields import named_texts
from sync.sql.procedure.routing import route_columns_sql
from sync.sql.procedure.text import WIDE, Chain, indent, packed


def pending_condition(watermark: str) -> str:
    """Records of the stream `s` past the watermark `w` (LEFT JOINed on the partition).
    `refresh_time` only prunes: at or after the newest refresh read so far (a bounded run
    may stop inside a refresh), so the offsets decide. That refresh is read from the
    relation `watermark` by an uncorrelated subquery, in the statement that reads the
    stream: no statement of its own."""
    since = f"(SELECT COALESCE(MAX(m.last_refresh_time), {NEVER}) FROM {watermark} m)"
    return f"s.refresh_time >= {since}\n  AND s.kafka_offset > COALESCE(w.last_offset, -1)"


def pending_in_order_sql(ctx: TableSql, columns: str, into: str, rank: str) -> str:
    """SELECT `columns` of the `rank`-th pending record in READ_ORDER INTO `into` (no row,
    so NULLs, when there are fewer)."""
    return (
        f"SELECT {columns}\n"
        f"INTO {into}\n"
        f"FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY {READ_ORDER}) AS read_no\n"
        f"      FROM {ctx.rel.stream} s\n"
        f"      LEFT JOIN {ctx.rel.watermark} w ON w.kafka_partition = s.kafka_partition\n"
        f"      WHERE {indent(pending_condition(ctx.rel.watermark), 6).lstrip()}) x\n"
        f"WHERE x.read_no = {rank}"
    )


def batch_chain(ctx: TableSql) -> Chain:
    """The records of this run (past the watermark) with their operation, row image
    (`_img`), Kafka key (`_key_env`) and source block (`_src`): the steps `batch` (the
    records, with the schemas.enable wrapper removed), `batch_<n>` (the text of the
    fields the operation is made of, named once where the dialect bounds it first) and
    `envelope` (operation, row image and source block, each read once)."""
    d = ctx.d
    chain = Chain(d)
    chain.add(
        "batch",
        # Every name the stage query gives a value of its own starts with `_`, which no
        # target column may (sync/config.py): none shadows or clashes with a column.
        "SELECT s.kafka_partition AS _kafka_partition, s.kafka_offset AS _kafka_offset,\n"
        "       s.kafka_timestamp AS _kafka_timestamp, s.refresh_time AS _refresh_time,\n"
        "       s.payload AS _payload, s.raw_value AS _raw_value,\n"
        f"       {unwrap_schema(d, 's.payload')} AS _env,\n"
        f"       {unwrap_schema(d, 's.key_payload')} AS _key_env\n"
        f"FROM {ctx.rel.stream} s\n"
        f"LEFT JOIN {ctx.rel.watermark} w ON w.kafka_partition = s.kafka_partition\n"
        f"WHERE {pending_condition(ctx.rel.watermark)}\n"
        "  AND (s.refresh_time < v_until_time\n"
        "       OR (s.refresh_time = v_until_time\n"
        "           AND (s.kafka_partition < v_until_partition\n"
        "                OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))\n" + replay_sql(ctx),
    )
    levels, named = named_texts(d, "f._env", envelope_fields(ctx.table), "o")
    chain.extend_levels("batch", levels)
    env = envelope_sql(d, ctx.table, "f._env", named)
    # Tables sharing a topic: whose record it is (sync.sql.procedure.routing).
    routes = route_columns_sql(ctx, chain, "f._env")
    # The row image; a keyless table's update also needs its before image (`before_images`).
    image = d.json_get("f._env", "before") if ctx.before_images else env.image
    columns = [
        *(
            f"f._{c}"
            for c in ("kafka_partition", "kafka_offset", "kafka_timestamp", "refresh_time", "payload", "raw_value", "env")
        ),
        routes.only_own("f._key_env", "_key_env"),
        f"{env.op} AS _op",
        f"{routes.only_own(image)} AS _img",
        f"{routes.only_own(env.source)} AS _src",
        *routes.lines,
    ]
    chain.add("envelope", f"SELECT {packed(columns, ' ' * 7, WIDE)}\nFROM {chain.last} f")
    return chain


def batch_sql(ctx: TableSql) -> str:
    """`batch_chain` as the WITH clause of a query."""
    return batch_chain(ctx).sql()


def replaying(ctx: TableSql, alias: str = "") -> str:
    """The quarantined records of the table marked for replay (columns of `alias`): the
    stage reads them, the batch counts them, the call marks them replayed."""
    r = f"{alias}." if alias else ""
    return f"{r}table_name = {quote_literal(ctx.table.name)} AND {r}handled = 'replaying'"


def replay_sql(ctx: TableSql) -> str:
    """Quarantined records that `redshift-sync quarantine replay` marked for this run: read
    with the stream's records, so the same classification and merge rules apply to them.
    The quarantine keeps the value, not the Kafka key: a replayed key comes from the value."""
    d = ctx.d
    return (
        "UNION ALL\n"
        "-- Quarantined records being replayed (at or below the watermark: already read once).\n"
        "SELECT r.kafka_partition, r.kafka_offset, r.kafka_timestamp, r.run_started_at, r.payload, r.raw_value,\n"
        f"       {marked_replay(d, ctx.table, unwrap_schema(d, 'r.payload'))},\n"
        f"       CAST(NULL AS {d.json_type})\n"
        f"FROM {ctx.rel.quarantine} r\n"
        f"WHERE {replaying(ctx, 'r')}"
    )
