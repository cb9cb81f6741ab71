"""Every documented Debezium shape, fed through the generated procedure on PostgreSQL,
ending in the right target rows: MySQL and PostgreSQL connectors, with and without the
schemas wrapper, REPLICA IDENTITY DEFAULT, key-only and null `before`, ExtractNewRecordState
(rewrite and tombstone deletes), primary-key changes, truncates, TOAST placeholders."""

from __future__ import annotations

from typing import Any

from sync.config import Pipeline
from sync.debezium.events import ChangeStream, MySqlSource, PostgresSource
from sync.operations.runner import deploy
from sync.warehouse import Warehouse
from tests.helpers import EXAMPLES, feed

SHAPES = EXAMPLES / "debezium_shapes" / "pipeline.toml"


def shapes(wh: Warehouse) -> Pipeline:
    """The example pipeline with one table per message shape, deployed."""
    import tomllib

    from sync.config import parse_pipeline

    pipeline = parse_pipeline(tomllib.loads(SHAPES.read_text()))
    deploy(wh, pipeline, "examples/debezium_shapes/pipeline.toml")
    return pipeline


COLUMNS = 'columns = [{ name = "id", type = "integer" }, { name = "name", type = "varchar(64)" }, { name = "bio", type = "varchar(256)" }]\n'


def table_toml(name: str, **options: str) -> str:
    extra = "".join(f'{k} = "{v}"\n' for k, v in options.items())
    return f'[[tables]]\nname = "{name}"\ntopic = "topic.{name}"\nprimary_key = ["id"]\n{extra}{COLUMNS}'


def rows(wh: Warehouse, table: str, columns: str = "id, name, bio") -> list[tuple]:
    return wh.query(f'SELECT {columns} FROM cdc."{table}" ORDER BY id')


def row(i: int, name: str, bio: str | None = None) -> dict[str, Any]:
    return {"id": i, "name": name, "bio": bio}


def test_full_envelope_mysql_and_postgres_with_and_without_schemas(wh):
    pipeline = shapes(wh)
    streams = {
        "my": ChangeStream(["id"], MySqlSource(table="t")),
        "my_schema": ChangeStream(["id"], MySqlSource(table="t"), with_schema=True),
        "pg": ChangeStream(["id"], PostgresSource(table="t")),
        "pg_kafka": ChangeStream(["id"], PostgresSource(table="t"), with_schema=True),
    }
    for name, cs in streams.items():
        snapshot = [cs.snapshot(row(i, f"n{i}")) for i in (1, 2, 3, 4)]
        feed(wh, pipeline, name, snapshot)
        changes = [
            cs.insert(row(5, "n5")),
            # REPLICA IDENTITY DEFAULT: an update without its before image
            cs.update(None, row(1, "n1-b")),
            # a delete whose before holds only the key
            cs.delete({"id": 2, "name": None, "bio": None}),
            cs.tombstone({"id": 2}),
            # primary-key change 3 -> 30: d + tombstone + c
            cs.delete(row(3, "n3")),
            cs.tombstone({"id": 3}),
            cs.insert(row(30, "n3")),
        ]
        # a delete with before null: the key only in the Kafka key
        d4 = cs.delete({"id": 4})
        d4["value"] = (
            {**d4["value"], "before": None}
            if not cs.with_schema
            else {**d4["value"], "payload": {**d4["value"]["payload"], "before": None}}
        )
        run = feed(wh, pipeline, name, [*changes, d4, cs.tombstone({"id": 4})])
        assert (run.upserted, run.deleted, run.tombstones, run.quarantined) == (3, 3, 3, 0), name
        assert rows(wh, name) == [(1, "n1-b", None), (5, "n5", None), (30, "n3", None)], name
        deleted = [k for (k,) in wh.query(f'SELECT id FROM cdc."{name}__deleted" ORDER BY id')]
        assert deleted == [2, 3, 4], name


def unwrap(
    i: int, name: str | None, *, deleted: bool = False, op: str = "u", lsn: int | None = None, bio: str | None = None
) -> dict:
    value: dict[str, Any] = {"id": i, "name": name, "bio": bio, "__deleted": "true" if deleted else "false", "__op": op}
    if lsn is not None:
        value.update(__lsn=lsn, __source_ts_ms=1_700_000_000_000 + lsn)
    return {"partition": 0, "key": {"id": i}, "value": value}


