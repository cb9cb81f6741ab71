"""Field names as Debezium's JSON converter writes them: the source's column names,
unchanged. Debezium's Avro notes ("About Avro name requirements"): names must start with
[A-Za-z_] and contain only [A-Za-z0-9_], and "Debezium uses the column name as the basis for
the corresponding Avro field", which is why `sanitize.field.names` (now
`field.name.adjustment.mode`, default none) exists for Avro; the JSON converter has no such
rule, so a PostgreSQL column "Größe" arrives under that name. Every use of a field name is
quoted (a JSON key literal on PostgreSQL, a quoted PartiQL step on Redshift), so such a
field is read like any other."""

from __future__ import annotations

import pytest

from sync.config import ConfigError, parse_pipeline
from sync.debezium.events import ChangeStream, PostgresSource
from sync.sql.objects import pipeline_objects
from tests.helpers import feed, make_pipeline

TABLE = """
[[tables]]
name = "article"
topic = "db.public.article"
primary_key = ["Schlüssel"]
order_by = "postgres-lsn"
columns = [
  { name = "Schlüssel", type = "integer", target = "schluessel" },
  { name = "Größe", type = "decimal(6,2)", target = "groesse" },
  { name = "名前", type = "varchar(32)", target = "namae" },
]
"""


def test_a_non_ascii_field_name_round_trips_through_deploy_and_sync(wh):
    from sync.operations.runner import deploy

    pipeline = make_pipeline(TABLE)
    deploy(wh, pipeline, "test")
    cs = ChangeStream(["Schlüssel"], PostgresSource(table="article"))
    row = {"Schlüssel": 1, "Größe": "12.50", "名前": "Füße 足"}
    run = feed(wh, pipeline, "article", [cs.insert(row), cs.update(row, {**row, "Größe": "13.25"})])
    assert (run.upserted, run.quarantined) == (1, 0)
    assert wh.query('SELECT schluessel, groesse::text, namae FROM cdc."article"') == [(1, "13.25", "Füße 足")]
    assert wh.query("SELECT field FROM cdc.sync_schema_drift") == []


def test_redshift_reads_a_non_ascii_field_through_a_quoted_step():
    procedure = "\n".join(o.sql for o in pipeline_objects(make_pipeline(TABLE), "redshift", "test") if o.kind == "procedure")
    assert '."Größe"' in procedure and '."名前"' in procedure and '."Schlüssel"' in procedure


@pytest.mark.parametrize("name", ["1st", "a-b", "a b", 'a"b', "x" * 128, "ü" * 64])
def test_field_names_that_cannot_be_read_are_refused_saying_why(name):
    data = make_pipeline(TABLE).model_dump(mode="json", by_alias=True)
    data["tables"][0]["columns"][1]["name"] = name
    with pytest.raises(
        ConfigError, match="letters \\(of any script\\), digits, _ and \\$, starting with a letter or _, at most 127 bytes"
    ):
        parse_pipeline(data)
