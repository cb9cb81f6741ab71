"""Which relations each warehouse operation reads, writes and locks, taken from the SQL it
runs (sqlglot's Redshift grammar), and which pairs of operations can run at once without
a serialization conflict.

Redshift at SERIALIZABLE detects conflicts per table: "if two transactions ... operate on
the same table and at least one of them is a write, ... [and] a transaction reads a table
that a concurrent transaction writes" in both directions, one of them is stopped with
error 1023 ("Isolation levels in Amazon Redshift",
https://docs.aws.amazon.com/redshift/latest/dg/c_serial_isolation.html). A pair of
operations is safe when it has no read-write cycle over tables (X reads what Y writes and
Y reads what X writes), or when both take the same LOCK before anything else ("LOCK":
"explicit table locking ... [to] avoid serializable isolation errors",
https://docs.aws.amazon.com/redshift/latest/dg/r_LOCK.html), with every lock taken in
one global order. UPDATE and DELETE read the table they write. At SNAPSHOT isolation a
write-write conflict needs two writers of the same rows, which such a pair is too.

The SQL: the procedures of the committed rendering of an example (sql/procedures/), and
for what the commands run at run time, the same builders the commands call, for Redshift.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

import sqlglot
from sqlglot import exp

from sync.config import Pipeline, TableConfig, parse_pipeline
from sync.operations.quarantine import Selection, discard_sql, replay_sql
from sync.operations.runner import call_result_sql, call_sql, isolate_sql, prune_sql
from sync.sql import recovery
from sync.sql.backfill_merge import BackfillSql
from sync.sql.dialect import dialect_for, quote_literal
from sync.sql.explain import ExplainSql
from sync.sql.names import table_names
from sync.sql.statements import body_sql_statements, procedure_body, split_statements
from tests.helpers import EXAMPLES, REPO

PROCEDURES = REPO / "sql" / "procedures"
EXAMPLE_NAMES = sorted(p.parent.name for p in EXAMPLES.glob("*/pipeline.toml"))
# Per-table operations, in the order the documentation lists them.
KINDS = ("sync", "isolate", "replay", "discard", "backfill", "reset-positions", "rebase-offsets", "prune", "refresh", "explain")
PRUNE_RUN_LOG = "prune run log"
# Session settings; statistics (no rows read or written); a session's temporary table
# (LIKE reads a definition, not rows) and a procedure's definition (its body is read at
# its CALL).
_SKIPPED = ("SET ", "ANALYZE ", "CREATE TEMPORARY TABLE ", "CREATE OR REPLACE PROCEDURE ")
_INTO_VARIABLES = re.compile(r"\s+INTO\s+v_[a-z_]+(?:\s*,\s*v_[a-z_]+)*", re.I)
_CALL = re.compile(r"^CALL\s+(\S+?)\((.*)\)\s*;?$", re.S)
_LEADING_COMMENTS = re.compile(r"^(\s*--[^\n]*\n)+")
_LOCK = re.compile(r"^LOCK\s+TABLE\s+([^;]+?)\s*;?$", re.S)


@dataclass(frozen=True)
class Access:
    """One transaction: relations locked (in order, and those locked before the first read
    or write), read and written. Names are `schema.relation`."""

    locks: tuple[str, ...] = ()
    locks_first: tuple[str, ...] = ()
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()

    def then(self, other: Access) -> Access:
        touched = bool(self.reads or self.writes)
        first = self.locks_first if touched else self.locks_first + other.locks_first
        return Access(self.locks + other.locks, first, self.reads | other.reads, self.writes | other.writes)


@dataclass(frozen=True)
class Operation:
    name: str  # e.g. "sync customer", "prune"
    kind: str
    table: str | None
    access: Access


def _name(sql_name: str) -> str:
    return ".".join(part.strip().strip('"') for part in sql_name.split("."))


def _table_name(node: exp.Table) -> str | None:
    return f"{node.db}.{node.name}" if node.db else None


def _written(node: exp.Table) -> frozenset[str]:
    """The relation a statement writes; none for an unqualified one, which the SQL uses only
    for a temporary table: "Temporary tables are created in a separate session-specific
    schema" (CREATE TABLE, https://docs.aws.amazon.com/redshift/latest/dg/r_CREATE_TABLE_NEW.html),
    so no other transaction can read or write it."""
    name = _table_name(node)
    return frozenset({name} if name else ())


def _tables(tree: exp.Expression, schemas: set[str], skip: exp.Expression | None = None) -> set[str]:
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    out = set()
    for node in tree.find_all(exp.Table):
        if node is skip or node.name in ctes or node.find_ancestor(exp.Into):
            continue
        name = _table_name(node)
        if name and name.split(".")[0] in schemas:
            out.add(name)
    return out


def _written(node: exp.Table) -> frozenset[str]:
    """The relation a statement writes; none when it is a session's temporary table."""
    name = _table_name(node)
    return frozenset({name} if name else ())


