"""A target column may be named like anything the generated procedure names for its own use.

A source table's columns are the user's: Debezium's JSON converter writes each column
under its own name ("the after field contains the state of the row after the event
occurred ... the value of each column", Debezium MySQL connector, "Data change events";
field names are the source's column names, see tests/test_field_names.py), so a table may
well have a column `op`, `payload`, `src`, `env` or `refresh_time`. The stage query
carries its own working values (the envelope, the row image, the source block, the
decoded texts, the classification) beside the target's columns; none of them may shadow
or clash with a column of the table, whatever its name. The working values all start with
`_`, which no target column may (the pipeline file refuses it, saying which column).

Each case goes through the command line (`deploy`, `ingest`, `sync`) on the embedded
PostgreSQL with a table keyed by `id`, a table without a primary key and a table keeping
its history, each with a column named like one of the procedure's own names."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp
from typer.testing import CliRunner

from sync.cli.app import app
from sync.config import ConfigError, parse_pipeline
from sync.sql.dialect import dialect_for
from sync.sql.procedure import TableSql, stage_insert_sql
from tests.helpers import EXAMPLES, make_pipeline, pipeline_toml
from tests.test_delivery_semantics import mysql_source

# What the stage query called its working values before they were kept apart from the
# target's columns: the stream's columns, the envelope's parts, the names of each field's
# JSON value, bounded value, text and placeholder mark, and the classification's.
INTERNAL_NAMES = [
    "op",
    "env",
    "key_env",
    "img",
    "src",
    "payload",
    "raw_value",
    "source_pos",
    "source_ts_ms",
    "has_source_ts",
    "unavailable",
    "drift_img",
    "refresh_time",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "kafka_time",
    "check_no",
    "action",
    "reason",
    "quarantine_payload",
    "b__o0",
    "x__p0",
    "b__v0",
    "x__v0",
    "j__ts_ms",
    "ji__id",
    "jk__id",
    "j__note",
    "u__note",
]


def tables_toml(column: str) -> str:
    """A keyed table, a keyless one and one with a history, each with `column` (varchar:
    the TOAST placeholder is checked for it) before another value column."""
    columns = f'columns = [{{ name = "id", type = "integer" }}, {{ name = "{column}", type = "varchar(32)" }}, {{ name = "note", type = "varchar(32)" }}]\n'
    head = '[[tables]]\nname = "{0}"\ntopic = "shop.{0}"\norder_by = "mysql-binlog"\n'
    return (
        head.format("keyed") + 'primary_key = ["id"]\n' + columns
        + head.format("keyless") + "primary_key = []\n" + columns
        + head.format("versioned") + 'primary_key = ["id"]\nhistory = { deletes = "close" }\n' + columns
    )  # fmt: skip


def events(column: str, keyed: bool) -> list[dict]:
    """Inserts of ids 1 and 2, an update of 1, a delete of 2 (with its before image, as
    MySQL's binlog_row_image=FULL sends it), each a Debezium change event."""

    def row(i: int, value: str) -> dict:
        return {"id": i, column: value, "note": f"n{i}"}

    changes = [
        ("c", None, row(1, "a")),
        ("c", None, row(2, "x")),
        ("u", row(1, "a"), row(1, "b")),
        ("d", row(2, "x"), None),
    ]
    out = []
    for pos, (op, before, after) in enumerate(changes, start=100):
        source = mysql_source(pos)
        key = {"id": (after or before)["id"]} if keyed else None
        value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"] + 5}
        out.append({"partition": 0, "key": key, "value": value})
    return out


def cli(versions: Path, *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"REDSHIFT_SYNC_VERSIONS": str(versions)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("column", INTERNAL_NAMES)
def test_a_column_named_like_a_working_value_syncs(wh, tmp_path: Path, column: str):
    config = tmp_path / "pipeline.toml"
    config.write_text(pipeline_toml(tables_toml(column)))
    common = ["--config", str(config), "--dsn", wh.dsn]
    versions = tmp_path / "versions"
    cli(versions, "revision", "-m", "tables", "--config", str(config))
    cli(versions, "deploy", *common)
    for table in ("keyed", "keyless", "versioned"):
        file = tmp_path / f"{table}.jsonl"
        file.write_text("".join(json.dumps(e) + "\n" for e in events(column, keyed=table != "keyless")))
        cli(versions, "ingest", "--table", table, "--file", str(file), *common)
        cli(versions, "sync", "--table", table, *common)
        assert wh.query(f'SELECT id, "{column}", note FROM cdc."{table}"') == [(1, "b", "n1")], table
        assert wh.query(f"SELECT COUNT(*) FROM cdc.sync_quarantine WHERE table_name = '{table}'") == [(0,)]
    history = wh.query(f'SELECT DISTINCT id, "{column}", _is_current FROM cdc."versioned__history" ORDER BY 1, 2')
    assert history == [(1, "a", False), (1, "b", True), (2, "x", False)]


@pytest.mark.parametrize("column", ["_action", "_rn", "_reason", "_op", "_payload", "_source_pos"])
def test_a_column_named_like_a_stage_column_is_refused_naming_it(column: str):
    """The stage's own columns and the query's working values start with `_`: a target
    column may not, whether it comes from the field's name or from `target`."""
    refused = rf"tables\[0\] \(keyed\)[^\n]*target column [^\n]*'{column}' is not allowed: [^\n]*starting with a letter"
    with pytest.raises(ConfigError, match=refused):
        make_pipeline(tables_toml(column))
    with pytest.raises(ConfigError, match=refused):
        make_pipeline(tables_toml("v").replace('name = "v", type', f'name = "v", target = "{column}", type'))


def _example_tables() -> list[tuple[str, TableSql]]:
    found = []
    for path in sorted(EXAMPLES.glob("*/pipeline.toml")):
        pipeline = parse_pipeline(tomllib.loads(path.read_text()))
        for table in pipeline.tables:
            found.append(
                (f"{path.parent.name}.{table.name}", TableSql(dialect_for("redshift", pipeline.schema), pipeline, table))
            )
    return found


@pytest.mark.parametrize(("name", "ctx"), _example_tables(), ids=[n for n, _ in _example_tables()])
def test_every_name_the_redshift_stage_query_gives_starts_with_an_underscore(name: str, ctx: TableSql):
    """On Redshift the dialect names more values (each field's bounded SUPER value and its
    text, JSON_SIZE once per value) than on PostgreSQL, where the test above runs: every
    alias of the stage query's steps is a target column's or starts with `_`."""
    sql = stage_insert_sql(ctx)
    query = sqlglot.parse_one(sql[sql.index("WITH ") :].rstrip(";"), read="redshift")
    targets = {c.target_name for c in ctx.table.columns}
    aliases = {a.alias for a in query.find_all(exp.Alias)}
    assert aliases, sql
    assert {a for a in aliases if not a.startswith("_")} <= targets, name
