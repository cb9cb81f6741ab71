"""The stage a backfill job leaves for the warehouse: one run folder holding

    data/part-*.parquet   the rows, in the stage's column order
    rejects/part-*.json   the rows that cannot be loaded, with their reason (only if any)
    manifest.json         the Redshift COPY manifest of data/ (Parquet needs content_length)
    summary.json          table, pipeline fingerprint, counts, snapshot time, notes

The job removes the summary and manifest (and rejects) a previous run left before it writes
anything, and writes the manifest then the summary last: a folder without a summary is a
run that did not finish. `redshift-sync backfill --staged <run folder>` loads exactly the
files the manifest lists, after checking them against it and the summary
(`sync/operations/run_folder.py`), and refuses a stage written for another table or another
version of its pipeline (the fingerprint differs).

The job writes through Hadoop's FileSystem, so the same code writes to S3 on EMR and
Glue (EMRFS, `s3://`) and to a local folder.
"""

from __future__ import annotations

import hashlib
import json
import typing as t

from sync.config import Pipeline, TableConfig

STAGE_VERSION = 1
DATA, REJECTS, MANIFEST, SUMMARY = "data", "rejects", "manifest.json", "summary.json"


def table_fingerprint(pipeline: Pipeline, table: TableConfig) -> str:
    """What the stage's shape and values depend on: the schema and the table's model
    (columns, types, encodings, keys, delete mode, ordering)."""
    model = {"schema": pipeline.schema, "table": table.model_dump(mode="json", by_alias=True)}
    return hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]


def join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


def copy_url(url: str) -> str:
    """Redshift's COPY reads s3:// URLs; Hadoop may name the same object s3a:// or s3n://."""
    for scheme in ("s3a://", "s3n://"):
        if url.startswith(scheme):
            return "s3://" + url[len(scheme) :]
    return url


def manifest(parts: list[tuple[str, int]]) -> dict:
    """A COPY manifest: for Parquet every entry needs meta.content_length (Redshift,
    "Using a manifest to specify data files")."""
    return {"entries": [{"url": copy_url(url), "mandatory": True, "meta": {"content_length": size}} for url, size in parts]}


class HadoopFolder:
    """A run folder through the JVM's Hadoop FileSystem of a SparkSession."""

    def __init__(self, spark: t.Any, url: str):
        self.spark = spark
        self.url = url.rstrip("/")
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, name: str) -> t.Any:
        return self._jvm.org.apache.hadoop.fs.Path(join(self.url, name))

    def parts(self, folder: str) -> list[tuple[str, int]]:
        """(URL, size) of the non-empty part files in a subfolder, sorted."""
        path = self._path(folder)
        fs = path.getFileSystem(self._conf)
        found = []
        for status in fs.listStatus(path):
            name = status.getPath().getName()
            if name.startswith("part-") and status.getLen() > 0:
                found.append((status.getPath().toString(), int(status.getLen())))
        return sorted(found)

    def delete(self, name: str) -> None:
        """Remove a file or subfolder of the run folder, if there is one."""
        path = self._path(name)
        path.getFileSystem(self._conf).delete(path, True)

    def write_json(self, name: str, value: dict) -> None:
        path = self._path(name)
        out = path.getFileSystem(self._conf).create(path, True)
        try:
            out.write(bytearray((json.dumps(value, indent=2, default=str) + "\n").encode()))
        finally:
            out.close()