def tombstone(i: int) -> dict:
    return {"partition": 0, "key": {"id": i}, "value": None}


def test_unwrap_rewrite_and_tombstone_deletes(wh):
    pipeline = shapes(wh)

    # delete.tombstone.handling.mode=rewrite(-with-tombstone): __deleted "true" carries the delete.
    feed(wh, pipeline, "rw", [unwrap(1, "a", op="r", lsn=10), unwrap(2, "b", op="r", lsn=10), unwrap(3, "c", op="c", lsn=20)])
    run = feed(
        wh,
        pipeline,
        "rw",
        [
            unwrap(1, "a2", lsn=30),
            unwrap(2, None, deleted=True, op="d", lsn=40),
            tombstone(2),
            unwrap(3, "c", deleted=True, op="d", lsn=50),
            tombstone(3),
            unwrap(33, "c", op="c", lsn=51),
        ],
    )
    assert (run.upserted, run.deleted) == (2, 2)
    assert rows(wh, "rw") == [(1, "a2", None), (33, "c", None)]
    assert rows(wh, "rw", "id, _source_ts")[0][1].year == 2023

    # drop / delete-to-tombstone: the delete is only a tombstone, the Kafka key says which row.
    for name in ("ts", "ts_lsn"):
        lsn = name == "ts_lsn"
        feed(
            wh, pipeline, name, [unwrap(1, "a", op="r", lsn=10 if lsn else None), unwrap(2, "b", op="r", lsn=10 if lsn else None)]
        )
        # in one batch: an upsert then its tombstone; a tombstone for a row stored earlier
        feed(wh, pipeline, name, [unwrap(3, "c", op="c", lsn=20 if lsn else None), tombstone(3), tombstone(1)])
        assert rows(wh, name) == [(2, "b", None)], name
        # a tombstone as the JSON literal null (the 'tombstone' mode with schemas disabled)
        feed(wh, pipeline, name, [{"partition": 0, "key": {"id": 2}, "value": "null"}])
        assert rows(wh, name) == [], name
    # Under source order, a restart re-sends a suffix in order: an event older than the
    # newest position stored for a key stays stale; the re-sent copy of the newest one
    # applies again (a tombstone-only delete has no position of its own), and the re-sent
    # tombstone after it deletes again: the end state is the source's.
    feed(wh, pipeline, "ts_lsn", [unwrap(3, "c", op="c", lsn=25)])
    run = feed(wh, pipeline, "ts_lsn", [unwrap(1, "a", op="r", lsn=10), unwrap(3, "c", op="c", lsn=20)])
    assert rows(wh, "ts_lsn") == [(1, "a", None), (3, "c", None)] and run.stale == 1
    run = feed(wh, pipeline, "ts_lsn", [tombstone(1), unwrap(3, "c", op="c", lsn=20), tombstone(3)])
    assert rows(wh, "ts_lsn") == [] and run.deleted == 2

    # soft deletes keep the last values; the schemas wrapper with a null payload is a delete
    feed(wh, pipeline, "soft", [unwrap(1, "a", op="c", bio="x"), unwrap(2, "b", op="c")])
    feed(
        wh,
        pipeline,
        "soft",
        [
            tombstone(1),
            {
                "partition": 0,
                "key": {"schema": {"type": "struct"}, "payload": {"id": 2}},
                "value": {"schema": {"type": "struct"}, "payload": None},
            },
        ],
    )
    assert rows(wh, "soft", "id, name, bio, _deleted") == [(1, "a", "x", True), (2, "b", None, True)]


def test_truncate_ignore_or_delete_is_logged(wh):
    pipeline = shapes(wh)
    for name in ("keep", "wipe"):
        cs = ChangeStream(["id"], MySqlSource(table="t"))
        feed(wh, pipeline, name, [cs.insert(row(1, "a")), cs.insert(row(2, "b"))])
        run = feed(wh, pipeline, name, [cs.insert(row(3, "c")), cs.truncate(), cs.insert(row(4, "d"))])
        assert run.truncates == 1
    assert [r[0] for r in rows(wh, "keep")] == [1, 2, 3, 4]
    assert [r[0] for r in rows(wh, "wipe")] == [4]
    logged = wh.query("SELECT table_name, SUM(truncates) FROM cdc.sync_run_log GROUP BY 1 ORDER BY 1")
    assert logged == [("keep", 1), ("wipe", 1)]


