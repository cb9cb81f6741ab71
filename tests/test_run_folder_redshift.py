"""`backfill --staged s3://…` on Redshift: COPY from the run folder's manifest, only once the
listed objects are there with their listed sizes, and the rows COPY loaded are checked
against the summary before the merge (a refusal rolls the load back).

Redshift, "Using a manifest to specify data files": "You can use a manifest to make sure
that the COPY command loads all of the required files, and only the required files"; "The
URL in the manifest must specify the bucket name and full object path for the file"; for
Parquet the `meta` key holds `content_length`, "the actual size of the file in bytes".
No Redshift is reachable here: the refusals are checked against S3 (moto's server) before
any statement reaches the warehouse, and the COPY statement is checked as rendered; the
live suite and `doctor --verify` run against a real cluster.
"""

from __future__ import annotations

import json

import pytest

from backfill.stage import manifest, table_fingerprint
from sync.operations.run_folder import IncompleteRun, run_staged
from sync.sql.backfill_merge import BackfillSql
from sync.sql.dialect import dialect_for
from sync.warehouse import Warehouse
from tests.test_backfill_load import snapshot_parts

ROLE = "arn:aws:iam::123456789012:role/redshift-copy"
RUN = "s3://lake/backfill/customer/run-1"


class Unreachable:
    """The warehouse a refused run folder must never reach: any use fails the test."""

    def cursor(self) -> None:
        raise AssertionError("the warehouse was reached before the run folder was checked")


def redshift() -> Warehouse:
    return Warehouse(dialect_for("redshift", "cdc"), "redshift://unreachable", Unreachable(), "redshift_connector")


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


def test_the_copy_reads_exactly_the_manifest_as_parquet(example_pipeline):
    sql = BackfillSql(dialect_for("redshift", "cdc"), example_pipeline, example_pipeline.table("customer"))
    copy = sql.copy_from_s3(f"{RUN}/manifest.json", ROLE)
    assert f"FROM '{RUN}/manifest.json'" in copy and "FORMAT AS PARQUET" in copy and copy.rstrip(";").endswith("MANIFEST")


def test_a_listed_object_missing_is_refused_before_copy(example_pipeline, run_in_s3, s3_server):
    s3_server.delete_object(Bucket="lake", Key="backfill/customer/run-1/data/part-00001.parquet")
    wh = redshift()
    with pytest.raises(
        IncompleteRun, match=rf"{RUN} is not a complete backfill run: 1 of the 2 files .*data/part-00001\.parquet"
    ):
        run_staged(wh, example_pipeline, RUN, "customer", iam_role=ROLE)


def test_a_manifest_naming_objects_elsewhere_is_refused(example_pipeline, run_in_s3):
    put, parts = run_in_s3
    put("manifest.json", manifest([("s3://lake/other-run/data/part-00000.parquet", parts[0][1]), parts[1]]))
    wh = redshift()
    with pytest.raises(IncompleteRun, match="lists s3://lake/other-run/data/part-00000.parquet, which is not in"):
        run_staged(wh, example_pipeline, RUN, "customer", iam_role=ROLE)
