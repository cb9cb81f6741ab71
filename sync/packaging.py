"""Build the Lambda deployment zip: this package, its runtime dependencies for the Lambda
platform, and the pipeline file; no Spark.

Dependencies are installed with pip from the running interpreter for the Lambda platform
(manylinux wheels for the chosen Python and architecture), pinned to the versions installed
here, so the zip runs the code that was tested. boto3 is part of the Lambda runtime and is
left out. The zip is reproducible: sorted entries, fixed timestamps.
"""

from __future__ import annotations

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
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--target", str(target), "--platform", PLATFORMS[arch], "--implementation", "cp",
        "--python-version", python_version, "--only-binary=:all:", *reqs,
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
    package_dir = Path(__file__).resolve().parent
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

