"""What a new schema revision does: the difference between the state the last revision
recorded and the pipeline file now, as the exact operations of its upgrade and downgrade.

Pure: states in, lines of Python for the revision file out (calls on a
`sync.schema.migrate.Revision`, which renders each operation's SQL from the generator). A type
change is made only when it widens (`sync.sql.types.widens`): every stored value is kept. A
change that cannot be made without loss is refused as a whole, with the safe manual path, so
no revision ever applies half of a pipeline change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sync.config import ColumnConfig, Pipeline, TableConfig
from sync.schema.run_log import missing_run_log_columns, run_log_label
from sync.schema.shared_topics import sharing_drifts, sharing_problems
from sync.schema.state import Drift, State, drifted_objects, pipeline_of
from sync.sql.dialect import DIALECTS
from sync.sql.names import QUARANTINE, SCHEMA_DRIFT, TableNames
from sync.sql.policy import KEY_TABLE
from sync.sql.types import widens

# The shared control tables of earlier revisions, and the per-table ones that replace them.
SHARED_CONTROL_TABLES = (f".{QUARANTINE}", f".{SCHEMA_DRIFT}")
PER_TABLE_CONTROL_TABLES = ("__quarantine", "__drift")


class RevisionRefused(ValueError):
    """The pipeline file asks for a change that cannot be made in place."""


@dataclass
class RevisionPlan:
    upgrade: list[str] = field(default_factory=list)  # statements and comments, in order
    downgrade: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the person writing the revision

    @property
    def empty(self) -> bool:
        return all(line.startswith("#") for line in self.upgrade)


def _call(method: str, *args: str) -> str:
    return f"r.{method}({', '.join(json.dumps(a) for a in args)})"


def _type(col: ColumnConfig) -> str:
    return str(col.sql_type)


def _keys(table: TableConfig) -> str:
    return ", ".join(f"{c.target_name} {_type(c)}" for c in table.key_columns)


def _widened(old: ColumnConfig, new: ColumnConfig) -> bool:
    return _type(old) != _type(new) and widens(old.sql_type, new.sql_type)


def _copied_somewhere(old: ColumnConfig) -> bool:
    """Some engine widens the column by copying it into a new one (not in place)."""
    return any(old.sql_type.family not in d.in_place_widenings for d in DIALECTS.values())


NEW_TABLE_PATH = (
    "Safe path: add a table under a new name with the new definition (one revision), backfill it from "
    "the old table or a snapshot (`INSERT INTO new SELECT ... FROM old`), switch readers, then remove the "
    "old table from the pipeline file (a later revision)."
)
WIDENINGS = (
    "A revision changes a type only to one that holds every value unchanged: a longer varchar, more decimal "
    "digits at the same scale, smallint -> integer/bigint, integer -> bigint, real -> double precision."
)
NEW_COLUMN_PATH = (
    "Safe path: list the field a second time with a new target name and the new type "
    '(`{{ name = "{field}", target = "{column}_v2", type = "{new}" }}`, one revision: the new column is filled '
    "from the records the stream still holds), copy the older rows by hand "
    '(`UPDATE <table> SET "{column}_v2" = CAST("{column}" AS {new}) WHERE "{column}_v2" IS NULL AND "{column}" IS NOT NULL`, '
    "after checking that every stored value converts), switch readers, then remove the old column from the "
    "pipeline file (a later revision)."
)


def _pipeline_problems(old: Pipeline, new: Pipeline) -> list[str]:
    problems = []
    if old.schema != new.schema:
        problems.append(
            f"pipeline.schema: {old.schema!r} -> {new.schema!r} would move every object. Safe path: a "
            "separate pipeline file with its own versions folder for the new schema, backfill, switch readers, "
            "then downgrade the old one to base."
        )
    if (old.source.kind, old.source.cluster_arn, old.source.uri) != (new.source.kind, new.source.cluster_arn, new.source.uri):
        problems.append(
            "source: the Kafka cluster changed; the watermarks hold offsets of the old cluster's topics, so "
            "records of the new one would be skipped. Safe path: a separate pipeline file (own schema and "
            "versions folder) reading the new cluster, backfill from a snapshot, switch readers, then downgrade "
            "the old pipeline to base."
        )
    return problems


def _source_ops(old: Pipeline, new: Pipeline, plan: RevisionPlan) -> None:
    """Credentials or the external schema's name: the same cluster, so the same offsets."""
    if old.source == new.source:
        return
    note = (
        "# the external schema changed: Redshift has no ALTER for it, so it is re-created with the streaming "
        "MVs, which re-read their topics from offset 0; the watermarks skip what was applied"
    )
    plan.upgrade += [note, _call("recreate_source")]
    plan.downgrade += [note, _call("recreate_source")]


