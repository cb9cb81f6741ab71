"""History mode below the stream: a backfill snapshot's rows as versions of their keys.

A snapshot row enters the history dated by its source time (the snapshot time, or the
row's own), as a read (`_op = 'r'`) that no Kafka record opened (`_kafka_partition` and
`_kafka_offset` -1: what tells a snapshot version from a stream version), only where its
key has no snapshot version yet and every version of it is newer than the row
(`sync/sql/handover.py`'s rule: the positions when both sides have one, else the times;
an unknown time is not newer). So a key whose stream history begins before the snapshot
keeps its versions untouched, a snapshot row older than the key's first stream version
becomes its first version, closed by it, and a snapshot loaded again, or an older one
after it, adds nothing: a key has at most one snapshot version, its first. The intervals are then recomputed by the
procedure's own statement (`intervals_sql`), over every key.

A snapshot version without a position sorts first among its key's versions
(`version_order`: positions NULLS FIRST); its Kafka timestamp is its source time, which
orders two snapshots' versions of a key by their times."""

from __future__ import annotations

from collections.abc import Mapping

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.apply import key_match
from sync.sql.dialect import PostgresDialect
from sync.sql.procedure.context import TableSql
from sync.sql.procedure.history_intervals import intervals_sql

SNAPSHOT_OP = "r"


# The Kafka coordinates of a version a backfill snapshot opened: no record's (Kafka numbers
# partitions and offsets from 0), and never NULL (the procedure matches a version by them).
NO_RECORD = "-1"


def snapshot_version(alias: str) -> str:
    """The history row `alias` is a version a backfill snapshot opened (no stream record did)."""
    return f"{alias}._kafka_partition = {NO_RECORD} AND {alias}._kafka_offset = {NO_RECORD}"


def _newer(h: str, ts: str, pos: str) -> str:
    """The version `h` is newer than a snapshot row at time `ts` and position `pos`."""
    return (
        f"CASE WHEN {pos} IS NOT NULL AND {h}._valid_from_pos IS NOT NULL THEN {h}._valid_from_pos > {pos}\n"
        f"         ELSE COALESCE({h}._valid_from > {ts}, false) END"
    )


def snapshot_versions_sql(ctx: TableSql, source: str, values: Mapping[str, str], ts: str, pos: str, rows: str) -> str:
    """INSERT into the history the rows of `source` (aliased `s`) that `rows` selects, as
    snapshot versions below the stream. `values`: each data column's value; `ts` and `pos`:
    the row's source time and position."""
    d, hist = ctx.d, ctx.rel.history
    version = {
        **values,
        "_valid_from": ts,
        "_valid_from_pos": pos,
        "_op": f"'{SNAPSHOT_OP}'",
        "_is_current": "false",
        "_kafka_partition": NO_RECORD,
        "_kafka_offset": NO_RECORD,
        "_kafka_timestamp": ts,
    }
    rest = (
        f"FROM {source} s\n"
        f"WHERE {rows} AND {ts} IS NOT NULL\n"
        f"  AND NOT EXISTS (SELECT 1 FROM {hist} h WHERE {key_match(d, ctx.keys, 'h', 's')}\n"
        f"    AND ({snapshot_version('h')} OR NOT {_newer('h', ts, pos)}));"
    )
    return "-- History: snapshot rows older than every version of their key, as its first version.\n" + schemas.insert_select_sql(
        d, hist, schemas.history(ctx.table), values=version, rest=rest, quoted=True
    )


def snapshot_history_sql(ctx: TableSql, source: str, values: Mapping[str, str], ts: str, pos: str, rows: str) -> list[str]:
    """The snapshot versions, then every key's intervals recomputed (the procedure's statement)."""
    return [snapshot_versions_sql(ctx, source, values, ts, pos, rows), intervals_sql(ctx, keys_of_batch=False, in_batch=False)]


def backfill_history_sql(
    d: PostgresDialect, pipeline: Pipeline, table: TableConfig, stage: str, values: Mapping[str, str]
) -> list[str]:
    """The backfill's history statements (none without history mode): the rows of its stage
    `stage` that are not deletes, with `values` their columns as the target stores them."""
    if table.history is None:
        return []
    data = {c.target_name: values[c.target_name] for c in table.columns}
    return snapshot_history_sql(TableSql(d, pipeline, table), stage, data, "s._source_ts", "s._source_pos", "NOT s._delete")
