"""Build the Lambda deployment zip: this package, its runtime dependencies for the Lambda
platform, and the pipeline file; no Spark.

Dependencies are installed with pip from the running interpreter for the Lambda platform
(manylinux wheels for the chosen Python and architecture), pinned to the versions installed
here, so the zip runs the code that was tested. boto3 is part of the Lambda runtime and is
left out. The zip is reproducible: sorted entries, fixed timestamps.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sync.config import load_pipeline

LAMBDA_ZIP_LIMIT = 50 * 1024 * 1024  # direct upload limit for a zipped deployment package
PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
# Provided by the Lambda Python runtime; a second copy would only add megabytes.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
PACKAGED_CONFIG_NAME = "pipeline.toml"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class PackagingError(RuntimeError):
    """The zip could not be built; the message says which step failed."""


@dataclass(frozen=True)
class LambdaPackage:
    path: Path
    size_bytes: int
    files: int
    requirements: tuple[str, ...]


def requirements(with_connector: bool) -> list[str]:
    """What the handler imports beyond the standard library, pinned to the installed versions."""
    names = ["pydantic"] + (["redshift-connector"] if with_connector else [])
    return [f"{name}=={metadata.version(name)}" for name in names]


def install_dependencies(reqs: list[str], target: Path, python_version: str, arch: str) -> None:
    if arch not in PLATFORMS:
        raise PackagingError(f"unknown architecture {arch!r}: use one of {', '.join(PLATFORMS)}")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(target),
        "--platform",
        PLATFORMS[arch],
        "--implementation",
        "cp",
        "--python-version",
        python_version,
        "--only-binary=:all:",
        *reqs,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PackagingError(f"pip could not install {' '.join(reqs)} for Python {python_version} {arch}:\n{done.stderr.strip()}")


def _package_files(root: Path) -> list[tuple[Path, str]]:
    """(file, name in the zip) for every file under `root`, skipping caches and runtime-provided packages."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or "__pycache__" in rel.parts or rel.suffix == ".pyc":
            continue
        top = rel.parts[0].split("-")[0]
        if top in RUNTIME_PROVIDED or rel.parts[0] == "bin":
            continue
        out.append((path, rel.as_posix()))
    return out


def _write_zip(out: Path, entries: list[tuple[Path, str]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for path, name in sorted(entries, key=lambda e: e[1]):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if name.endswith(".so") or ".so." in name else 0o644) << 16
            zf.writestr(info, path.read_bytes())
    tmp.replace(out)


def build_lambda_zip(
    out: Path,
    config: Path,
    python_version: str = "3.12",
    arch: str = "x86_64",
    with_connector: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> LambdaPackage:
    load_pipeline(config)  # a broken pipeline file fails here, not in the first invocation
    package_dir = Path(__file__).resolve().parent.parent
    reqs = requirements(with_connector)
    with tempfile.TemporaryDirectory(prefix="rs-lambda-") as tmp:
        deps = Path(tmp) / "deps"
        progress(f"installing {', '.join(reqs)} for Python {python_version} on {arch} (pip)")
        install_dependencies(reqs, deps, python_version, arch)
        entries = _package_files(deps)
        if any(name.split("/")[0] == "pyspark" for _, name in entries):
            raise PackagingError("pyspark ended up among the dependencies; the Lambda zip must not contain Spark")
        entries += [(p, f"sync/{name}") for p, name in _package_files(package_dir)]
        entries.append((config, PACKAGED_CONFIG_NAME))
        progress(f"zipping {len(entries)} files into {out}")
        _write_zip(out, entries)
    size = out.stat().st_size
    if size > LAMBDA_ZIP_LIMIT:
        raise PackagingError(f"{out} is {size / 1e6:.1f} MB, over Lambda's 50 MB limit for a zipped package")
    return LambdaPackage(out, size, len(entries), tuple(reqs))


# ---- the backfill job for a Spark cluster (EMR, EMR Serverless, Glue) ----------------

BACKFILL_ZIP = "redshift_sync.zip"
BACKFILL_ENTRY = "job.py"
BACKFILL_REQUIREMENTS = "requirements.txt"
GLUE_MODULES = "additional-python-modules.txt"
BACKFILL_LOGGING = "log4j2.properties"  # errors only: -Dlog4j2.configurationFile=<it> (docs/backfill-on-aws.md)
# What the job's driver imports beyond PySpark and the standard library. Executors import
# only PySpark and the project's pure-Python code (their UDFs use the standard library).
DRIVER_PACKAGES = ("pydantic",)


@dataclass(frozen=True)
class BackfillBundle:
    folder: Path
    files: tuple[str, ...]
    requirements: tuple[str, ...]


def _dependency_closure(names: tuple[str, ...]) -> list[str]:
    """`name==version` of the installed packages and everything they require (extras
    left out), sorted: what the driver needs, pinned to what was tested here."""
    seen: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen[key] = dist.version
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9._-]+", req).group(0))
    return [f"{name}=={version}" for name, version in sorted(seen.items())]


def build_backfill_bundle(out: Path, config: Path, progress: Callable[[str], None] = lambda _: None) -> BackfillBundle:
    """Everything a cluster needs to run the backfill job: the project's code as a zip for
    `--py-files` (EMR) or `--extra-py-files` (Glue), the entry point, the pipeline file, and
    the driver's third-party packages as a pip requirements file and as the value of Glue's
    `--additional-python-modules` (for EMR Serverless, a venv archive made from the same
    requirements: docs/backfill-on-aws.md)."""
    load_pipeline(config)  # a broken pipeline file fails here, not on the cluster
    root = Path(__file__).resolve().parent.parent.parent
    entries = [(p, f"sync/{name}") for p, name in _package_files(root / "sync")]
    entries += [(p, f"backfill/{name}") for p, name in _package_files(root / "backfill")]
    out.mkdir(parents=True, exist_ok=True)
    _write_zip(out / BACKFILL_ZIP, entries)
    (out / BACKFILL_ENTRY).write_bytes((root / "backfill" / "job.py").read_bytes())
    (out / BACKFILL_LOGGING).write_bytes((root / "backfill" / BACKFILL_LOGGING).read_bytes())
    (out / PACKAGED_CONFIG_NAME).write_bytes(config.read_bytes())
    reqs = _dependency_closure(DRIVER_PACKAGES)
    (out / BACKFILL_REQUIREMENTS).write_text("".join(r + "\n" for r in reqs))
    (out / GLUE_MODULES).write_text(",".join(reqs) + "\n")
    progress(
        f"wrote {out}: {BACKFILL_ZIP} ({len(entries)} files), {BACKFILL_ENTRY}, {BACKFILL_LOGGING}, {PACKAGED_CONFIG_NAME}, "
        f"{BACKFILL_REQUIREMENTS} and {GLUE_MODULES} ({', '.join(reqs)})"
    )
    files = (BACKFILL_ZIP, BACKFILL_ENTRY, PACKAGED_CONFIG_NAME, BACKFILL_REQUIREMENTS, GLUE_MODULES, BACKFILL_LOGGING)
    return BackfillBundle(out, files, tuple(reqs))
