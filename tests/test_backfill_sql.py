"""Generated backfill/reconcile SQL: golden files for both dialects, and the Redshift
text parses with sqlglot's Redshift dialect."""

from __future__ import annotations

import os

import pytest
import sqlglot
from sqlglot import exp

from sync.sql.backfill_merge import BackfillSql
from sync.sql.buckets import ReconcileSql
from sync.sql.dialect import dialect_for
from tests.helpers import REPO

GOLDEN = REPO / "tests" / "golden" / "backfill"
ROLE = "arn:aws:iam::123456789012:role/redshift-copy"


def rendered(pipeline, table_name: str, dialect: str) -> str:
    d = dialect_for(dialect, pipeline.schema)
    table = pipeline.table(table_name)
    merge = BackfillSql(d, pipeline, table).script()
    rec = ReconcileSql(d, pipeline, table, 64, list(table.columns))
    return merge + "\n-- reconcile\n" + rec.bucket_counts() + "\n\n" + rec.bucket_rows([3, 5]) + "\n"


@pytest.mark.parametrize("dialect", ["postgres", "redshift"])
@pytest.mark.parametrize("table", ["customer", "orders"])
def test_golden(example_pipeline, table, dialect):
    text = rendered(example_pipeline, table, dialect)
    path = GOLDEN / f"{table}.{dialect}.sql"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize("table", ["customer", "orders"])
def test_redshift_statements_parse(example_pipeline, table):
    d = dialect_for("redshift", example_pipeline.schema)
    t = example_pipeline.table(table)
    b = BackfillSql(d, example_pipeline, t)
    rec = ReconcileSql(d, example_pipeline, t, 16, list(t.columns))
    statements = [b.stage_table(), b.clear_stage(), b.copy_from_s3("s3://bucket/staging/manifest.json", ROLE)]
    statements += [s.sql for s in b.merge()] + [rec.bucket_counts(), rec.bucket_rows([1, 2])]
    for sql in statements:
        parsed = sqlglot.parse_one(sql, read="redshift")
        assert not isinstance(parsed, exp.Command), sql
    # LOCK has no sqlglot grammar (it parses as an opaque command), like CALL.
    assert b.lock().splitlines()[-1].startswith("LOCK TABLE ")
    # sqlglot accepts an alias on DELETE's own table; Redshift does not.
    deletes = [sqlglot.parse_one(sql, read="redshift") for sql in statements if "DELETE FROM" in sql]
    assert deletes and all(stmt.this.alias == "" for stmt in deletes), [stmt.sql("redshift") for stmt in deletes]


@pytest.mark.parametrize("dialect", ["postgres", "redshift"])
def test_merge_locks_the_watermark_first_and_never_the_target(example_pipeline, dialect):
    # r_LOCK: "LOCK ... causes reads and writes on the table to wait": locking the target
    # would make every reader wait for the whole COPY. The watermark, which every sync
    # locks first, is enough to serialize the two writers.
    d = dialect_for(dialect, "cdc")
    lock = BackfillSql(d, example_pipeline, example_pipeline.table("customer")).lock()
    statement = lock.splitlines()[-1]
    assert statement.startswith('LOCK TABLE "cdc"."customer__watermark"')
    assert '"cdc"."customer",' not in statement and '"cdc"."customer";' not in statement