def statement_access(sql: str, schemas: set[str], procedures: dict[tuple[str, bool], Access]) -> Access:
    """What one statement locks, reads and writes (a CALL: what the procedure's body does)."""
    sql = _INTO_VARIABLES.sub("", _LEADING_COMMENTS.sub("", sql).strip())
    if sql.upper().startswith(_SKIPPED):
        return Access()
    lock = _LOCK.match(sql)
    if lock:
        # A session's temporary table (unqualified) is locked by no other session.
        names = tuple(name for n in lock.group(1).split(",") if "." in (name := _name(n)))
        return Access(names, names)
    call = _CALL.match(sql)
    if call:
        return procedures[(_name(call.group(1)), bool(call.group(2).strip()))]
    tree = sqlglot.parse_one(sql, read="redshift")
    if isinstance(tree, exp.Insert):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        return Access(reads=frozenset(_tables(tree, schemas, skip=target)), writes=_written(target))
    if isinstance(tree, (exp.Update, exp.Delete)):
        return Access(reads=frozenset(_tables(tree, schemas)), writes=_written(tree.this))
    if isinstance(tree, exp.Create) and tree.expression is None:  # a table of the session's own
        return Access(writes=_written(tree.this.this if isinstance(tree.this, exp.Schema) else tree.this))
    if isinstance(tree, exp.Drop):
        return Access(writes=frozenset().union(*(_written(t) for t in tree.args["tables"])))
    if isinstance(tree, exp.Create):  # the streaming materialized view: its refresh writes it
        return Access(reads=frozenset(_tables(tree.expression, schemas)), writes=frozenset({_table_name(tree.this)}))
    if isinstance(tree, (exp.Select, exp.Union)):
        return Access(reads=frozenset(_tables(tree, schemas)))
    if isinstance(tree, exp.Copy):
        return Access(writes=frozenset({_table_name(tree.this)}))
    raise ValueError(f"no read/write rule for {type(tree).__name__}: {sql[:200]}")


def transaction_access(statements: Iterable[str], schemas: set[str], procedures: dict[tuple[str, bool], Access]) -> Access:
    total = Access()
    for sql in statements:
        total = total.then(statement_access(sql, schemas, procedures))
    return total


@functools.cache
def example_pipeline(example: str) -> Pipeline:
    return parse_pipeline(tomllib.loads((EXAMPLES / example / "pipeline.toml").read_text()))


def committed_statements(example: str) -> list[str]:
    return [s for path in sorted((PROCEDURES / example).glob("*.sql")) for s in split_statements(path.read_text())]


def _header(statement: str) -> str:
    return statement.split("\n", 1)[0]


def _procedure_key(statement: str) -> tuple[str, bool] | None:
    """(name, takes arguments) of a CREATE PROCEDURE statement, else None."""
    m = re.match(r"CREATE OR REPLACE PROCEDURE (\S+?)\((.*?)\)\s*$", _header(statement))
    return (_name(m.group(1)), bool(m.group(2).strip())) if m else None


def procedures_of(example: str, schemas: set[str]) -> dict[tuple[str, bool], Access]:
    """Each committed procedure's access, by (name, takes arguments); a body that CALLs
    another procedure is read after it."""
    found = {}
    for statement in committed_statements(example):
        key = _procedure_key(statement)
        if key:
            found[key] = body_sql_statements(procedure_body(statement))
    out: dict[tuple[str, bool], Access] = {}
    while len(out) < len(found):
        for key, body in found.items():
            if key not in out:
                try:
                    out[key] = transaction_access(body, schemas, out)
                except KeyError:  # CALLs one not read yet
                    continue
    return out


def created(
    statements: list[str], schemas: set[str], procedures: dict[tuple[str, bool], Access]
) -> dict[tuple[str, bool], Access]:
    """The access of the procedures `statements` create (explain's temporary procedure)."""
    found = {}
    for statement in statements:
        key = _procedure_key(statement)
        if key:
            found[key] = transaction_access(body_sql_statements(procedure_body(statement)), schemas, procedures)
    return found


