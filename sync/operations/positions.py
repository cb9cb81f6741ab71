"""Records without a source position, found in what the last sync read: a table ordered by
source position whose records do not carry it (an ExtractNewRecordState config whose
`add.fields` lacks the position fields, or rows without their order column).

Such a record is not lost and not quarantined: it ranks in Kafka order after the newest
position seen for its key, as a tombstone-only delete does (docs/correctness.md), and is
remembered at that position. That is exact only while a key's records arrive in order:
a re-sent record then applies again, a late one overwrites a newer one, and in history
mode a key's second such delete is taken for a copy of its first. Nothing in the records
says this went wrong, so `status` names the table and the fields its records lack.
Tombstones (no value) have no position by nature and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sync.config import Pipeline, TableConfig
from sync.operations.ordering import STREAK, streaks_sql
from sync.operations.recovery import parse_watermark
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect
from sync.sql.envelope import envelope_sql, position_fields, source_sql, unwrap_schema
from sync.sql.names import table_names
from sync.sql.recovery import offset_ranges


@dataclass
class MissingPositions:
    table: str
    records: int  # records with a value (no tombstones) the table's last sync read
    without: int  # those of them without a source position
    fields: list[str]  # the fields the position is read from

    def message(self) -> str:
        return (
            f"{self.table}: {self.without} of the {self.records} record(s) its last sync read carry no source position "
            f"(fields {', '.join(self.fields)}): they are ordered by Kafka order, exact only while a key's records arrive "
            "in order. Give the records their position fields (ExtractNewRecordState: add.fields; docs/debezium.md)"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "message": self.message()}


def _expects_positions(table: TableConfig) -> bool:
    """Ordered by source position, from fields the connector's configuration may leave out
    (the full envelope's `source` block always has them)."""
    return table.order_by != "kafka" and table.format != "debezium"


def missing_positions_sql(
    d: PostgresDialect, pipeline: Pipeline, table: TableConfig, ranges: dict[int, tuple[int, int | None]]
) -> str:
    """How many records in `ranges` of the stream hold a row (a JSON object), and how many
    of those have no position, by the procedure's own position expression."""
    n = table_names(pipeline, table)
    env = unwrap_schema(d, "s.payload")
    position = source_sql(d, table, envelope_sql(d, table, env).source).position
    return (
        f"SELECT COUNT(*), COUNT(CASE WHEN {position} IS NULL THEN 1 END)\n"
        f"FROM {d.qualified(n.schema, n.stream)} s\n"
        f"WHERE {offset_ranges(ranges)} AND {d.json_is_object(env)}"
    )


def missing_positions(
    query: Callable[[str], list[tuple]], d: PostgresDialect, pipeline: Pipeline, tables: Sequence[str]
) -> list[MissingPositions]:
    """The tables whose last sync that read records read some without a position (tables
    whose watermark the run log lists only in part are not checked)."""
    checked = [t for t in tables if _expects_positions(pipeline.table(t))]
    if not checked:
        return []
    last: dict[str, dict] = {}
    for row in query(streaks_sql(pipeline, checked, 1)):
        r = schemas.as_row(STREAK, row)
        if r["status"] == "ok":
            last[r["table_name"]] = r
    out = []
    for name, run in last.items():
        before, after = parse_watermark(run["watermark_before"]), parse_watermark(run["watermark_after"])
        if before is None or after is None:
            continue
        ranges = {p: (before.get(p, -1), o) for p, o in after.items()}
        table = pipeline.table(name)
        (records, without), *_ = query(missing_positions_sql(d, pipeline, table, ranges))
        if without:
            out.append(MissingPositions(name, int(records), int(without), position_fields(table)))
    return out
