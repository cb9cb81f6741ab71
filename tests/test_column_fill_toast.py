"""A column added with `revision` + `deploy` across TOAST placeholders.

Debezium's PostgreSQL connector sends an unchanged out-of-line (TOASTed) value as a
placeholder: "if a table row has changed, any unchanged values that were stored using the
TOAST mechanism are not included in the message that Debezium receives from the database
... the Debezium Postgres connector will represent that value with a configurable
placeholder. By default, that's the literal __debezium_unavailable_value" ("Handling
unchanged Postgres TOAST values", Debezium blog, 2019-10-08,
https://debezium.io/blog/2019/10/08/handling-unchanged-postgres-toast-values/). With
REPLICA IDENTITY DEFAULT, "INSERT messages contain unchanged toasted values" (Debezium
PostgreSQL connector documentation, "Toasted values"). The value is then the one the key's
last record before it carried. So the fill of an added column takes, for each stored row, the newest record of its
key at or before the row's position that carries a value, and never one after it (a
quarantined or stale record); where no retained record carries one, the value is unknown and
`status` and `deploy` say how many rows (never a silent NULL).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sync.config import load_pipeline
from sync.operations.runner import status
from sync.schema.revisions import alembic_config, deploy, write_revision
from tests.helpers import feed, pipeline_toml
from tests.test_delivery_semantics import envelope, pg_source

U = "__debezium_unavailable_value"
TABLE = """
[[tables]]
name = "doc"
topic = "pg.public.doc"
primary_key = ["id"]
order_by = "postgres-lsn"
columns = [{ name = "id", type = "integer" }, { name = "title", type = "varchar(64)" }]
"""
WITH_BODY = TABLE.replace('"varchar(64)" }]', '"varchar(64)" }, { name = "body", type = "varchar(65535)" }]')
ORIGIN = "pipeline.toml"


def deployed(project_dir: Path, dsn: str, toml: str):
    """A project in `project_dir` whose first revision, of the tables `toml`, is deployed."""
    (project_dir / "versions").mkdir()
    cfg = alembic_config(project_dir / "versions", dsn)
    (project_dir / "pipeline.toml").write_text(pipeline_toml(toml))
    pipeline, _ = load_pipeline(project_dir / "pipeline.toml")
    assert write_revision(cfg, pipeline, ORIGIN, "initial") is not None
    deploy(cfg, pipeline)
    return cfg, pipeline


def revised(cfg, project_dir: Path, toml: str, message: str):
    """The pipeline file now holds the tables `toml`: `revision`, then `deploy`."""
    (project_dir / "pipeline.toml").write_text(pipeline_toml(toml))
    pipeline, _ = load_pipeline(project_dir / "pipeline.toml")
    assert write_revision(cfg, pipeline, ORIGIN, message) is not None
    return pipeline, deploy(cfg, pipeline)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_dsn: str):
    """A project whose first revision is deployed: table `doc` without `body`."""
    monkeypatch.chdir(tmp_path)
    return deployed(tmp_path, database_dsn, TABLE)


def add_body(cfg, project_dir: Path):
    return revised(cfg, project_dir, WITH_BODY, "doc body")


def change(op: str, key: int, lsn: int, body: str, title: str = "t") -> dict:
    """pgoutput, REPLICA IDENTITY DEFAULT: `before` is null on updates."""
    return envelope(op, key, {"id": key, "title": title, "body": body}, None, pg_source(lsn, lsn))


def bodies(wh) -> dict:
    return dict(wh.query('SELECT id, body FROM cdc."doc"'))


def test_added_column_fill_skips_toast_placeholder(project, wh, tmp_path):
    cfg, pipeline = project
    run = feed(
        wh,
        pipeline,
        "doc",
        [
            change("c", 1, 100, "A"),
            change("u", 1, 200, U, title="t2"),
            change("u", 1, 300, U, title="t3"),  # wrote row 1
            change("c", 2, 110, "B"),
            change("u", 2, 210, "B2"),
            change("u", 2, 310, U),  # wrote row 2
            change("u", 3, 320, U),  # row 3: its insert is no longer retained
            change("c", 4, 130, "D"),
            change("u", 4, 230, U),  # wrote row 4
            change("u", 4, 330, "D-new", title="x" * 100),  # newer, quarantined: the title does not fit
        ],
    )
    assert (run.upserted, run.quarantined) == (4, 1)

    pipeline, result = add_body(cfg, tmp_path)
    assert bodies(wh) == {1: "A", 2: "B2", 3: None, 4: "D"}
    unknown = [w for w in result.warnings if "unknown" in w]
    assert len(unknown) == 1 and unknown[0].startswith("doc.body: 1 stored row(s) whose value is unknown")
    assert status(wh, pipeline)[0].unknown_values == [("body", 1)]

    # Later placeholder updates keep what is known, and what is not stays counted.
    feed(wh, pipeline, "doc", [change("u", 1, 400, U), change("u", 3, 420, U)])
    assert bodies(wh) == {1: "A", 2: "B2", 3: None, 4: "D"}
    assert status(wh, pipeline)[0].unknown_values == [("body", 1)]
    # The next change of the column brings the value.
    feed(wh, pipeline, "doc", [change("u", 3, 430, "C")])
    assert bodies(wh)[3] == "C" and status(wh, pipeline)[0].unknown_values == []