def _heartbeat_ops(old: Pipeline, new: Pipeline, plan: RevisionPlan) -> None:
    """[heartbeat] added, removed or pointed at another topic: its stream relation."""
    before, after = (p.heartbeat.topic if p.heartbeat else None for p in (old, new))
    if before == after:
        return
    if before is not None:
        plan.upgrade.append(_call("drop_heartbeat"))
        plan.downgrade.append(_call("create_heartbeat"))
    if after is not None:
        plan.upgrade.append(_call("create_heartbeat"))
        plan.downgrade.insert(0, _call("drop_heartbeat"))


def policy_problems(old: TableConfig, new: TableConfig) -> list[str]:
    """A column's policy may be added, never changed or removed: stored values cannot go
    back to clear, nor from one policy's value to another's."""
    old_cols = {c.target_name: c for c in old.columns}
    return [
        f"table {new.name}, column {c.target_name}: policy {old_cols[c.target_name].policy} -> {c.policy or 'none'}: the "
        "stored values hold the old policy's values and the clear ones are not stored anywhere. Safe path: list the "
        "field a second time with a new target name and the new policy (one revision), backfill it, switch readers, "
        "then remove the old column (a later revision)."
        for c in new.columns
        if c.target_name in old_cols and old_cols[c.target_name].policy not in (None, c.policy)
    ]


def _table_problems(old: TableConfig, new: TableConfig) -> list[str]:
    t = new.name
    problems = []
    if old.topic != new.topic:
        problems.append(
            f"table {t}: topic {old.topic!r} -> {new.topic!r}: the watermark holds offsets of the old topic, so "
            f"records of the new one would be skipped. {NEW_TABLE_PATH}"
        )
    if old.delete_mode != new.delete_mode:
        problems.append(
            f"table {t}: delete_mode {old.delete_mode} -> {new.delete_mode} changes the target's columns and the "
            f"deleted-keys table and needs a decision about deleted rows. {NEW_TABLE_PATH}"
        )
    problems += policy_problems(old, new)
    if old.history is not None and new.history is not None and old.history != new.history:
        problems.append(
            f"table {t}: history {old.history.model_dump()} -> {new.history.model_dump()}: the stored versions were "
            "written under the old settings. Safe path: remove history (one revision, which drops the history "
            "table), then add it with the new settings (a second) and rebuild it (`redshift-sync history rebuild`)."
        )
    if _keys(old) != _keys(new):
        problems.append(
            f"table {t}: primary key ({_keys(old)}) -> ({_keys(new)}): Redshift cannot drop, retype or add key "
            f"columns in place, and the stage, the deleted keys and the merge are keyed on them. {NEW_TABLE_PATH}"
        )
    if new.is_keyless and old.distkey_name != new.distkey_name:
        problems.append(
            f"table {t}: distkey {old.distkey_name} -> {new.distkey_name} of a table without a primary key: "
            f"its deleted-keys table keeps its own distribution. {NEW_TABLE_PATH}"
        )
    old_cols = {c.target_name: c for c in old.columns}
    keys = {c.target_name for c in new.key_columns} | {c.target_name for c in old.key_columns}
    sortkeys = {c.target_name for c in new.sortkey_columns} | {c.target_name for c in old.sortkey_columns}
    for col in new.columns:
        before = old_cols.get(col.target_name)
        if before is None or col.target_name in keys or _type(before) == _type(col):
            continue
        if not widens(before.sql_type, col.sql_type):
            path = NEW_COLUMN_PATH.format(field=col.name, column=col.target_name, new=_type(col))
            problems.append(f"table {t}, column {col.target_name}: {_type(before)} -> {_type(col)}: {WIDENINGS} {path}")
        elif _copied_somewhere(before) and col.target_name in sortkeys:
            problems.append(
                f"table {t}, column {col.target_name}: {_type(before)} -> {_type(col)} is made by copying the column "
                "into a new one on Redshift, which cannot drop a SORTKEY column (r_ALTER_TABLE). Safe path: take the "
                "column out of `sortkey` (one revision), change its type (a second), then put it back (a third)."
            )
    return problems


@dataclass
class TableDrift:
    """What the generator now renders differently for one table, as revision operations."""

    procedure: bool = False
    streams: list[str] = field(default_factory=list)  # dialects whose stream is re-created
    indexes: list[tuple[str, str]] = field(default_factory=list)  # (dialect, name) of indexes built anew
    stage: bool = False  # the stage (empty between runs) is re-created
    watermark: bool = False  # the watermark's table attributes are changed in place

    def any(self) -> bool:
        return self.procedure or self.stage or self.watermark or bool(self.streams or self.indexes)


