"""Tables that share a topic (`route` in the pipeline file): each table's procedure reads
the topic's one streaming view, keeps the records its route selects, and marks the rest
`routed` (another table's, or, for all but the first table, anything not its own) or
`unmatched` (the first table only: a change event no table selects, counted per source
table in its schema-drift table, so nothing is dropped without a trace). Records of
either kind are read (the watermark passes them) and never applied.

The batch reads the fields the routes select on once (`route_columns_sql`) and names
the record's table (`_routed_to`) and, for the first table, its source (`_route_source`);
the classification reads those; the first table's run-log row counts the unmatched records
of the call (`unmatched`). Every function gives what a table without a route had before
(no check, no column), so the SQL of such tables does not change."""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.dialect import quote_literal
from sync.sql.procedure.classify import Check
from sync.sql.procedure.context import CALL_TIME, Action, TableSql
from sync.sql.procedure.fields import named_texts
from sync.sql.procedure.text import Chain, wrapped

# The schema-drift kind of records no table of the topic selects (varchar(16)), and the
# run-log column that counts them per call.
UNMATCHED_KIND = UNMATCHED_COLUMN = "unmatched"
# The batch's columns: whose record it is ('own', 'other' or NULL), and its source.
ROUTED_TO, ROUTE_SOURCE = "_routed_to", "_route_source"
# Records a table reads and leaves: another table's, or no table's.
NOT_OWN = f"('{Action.ROUTED}', '{Action.UNMATCHED}')"
# The schema-drift table's `field`, where an unmatched record's source is counted.
SOURCE_BYTES = 256


def routed(ctx: TableSql) -> bool:
    return ctx.table.route is not None


def first_on_topic(pipeline: Pipeline, table: TableConfig) -> bool:
    """The first table reading a routed topic (the one its view is named after) counts the
    records no table of the topic selects, and quarantines the records that are no
    change event at all; the others leave both to it."""
    return table.route is not None and pipeline.sharing(table)[0].name == table.name


def counts_unmatched(ctx: TableSql) -> bool:
    return first_on_topic(ctx.pipeline, ctx.table)


def run_log_columns(pipeline: Pipeline, table: TableConfig) -> tuple[schemas.Column, ...]:
    """The run-log columns a table's calls write: the count of unmatched records only where
    the table counts them (elsewhere it stays NULL, and the procedure's SQL is unchanged)."""
    return tuple(c for c in schemas.RUN_LOG if c.name != UNMATCHED_COLUMN or first_on_topic(pipeline, table))


def unmatched_outcome(ctx: TableSql) -> dict[str, str]:
    """The run-log count of the batch's unmatched records, over the stage (as `OUTCOMES`)."""
    if not counts_unmatched(ctx):
        return {}
    return {UNMATCHED_COLUMN: f"COUNT(CASE WHEN _action = '{Action.UNMATCHED}' THEN 1 END)"}


def _unwrapped(table: TableConfig) -> bool:
    return table.format != "debezium"


def _deciding(ctx: TableSql) -> list[TableConfig]:
    """The tables whose routes this table's procedure evaluates: its own first, then (the
    first table of the topic) every other table reading the topic."""
    if not counts_unmatched(ctx):
        return [ctx.table]
    return [ctx.table, *(t for t in ctx.pipeline.sharing(ctx.table) if t.name != ctx.table.name)]


def _fields(ctx: TableSql) -> list[str]:
    fields: list[str] = []
    for t in _deciding(ctx):
        assert t.route is not None
        fields += [f for f, _ in t.route.selectors(_unwrapped(t)) if f not in fields]
    return fields


def _match(table: TableConfig, texts: dict[str, str]) -> str:
    """`table`'s route holds (NULL when a selected field is missing)."""
    assert table.route is not None
    tests = []
    for field, values in table.route.selectors(_unwrapped(table)):
        listed = ", ".join(quote_literal(v) for v in values)
        tests.append(f"{texts[field]} = {listed}" if len(values) == 1 else f"{texts[field]} IN ({listed})")
    return " AND ".join(tests)


@dataclass(frozen=True)
class RouteColumns:
    """The columns the batch's next step adds (`lines`), and the condition of the table's
    own records over the step before it (`own`)."""

    lines: list[str]
    own: str | None = None

    def only_own(self, expr: str, alias: str = "") -> str:
        """`expr` for the table's own records, NULL for the others (nothing above reads their
        image, key or source block, so no field of theirs is decoded)."""
        if self.own is None:
            return expr
        return f"CASE WHEN {self.own} THEN {expr} END" + (f" AS {alias}" if alias else "")