def _bind(sql: str, params: list) -> str:
    for value in params:
        sql = sql.replace("%s", quote_literal(str(value)), 1)
    return sql


def explain_sql(pipeline: Pipeline, table: TableConfig) -> list[str]:
    """What `explain` runs on Redshift, in its one (rolled back) transaction, a key bound."""
    sql = ExplainSql(dialect_for("redshift", pipeline.schema), pipeline, table, "explain_0")
    return [_bind(s, ["K1"] * s.count("%s")) for s in sql.statements()]


def _runtime_sql(pipeline: Pipeline, table: TableConfig, kind: str) -> list[str]:
    """The statements of one table's operation, as the command runs them on Redshift."""
    d = dialect_for("redshift", pipeline.schema)
    if kind == "explain":
        return explain_sql(pipeline, table)
    where, params = Selection(table.name).where()
    if kind == "sync":  # the procedure's lock first, the CALL and its result (runner.call_procedure)
        return [recovery.lock_sql(d, pipeline, table), call_sql(pipeline, table.name), call_result_sql(pipeline, table.name)]
    if kind == "isolate":  # the procedure's lock first, as for the sync (runner.isolate_first_pending)
        return [recovery.lock_sql(d, pipeline, table), _bind(isolate_sql(pipeline, table.name), ["the engine's error"])]
    if kind == "replay":  # the lock, the CALL's result and what failed again, in its transaction
        r = replay_sql(d, pipeline, table, where)
        again = _bind(r.again, [table.name, table.name])
        return [
            recovery.lock_sql(d, pipeline, table),
            _bind(r.mark, params),
            call_sql(pipeline, table.name),
            call_result_sql(pipeline, table.name),
            again,
        ]
    if kind == "discard":
        return [recovery.lock_sql(d, pipeline, table), _bind(discard_sql(d, pipeline, table, where), params)]
    if kind == "prune":
        return prune_sql(d, pipeline, 30, stream=True).tables[table.name]
    if kind == "backfill":
        b = BackfillSql(d, pipeline, table)
        copy = b.copy_from_s3("s3://bucket/stage/manifest", "arn:aws:iam::123456789012:role/copy")
        return [b.lock(), b.clear_stage(), copy, *(step.sql for step in b.merge())]
    at = datetime(2024, 1, 1)
    run_log = lambda status: recovery.run_log_sql(d, pipeline, table, status, at, "0:1", "0:1")  # noqa: E731
    if kind == "reset-positions":
        return [recovery.lock_sql(d, pipeline, table), *recovery.reset_positions_sql(d, pipeline, table), run_log("reset")]
    if kind == "rebase-offsets":
        return [
            recovery.lock_sql(d, pipeline, table),
            recovery.watermark_rows_sql(d, pipeline, table),
            recovery.new_records_sql(d, pipeline, table),
            *recovery.rebase_offsets_sql(d, pipeline, table, at, {0: 5, 1: 3}, {0}),
            recovery.watermark_text_sql(d, pipeline, table),
            run_log("rebase"),
        ]
    raise ValueError(kind)


@functools.cache
def operations(example: str) -> tuple[Operation, ...]:
    """Every operation that can run against the example's warehouse: per table, and the
    prune of the shared run log."""
    pipeline = example_pipeline(example)
    schemas = {pipeline.schema, pipeline.source.external_schema}
    procedures = procedures_of(example, schemas)
    views = {
        _name(m.group(1)): s
        for s in committed_statements(example)
        if (m := re.match(r"CREATE MATERIALIZED VIEW (\S+)", _header(s)))
    }
    out = []
    for table in pipeline.tables:
        for kind in KINDS:
            if kind == "reset-positions" and table.order_by == "kafka":
                continue  # refused: no positions stored
            if kind in ("explain", "backfill") and table.is_keyless:
                continue  # refused for a table without a primary key
            if kind == "refresh":
                # A view several tables share is refreshed once: each table's refresh is its.
                stream = f"{pipeline.schema}.{table_names(pipeline, table).stream}"
                access = statement_access(views[stream], schemas, procedures)
            else:
                statements = _runtime_sql(pipeline, table, kind)
                access = transaction_access(statements, schemas, {**procedures, **created(statements, schemas, procedures)})
            out.append(Operation(f"{kind} {table.name}", kind, table.name, access))
    run_log = prune_sql(dialect_for("redshift", pipeline.schema), pipeline, 30).run_log
    out.append(Operation(PRUNE_RUN_LOG, PRUNE_RUN_LOG, None, transaction_access(run_log, schemas, {})))
    return tuple(out)


