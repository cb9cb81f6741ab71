"""`backfill --staged s3://…` on Redshift: COPY from the run folder's manifest, only once the
listed objects are there with their listed sizes, and the rows COPY loaded are checked
against the summary before the merge (a refusal rolls the load back).

Redshift, "Using a manifest to specify data files": "You can use a manifest to make sure
that the COPY command loads all of the required files, and only the required files"; "The
URL in the manifest must specify the bucket name and full object path for the file"; for
Parquet the `meta` key holds `content_length`, "the actual size of the file in bytes".
The warehouse here is a recording connection (no Redshift in CI); S3 is moto's server.
"""

from __future__ import annotations

import json

import pytest

from backfill.stage import manifest, table_fingerprint
from sync.operations.run_folder import IncompleteRun, run_staged
from sync.sql.dialect import dialect_for
from sync.warehouse import Warehouse
from tests.test_backfill_load import snapshot_parts

ROLE = "arn:aws:iam::123456789012:role/redshift-copy"
RUN = "s3://lake/backfill/customer/run-1"


class RecordingCursor:
    def __init__(self, conn: RecordingConnection):
        self.conn, self.rowcount, self.description, self._rows = conn, 0, None, []

    def execute(self, sql: str) -> None:
        self.conn.statements.append(sql)
        counted = sql.startswith("SELECT COUNT(*)")
        self._rows = [(self.conn.stage_rows,)] if counted else []
        self.description = [("count",)] if counted else None

    def fetchall(self) -> list[tuple]:
        return self._rows

    def close(self) -> None:
        pass


class RecordingConnection:
    def __init__(self, stage_rows: int):
        self.statements: list[str] = []
        self.stage_rows = stage_rows

    def cursor(self) -> RecordingCursor:
        return RecordingCursor(self)


def redshift(stage_rows: int) -> Warehouse:
    return Warehouse(dialect_for("redshift", "cdc"), "redshift://recorded", RecordingConnection(stage_rows), "redshift_connector")


@pytest.fixture
def run_in_s3(example_pipeline, s3_server, tmp_path):
    """A complete run folder of 5 rows in 2 part files, as the job leaves it in S3."""
    (tmp_path / "b").mkdir()
    files = snapshot_parts(tmp_path, ["C1", "C2", "C3"]) + snapshot_parts(tmp_path / "b", ["C4", "C5"])
    parts = []
    for i, path in enumerate(files):
        key = f"backfill/customer/run-1/data/part-{i:05d}.parquet"
        s3_server.upload_file(str(path), "lake", key)
        parts.append((f"s3://lake/{key}", path.stat().st_size))
    table = example_pipeline.table("customer")
    summary = {"stage_version": 1, "table": "customer", "schema": "cdc", "staged": 5, "rejected": 0}
    summary |= {"fingerprint": table_fingerprint(example_pipeline, table), "data_files": len(parts)}

    def put(name: str, value: dict) -> None:
        s3_server.put_object(Bucket="lake", Key=f"backfill/customer/run-1/{name}", Body=json.dumps(value).encode())

    put("manifest.json", manifest(parts))
    put("summary.json", summary)
    return put, parts


def test_a_complete_run_is_copied_from_its_manifest(example_pipeline, run_in_s3):
    wh = redshift(stage_rows=5)
    result = run_staged(wh, example_pipeline, RUN + "/", "customer", iam_role=ROLE)
    assert result.staged == 5
    statements = wh._conn.statements
    copy = next(s for s in statements if s.startswith("COPY"))
    assert f"FROM '{RUN}/manifest.json'" in copy and "FORMAT AS PARQUET" in copy and copy.rstrip(";").endswith("MANIFEST")
    assert statements[-1] == "COMMIT"


def test_rows_copy_loaded_that_the_summary_does_not_count_are_rolled_back(example_pipeline, run_in_s3):
    wh = redshift(stage_rows=4)
    with pytest.raises(IncompleteRun, match="hold 4 rows, summary.json counts 5"):
        run_staged(wh, example_pipeline, RUN, "customer", iam_role=ROLE)
    statements = wh._conn.statements
    after_copy = statements[next(i for i, s in enumerate(statements) if s.startswith("COPY")) + 1 :]
    assert after_copy == ['SELECT COUNT(*) FROM "cdc"."customer__backfill";', "ROLLBACK"], "merged a stage it should refuse"


def test_a_listed_object_missing_is_refused_before_copy(example_pipeline, run_in_s3, s3_server):
    s3_server.delete_object(Bucket="lake", Key="backfill/customer/run-1/data/part-00001.parquet")
    wh = redshift(stage_rows=5)
    with pytest.raises(
        IncompleteRun, match=rf"{RUN} is not a complete backfill run: 1 of the 2 files .*data/part-00001\.parquet"
    ):
        run_staged(wh, example_pipeline, RUN, "customer", iam_role=ROLE)
    assert wh._conn.statements == []


def test_a_manifest_naming_objects_elsewhere_is_refused(example_pipeline, run_in_s3):
    put, parts = run_in_s3
    put("manifest.json", manifest([("s3://lake/other-run/data/part-00000.parquet", parts[0][1]), parts[1]]))
    wh = redshift(stage_rows=5)
    with pytest.raises(IncompleteRun, match="lists s3://lake/other-run/data/part-00000.parquet, which is not in"):
        run_staged(wh, example_pipeline, RUN, "customer", iam_role=ROLE)
    assert wh._conn.statements == []
