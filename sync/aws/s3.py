"""S3 objects outside Spark (boto3): snapshot downloads for local runs, staging uploads
with a COPY manifest, and cleanup. The client honours AWS_ENDPOINT_URL(_S3), so the same
code runs against moto's server in tests."""

from __future__ import annotations

import json
import typing as t
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Progress = Callable[[str], None]


def parse_s3_url(url: str) -> tuple[str, str]:
    if not url.startswith("s3://"):
        raise ValueError(f"{url!r} is not an s3:// URL")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket:
        raise ValueError(f"{url!r} has no bucket name")
    return bucket, prefix


def client() -> t.Any:
    import boto3

    return boto3.client("s3")


def list_objects(s3: t.Any, url: str) -> list[tuple[str, int]]:
    """(key, size) of every object under the URL's prefix, in key order."""
    bucket, prefix = parse_s3_url(url)
    out: list[tuple[str, int]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
    return sorted(out)


def download_prefix(s3: t.Any, url: str, dest: Path, progress: Progress = lambda _: None) -> int:
    """Copy every object under `url` into `dest`, keeping the relative layout (so the S3
    sink's partition=<n> folders survive). Returns the number of files."""
    bucket, prefix = parse_s3_url(url)
    listed = [(k, size) for k, size in list_objects(s3, url) if not k.endswith("/")]
    if any(k == prefix for k, _ in listed):  # the URL names one object
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        objects = [(k, size) for k, size in listed if k == prefix]
    else:  # a folder: s3://b/snap is snap/..., never snap-old/...
        base = prefix.rstrip("/") + "/" if prefix else ""
        objects = [(k, size) for k, size in listed if k.startswith(base)]
    if not objects:
        raise FileNotFoundError(f"no objects under {url}")
    total = 0
    for i, (key, size) in enumerate(objects, start=1):
        target = dest / key[len(base) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(target))
        total += size
        if i == len(objects) or i % 50 == 0:
            progress(f"downloaded {i}/{len(objects)} objects ({total:,} bytes) from s3://{bucket}/{prefix}")
    return len(objects)


@dataclass
class Staged:
    manifest_url: str
    keys: list[str]  # every object written, the manifest included
    bucket: str


def upload_for_copy(s3: t.Any, files: list[Path], url: str, progress: Progress = lambda _: None) -> Staged:
    """Upload Parquet part files under `url` and a COPY manifest listing exactly them
    (Parquet manifests need meta.content_length)."""
    bucket, prefix = parse_s3_url(url)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    entries, keys = [], []
    for i, path in enumerate(files, start=1):
        key = f"{prefix}{path.name}"
        s3.upload_file(str(path), bucket, key)
        size = path.stat().st_size
        entries.append({"url": f"s3://{bucket}/{key}", "mandatory": True, "meta": {"content_length": size}})
        keys.append(key)
        progress(f"uploaded {i}/{len(files)} part files to s3://{bucket}/{prefix}")
    manifest_key = f"{prefix}manifest.json"
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps({"entries": entries}, indent=1).encode())
    keys.append(manifest_key)
    return Staged(f"s3://{bucket}/{manifest_key}", keys, bucket)


def delete_keys(s3: t.Any, bucket: str, keys: list[str]) -> None:
    for start in range(0, len(keys), 1000):
        batch = keys[start : start + 1000]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