def route_columns_sql(ctx: TableSql, chain: Chain, env: str) -> RouteColumns:
    """The batch's `chain` extended with the text of each field the routes select on
    (named once where the dialect names texts, in steps `route_1`, ...), and the lines of
    the columns the next step adds: `_routed_to` and, for the first table of the topic, `_route_source`
    (`db=...,table=...`, at most SOURCE_BYTES bytes)."""
    if not routed(ctx):
        return RouteColumns([])
    d = ctx.d
    obj = env if _unwrapped(ctx.table) else d.json_get(env, "source")
    fields = _fields(ctx)
    levels, named = named_texts(d, obj, fields, "r")
    chain.extend_levels("route", levels)
    texts = {f: named.get(f) or d.json_get_text(obj, f) for f in fields}
    own, *others = (_match(t, texts) for t in _deciding(ctx))
    other = f" WHEN {' OR '.join(f'({m})' for m in others)} THEN 'other'" if others else ""
    lines = [f"CASE WHEN {own} THEN 'own'{other} END AS {ROUTED_TO}"]
    if counts_unmatched(ctx):
        source = " || ".join(
            f"{quote_literal(('' if i == 0 else ',') + f + '=')} || COALESCE({texts[f]}, '')" for i, f in enumerate(fields)
        )
        lines.append(f"{d.prefix_bytes(source, SOURCE_BYTES)} AS {ROUTE_SOURCE}")
    return RouteColumns(lines, own)


def carried_columns(ctx: TableSql, prefix: str, final: bool = False) -> list[str]:
    """The routing columns each level above the batch carries (`final`: past the
    classification, which only needs the source of an unmatched record)."""
    if not routed(ctx):
        return []
    names = ([] if final else [ROUTED_TO]) + ([ROUTE_SOURCE] if counts_unmatched(ctx) else [])
    return [prefix + name for name in names]


def routing_checks(ctx: TableSql) -> list[Check]:
    """Classification rules placed before all others (first match wins). The first table
    of the topic: a tombstone is skipped (a bare tombstone names no table, so it never
    deletes), another table's record is `routed`, a change event of no table `unmatched`
    (its source as the reason); what is left (its own records, and values that are no
    change event) meets the usual rules. Any other table: whatever is not its own is
    `routed`."""
    if not routed(ctx):
        return []
    d, own = ctx.d, f"t.{ROUTED_TO} = 'own'"
    if not counts_unmatched(ctx):
        return [Check(f"t.{ROUTED_TO} IS NULL", Action.ROUTED, "NULL")]
    others = len(_deciding(ctx)) > 1
    return [
        Check(f"t._raw_value IS NULL AND {d.json_is_null('t._env')}", Action.TOMBSTONE, "NULL"),
        *([Check(f"t.{ROUTED_TO} = 'other'", Action.ROUTED, "NULL")] if others else []),
        Check(f"{d.json_is_object('t._env')} AND NOT COALESCE({own}, false)", Action.UNMATCHED, f"t.{ROUTE_SOURCE}"),
    ]


def own_drift_image(ctx: TableSql, image: str) -> str:
    """The stage's row image for the schema-drift step: none for records not the table's."""
    if not routed(ctx):
        return image
    return f"CASE WHEN c._action NOT IN {NOT_OWN} THEN {image} END"


def unmatched_sql(ctx: TableSql) -> str:
    """Records of the topic no table selects, counted per source in this table's
    schema-drift table (kind `unmatched`): `status` lists them."""
    values = {
        "table_name": quote_literal(ctx.table.name),
        "run_started_at": CALL_TIME,
        "kind": quote_literal(UNMATCHED_KIND),
        "field": "s._reason",
        "events": "COUNT(*)",
    }
    columns, selected = schemas.ordered(ctx.d, schemas.SCHEMA_DRIFT, values)
    return (
        "-- Records of the topic that no table of the pipeline selects, counted per source.\n"
        f"INSERT INTO {ctx.rel.schema_drift} ({', '.join(columns)})\n"
        f"SELECT {wrapped(selected, (2,), ' ' * 7)}\n"
        f"FROM {ctx.rel.stage} s\n"
        f"WHERE s._action = '{Action.UNMATCHED}'\n"
        "GROUP BY s._reason;"
    )
