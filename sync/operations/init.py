"""`redshift-sync init`: a new project folder — a pipeline file and the folder its revisions go
in — from one of the bundled examples, or from sample messages of each topic (`infer`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sync.config import load_pipeline
from sync.debezium.infer import infer_block
from sync.resources import bundled

# The pipeline file's head when its tables come from samples: the source is a placeholder
# the user completes (the values are the shape AWS prints, not a real cluster).
HEAD = """# Written by `redshift-sync init`: complete [source] with your MSK cluster and the IAM role
# Redshift assumes to read it, review each table, then `redshift-sync revision -m initial`
# and `redshift-sync deploy`.

[pipeline]
schema = "{schema}"                      # stage, target and control tables

[source]
kind = "msk"
external_schema = "msk_cdc"
cluster_arn = "arn:aws:kafka:us-east-1:123456789012:cluster/CHANGE-ME/00000000-0000-0000-0000-000000000000-1"
iam_role = "arn:aws:iam::123456789012:role/CHANGE-ME"
authentication = "iam"

[operations]
versions = "revisions"                  # this pipeline's revisions, next to the file
"""


class InitRefused(ValueError):
    """The folder already has a project, or the request names nothing to start from."""


@dataclass(frozen=True)
class Sample:
    path: Path
    table: str
    topic: str


def examples() -> list[str]:
    return sorted(p.parent.name for p in bundled("examples").glob("*/pipeline.toml"))


def init_project(folder: Path, example: str | None, samples: list[Sample], schema: str = "cdc") -> list[Path]:
    """Write the project; returns the paths written. Refuses to overwrite a pipeline file."""
    pipeline_file = folder / "pipeline.toml"
    if pipeline_file.exists():
        raise InitRefused(f"{pipeline_file} exists already: init writes a new project only (remove it, or use another folder)")
    if bool(example) == bool(samples):
        raise InitRefused(f"name one example ({', '.join(examples())}) or at least one --sample, not both")
    folder.mkdir(parents=True, exist_ok=True)
    written = [pipeline_file]
    if example:
        source = bundled("examples") / example
        if not (source / "pipeline.toml").is_file():
            raise InitRefused(f"no example {example!r}: choose one of {', '.join(examples())}")
        text = (source / "pipeline.toml").read_text()
        if "[operations]" not in text:
            text += '\n[operations]\nversions = "revisions"                  # this pipeline\'s revisions, next to the file\n'
        pipeline_file.write_text(text)
        if (source / "events").is_dir():
            shutil.copytree(source / "events", folder / "events", dirs_exist_ok=True)
            written.append(folder / "events")
    else:
        blocks = [infer_block(s.path, s.table, s.topic) for s in samples]
        pipeline_file.write_text(HEAD.format(schema=schema) + "\n" + "\n".join(blocks))
    (folder / "revisions").mkdir(exist_ok=True)
    written.append(folder / "revisions")
    try:
        load_pipeline(pipeline_file)  # what was written must be a valid pipeline file
    except Exception:
        pipeline_file.unlink()
        raise
    return written