def _drift_ops(table: TableConfig, drifts: list[Drift], plan: RevisionPlan) -> TableDrift:
    """Operations for objects of one table the generator now renders differently."""
    found = TableDrift()
    names = TableNames("", table.name)
    for d in drifts:
        name = d.label.rsplit(".", 1)[-1]
        if d.kind == "procedure":
            found.procedure = True
        elif d.kind == "stream" and d.generated:
            if d.dialect not in found.streams:
                found.streams.append(d.dialect)
        elif d.kind == "index" and d.generated:
            # Only the index: re-creating the relation it is on would drop what it holds (on
            # PostgreSQL the stream is a table of records).
            found.indexes.append((d.dialect, name))
        elif d.kind == "table" and d.generated and name == names.stage:
            found.stage = True
        elif d.kind == "table" and d.generated and name == names.watermark:
            found.watermark = True
        else:
            plan.warnings.append(
                f"the generator now renders {d.label} ({d.dialect}) differently from the last revision; existing "
                "tables are not altered automatically: add the ALTER statements to this revision by hand"
            )
    return found


def _history_ops(old: TableConfig, new: TableConfig, plan: RevisionPlan) -> None:
    """history turned on (the history table is created, empty: the next syncs fill it) or
    off (it is dropped with its versions)."""
    t = new.name
    if old.history is None and new.history is not None:
        plan.upgrade.append(_call("create_history", t))
        plan.downgrade.insert(0, _call("drop_history", t))
    elif old.history is not None and new.history is None:
        plan.upgrade.append(_call("drop_history", t))
        plan.downgrade.insert(0, _call("create_history", t))
        plan.downgrade.insert(1, f"# {t}'s history is re-created empty: the versions the upgrade dropped are not restored")
        plan.warnings.append(f"table {t}: history is off: the revision drops its history table and every version in it")


def _table_ops(old: TableConfig, new: TableConfig, drifts: list[Drift], plan: RevisionPlan) -> None:
    t = new.name
    old_cols = {c.target_name: c for c in old.columns}
    new_cols = {c.target_name: c for c in new.columns}
    added = [c.target_name for c in new.columns if c.target_name not in old_cols]
    removed = [c.target_name for c in old.columns if c.target_name not in new_cols]
    widened = [name for name, c in new_cols.items() if name in old_cols and _widened(old_cols[name], c)]
    sort_changed = [c.target_name for c in old.sortkey_columns] != [c.target_name for c in new.sortkey_columns]
    dist_changed = old.distkey_name != new.distkey_name
    drift = _drift_ops(new, drifts, plan)
    streams = drift.streams
    changed = old.model_dump() != new.model_dump()
    if not (changed or drift.any()):
        return

    up, down = plan.upgrade, plan.downgrade
    up += [_call("add_column", t, c) for c in added]
    up += [_call("widen_column", t, c) for c in widened]
    # A policy added to a stored column converts its stored values (the clear ones are gone).
    policed = [name for name, c in new_cols.items() if name in old_cols and c.policy and not old_cols[name].policy]
    up += [_call("apply_policy", t, c) for c in policed]
    down += [f"# {t}.{c} keeps its converted values: the clear ones are not stored anywhere" for c in policed]
    if sort_changed:
        up.append(_call("alter_sortkey", t))
    up += [_call("drop_column", t, c) for c in removed]
    _history_ops(old, new, plan)
    if dist_changed:
        up.append(_call("alter_distkey", t))
    for dialect in streams:
        up.append(
            f"# the generator's {dialect} stream definition changed: a re-created streaming MV re-reads "
            "its topic from offset 0, which the watermark makes harmless"
        )
        up.append(_call("recreate_stream", t, dialect))
    for dialect, index in drift.indexes:
        up.append(f"# the generator's {dialect} index {index} changed: it is dropped and built anew")
        up.append(_call("recreate_index", t, dialect, index))
    if drift.stage:
        up.append("# the generator's stage layout changed: the stage is empty between runs")
        up.append(_call("recreate_stage", t))
    if drift.watermark:
        up.append(_call("restyle_watermark", t))
    up.append(_call("replace_procedure", t))

    down += [_call("add_column", t, c) for c in removed]
    if removed:
        down.append(
            f"# the values of {', '.join(removed)} dropped by the upgrade come back only for rows whose record the stream still holds"
        )
    if sort_changed:
        down.append(_call("alter_sortkey", t))
    down += [_call("drop_column", t, c) for c in added]
    if dist_changed:
        down.append(_call("alter_distkey", t))
    for c in widened:
        down.append(f"# {t}.{c} stays {_type(new_cols[c])}: the values written since may not fit {_type(old_cols[c])}")
    if streams:
        down.append(f"# {t}'s stream is not re-created: the generator's earlier definition is not kept")
    for _, index in drift.indexes:
        down.append(f"# {t}'s index {index} is not rebuilt: the generator's earlier definition is not kept")
    down.append(_call("replace_procedure", t))


