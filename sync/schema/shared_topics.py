"""Revisions of tables that share a topic (`route`): what one table's change does to the
others reading its topic. The first table reading a topic decides for the others (it
counts the records no route selects), so a table joining, leaving or re-routing changes
the procedure of every table of the topic; and the topic's streaming view is named after
that first table, so an existing table's view never moves to another name (a new view
re-reads the topic from its start, and the old one would be dropped with its table)."""

from __future__ import annotations

from sync.config import Pipeline, TableConfig
from sync.schema.state import Drift
from sync.sql.names import table_names


def _group(pipeline: Pipeline, table: TableConfig) -> list[tuple[str, object]]:
    return [(t.name, t.route) for t in pipeline.sharing(table)]


def sharing_drifts(old: Pipeline, new: Pipeline, table: TableConfig) -> list[Drift]:
    """A procedure drift of `table` when the tables reading its topic (or their routes)
    changed: its procedure is replaced."""
    before = next((t for t in old.tables if t.name == table.name), None)
    if before is None or _group(old, before) == _group(new, table):
        return []
    return [
        Drift("any", f"procedure of {table.name}: the tables reading topic {table.topic} changed", "procedure", table.name, True)
    ]


def sharing_problems(old: Pipeline, new: Pipeline) -> list[str]:
    """Tables whose streaming view would take another name."""
    problems = []
    for table in new.tables:
        before = next((t for t in old.tables if t.name == table.name), None)
        if before is None:
            continue
        was, now = table_names(old, before).stream, table_names(new, table).stream
        if was != now:
            problems.append(
                f"tables ({table.name}): its topic's streaming view would change from {was} to {now} (a new view "
                f"re-reads the topic from its start). Safe path: keep {was.removesuffix('__stream')} the first table "
                f"reading topic {table.topic} in the file, and the only table leaving it last"
            )
    return problems