@dataclass(frozen=True)
class Verdict:
    safe: bool
    why: str  # "serialized by <lock>", "no read-write cycle", or "cycle: ..."


def verdict(x: Access, y: Access) -> Verdict:
    shared_first = [lock for lock in x.locks_first if lock in y.locks_first]
    if shared_first:
        return Verdict(True, f"serialized by LOCK {shared_first[0]}")
    xy, yx = x.reads & y.writes, y.reads & x.writes
    if xy and yx:
        return Verdict(False, f"cycle: reads {', '.join(sorted(xy))} / {', '.join(sorted(yx))} the other writes")
    if not (x.reads | x.writes) & (y.reads | y.writes):
        return Verdict(True, "disjoint tables")
    return Verdict(True, "no read-write cycle")


def pairs(ops: tuple[Operation, ...]) -> Iterator[tuple[Operation, Operation]]:
    """Every pair that can run at once, an operation with a second run of itself included."""
    for i, x in enumerate(ops):
        for y in ops[i:]:
            yield x, y


def lock_order_violations(ops: tuple[Operation, ...]) -> list[str]:
    """Pairs of relations two operations lock in opposite orders (a deadlock waiting)."""
    before: dict[tuple[str, str], str] = {}
    out = []
    for op in ops:
        for i, a in enumerate(op.access.locks):
            for b in op.access.locks[i + 1 :]:
                if a == b:
                    continue
                if (b, a) in before:
                    out.append(f"{op.name} locks {a} before {b}; {before[(b, a)]} the other way")
                before.setdefault((a, b), op.name)
    return out


def _generic(name: str, tables: dict[str, str], schema: str) -> str:
    rel = name.split(".", 1)[1] if name.startswith(schema + ".") else name
    for table, label in tables.items():
        if rel == table:
            return label
        if rel.startswith(table + "__"):
            return label + rel[len(table) :]
    return rel


def markdown(example: str = "salesdb") -> str:
    """The matrix for docs/redshift.md: each operation's locks, reads and writes (`<t>`:
    the operation's own table, `<u>`: another), then a verdict per pair of kinds, for the
    same table and for two tables."""
    pipeline = example_pipeline(example)
    ops = operations(example)
    a, b = pipeline.tables[0].name, pipeline.tables[1].name
    names = {a: "<t>", b: "<u>"}
    label = lambda rel: _generic(rel, names, pipeline.schema)  # noqa: E731
    listed = lambda rels: ", ".join(f"`{n}`" for n in rels) or "–"  # noqa: E731
    generic = lambda rels: listed(sorted({label(r) for r in rels}))  # noqa: E731
    lines = [
        "| operation | locks first | reads | writes |",
        "|---|---|---|---|",
    ]
    by = {(op.kind, op.table): op for op in ops}
    kinds = [k for k in (*KINDS, PRUNE_RUN_LOG) if (k, a) in by or (k, None) in by]
    for kind in kinds:
        op = by.get((kind, a)) or by[(kind, None)]
        acc = op.access
        first = listed(list(dict.fromkeys(label(r) for r in acc.locks_first)))  # in the order taken
        lines.append(f"| {kind} | {first} | {generic(acc.reads)} | {generic(acc.writes)} |")
    lines += ["", "| | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    mark = lambda v: "✓ lock" if v.safe and v.why.startswith("serialized") else ("✓" if v.safe else "✗")  # noqa: E731
    for x in kinds:
        row = []
        for y in kinds:
            ox, oy_same = by.get((x, a)) or by[(x, None)], by.get((y, a)) or by[(y, None)]
            oy_other = by.get((y, b)) or by[(y, None)]
            same, other = verdict(ox.access, oy_same.access), verdict(ox.access, oy_other.access)
            row.append(f"{mark(same)} / {mark(other)}")
        lines.append(f"| **{x}** | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


DOC = REPO / "docs" / "redshift.md"
BEGIN, END = "<!-- conflict matrix: generated by tests/test_conflict_matrix.py -->", "<!-- end of conflict matrix -->"


def documented() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n") + "\n"


def document(matrix: str) -> None:
    text = DOC.read_text()
    DOC.write_text(text[: text.index(BEGIN) + len(BEGIN)] + "\n" + matrix + text[text.index(END) :])