def plan_revision(old: State | None, new: State) -> RevisionPlan:
    """The operations from `old` (None: an empty warehouse) to `new`."""
    plan = RevisionPlan()
    new_p = pipeline_of(new)
    if old is None:
        plan.upgrade = [_call("create_pipeline"), *(_call("create_table", t.name) for t in new_p.tables), _call("replace_views")]
        plan.downgrade = [
            _call("drop_views"),
            *(_call("drop_table", t.name) for t in reversed(new_p.tables)),
            _call("drop_pipeline"),
        ]
        return plan

    old_p = pipeline_of(old)
    old_tables = {t.name: t for t in old_p.tables}
    new_tables = {t.name: t for t in new_p.tables}
    problems = _pipeline_problems(old_p, new_p) + sharing_problems(old_p, new_p)
    for name, table in new_tables.items():
        if name in old_tables:
            problems += _table_problems(old_tables[name], table)
    if problems:
        raise RevisionRefused(
            "no revision written: the pipeline file asks for changes that cannot be made in place:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )

    _source_ops(old_p, new_p, plan)
    _heartbeat_ops(old_p, new_p, plan)
    drifts = drifted_objects(old)
    shared = [d for d in drifts if d.table is None]
    if any(d.kind == "function" for d in shared):
        plan.upgrade.append("# the generator's helper functions changed")
        plan.upgrade.append(_call("replace_functions"))
        plan.downgrade.append(_call("replace_functions"))
    missing = missing_run_log_columns(old)
    if missing:
        plan.upgrade.append("# the run log's new columns (rows written before hold NULL)")
        plan.upgrade += [_call("add_run_log_column", name) for name in missing]
        plan.downgrade += [_call("drop_run_log_column", name) for name in reversed(missing)]
        shared = [d for d in shared if d.label != run_log_label(old_p)]
    views = any(d.kind == "view" for d in shared)
    if any(d.kind == "table" and not d.generated and d.label.endswith(SHARED_CONTROL_TABLES) for d in shared):
        plan.upgrade.append("# one quarantine and one schema-drift table per table; the shared names become views")
        plan.upgrade.append(_call("separate_control_tables"))
        plan.downgrade.append(_call("join_control_tables"))
        drifts = [d for d in drifts if not (d.kind == "table" and d.label.endswith(PER_TABLE_CONTROL_TABLES))]
        views = False  # made by the separation
    for d in shared:
        if d.label.endswith(f".{KEY_TABLE}"):  # made by apply_policy / add_column when a policy comes
            continue
        if d.kind not in ("function", "setting", "view") and not d.label.endswith(SHARED_CONTROL_TABLES):
            plan.warnings.append(
                f"the generator now renders {d.label} ({d.dialect}) differently from the last revision"
                f"{'' if d.generated else ' (it is no longer generated)'}; existing objects are not altered "
                "automatically: add the statements to this revision by hand"
            )

    tables_change = old_tables.keys() != new_tables.keys()
    if tables_change:  # the views read every table's control tables
        plan.upgrade.append(_call("drop_views"))
    for name in old_tables.keys() - new_tables.keys():
        plan.upgrade.append(_call("drop_table", name))
        plan.downgrade.append(_call("create_table", name))
        plan.downgrade.append(f"# {name} is re-created empty: the data the upgrade dropped is not restored")
        plan.warnings.append(f"table {name} is no longer in the pipeline file: the revision drops it and its data")
    for table in new_p.tables:
        if table.name not in old_tables:
            plan.upgrade.append(_call("create_table", table.name))
            plan.downgrade.insert(0, _call("drop_table", table.name))
    if tables_change or views:
        plan.upgrade.append(_call("replace_views"))
        if tables_change:
            plan.downgrade.insert(0, _call("drop_views"))
        plan.downgrade.append(_call("replace_views"))
    for table in new_p.tables:
        if table.name in old_tables:
            mine = [d for d in drifts if d.table == table.name] + sharing_drifts(old_p, new_p, table)
            _table_ops(old_tables[table.name], table, mine, plan)
    return plan