TOAST = "__debezium_unavailable_value"


def test_toast_placeholder_keeps_the_known_value(wh):
    pipeline = shapes(wh)
    cs = ChangeStream(["id"], PostgresSource(table="t"))
    feed(wh, pipeline, "toast", [cs.insert(row(1, "a", "long bio 1")), cs.insert(row(2, "b", "long bio 2"))])
    run = feed(
        wh,
        pipeline,
        "toast",
        [
            cs.update(None, row(1, "a2", TOAST)),  # keeps the stored bio
            cs.insert(row(3, "c", "bio 3")),
            cs.update(None, row(3, "c2", TOAST)),
            cs.update(None, row(3, "c3", TOAST)),  # set earlier in the batch
            cs.update(None, row(4, "d", TOAST)),  # never known: quarantined, never a silent NULL
        ],
    )
    assert run.quarantined == 1
    assert rows(wh, "toast") == [(1, "a2", "long bio 1"), (2, "b", "long bio 2"), (3, "c3", "bio 3")]

    bs = ChangeStream(["id"], PostgresSource(table="b"))
    first = {"id": 1, "data": "AQID", "doc": {"k": 1}, "tags": ["x"]}
    feed(wh, pipeline, "blobs", [bs.insert(first)])
    feed(
        wh,
        pipeline,
        "blobs",
        [bs.update(None, {"id": 1, "data": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", "doc": TOAST, "tags": [TOAST]})],
    )
    data, doc, tags = wh.query('SELECT data, doc, tags FROM cdc."blobs"')[0]
    assert (bytes(data), doc, tags) == (b"\x01\x02\x03", {"k": 1}, ["x"])


def test_schema_drift_is_counted_per_run_and_listed_by_status(wh):
    from sync.operations.runner import status

    pipeline = shapes(wh)
    cs = ChangeStream(["id"], MySqlSource(table="t"))
    feed(
        wh,
        pipeline,
        "my",
        [
            cs.insert({"id": 1, "name": "a", "bio": "x", "Added_Col": 1}),
            cs.insert({"id": 2, "name": "b", "Added_Col": 2, "other": None}),  # no bio field at all
            cs.update(None, {"id": 2, "name": "b2", "bio": None}),
            cs.delete({"id": 1}),  # key-only before images are not row images
        ],
    )
    assert rows(wh, "my") == [(2, "b2", None)]
    drift = wh.query("SELECT kind, field, events FROM cdc.sync_schema_drift WHERE table_name = 'my' ORDER BY 1, 2")
    assert drift == [("missing", "bio", 1), ("unknown", "Added_Col", 2), ("unknown", "other", 1)]
    feed(wh, pipeline, "my", [cs.insert({"id": 3, "name": "c", "bio": None, "Added_Col": 3})])
    feed(wh, pipeline, "ts", [unwrap(1, "a", op="c", lsn=1)])  # __ metadata fields are not drift
    by_table = {s.table: s.schema_drift for s in status(wh, pipeline)}
    assert by_table["my"] == [("unknown", "Added_Col", 3), ("unknown", "other", 1), ("missing", "bio", 1)]
    assert by_table["ts"] == []


def test_status_command_lists_schema_drift(wh):
    from typer.testing import CliRunner

    from sync.cli.app import app

    config = str(SHAPES)
    pipeline = shapes(wh)
    runner = CliRunner()
    feed(wh, pipeline, "my", [ChangeStream(["id"], MySqlSource(table="t")).insert({"id": 1, "name": "a", "New_Field": 1})])
    result = runner.invoke(app, ["status", "-c", config, "--dsn", wh.dsn])
    assert result.exit_code == 0, result.output
    assert "my: field not in the pipeline file: New_Field (1 event(s))" in result.output
    assert "my: configured field absent from events: bio (1 event(s))" in result.output
