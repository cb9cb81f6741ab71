"""What the plain install lacks: PySpark and pyarrow come with the `spark` extra. Every
command but a local backfill and reconcile runs without them; those that need one say so
in one line instead of a traceback."""

from __future__ import annotations

import importlib

SPARK_INSTALL = "pip install 'redshift-sync[spark]', and a Java 17+ runtime"


class MissingExtra(RuntimeError):
    """A step needs a package that is not installed; the message says what to install."""


def installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require_spark(what: str) -> None:
    if not installed("pyspark"):
        raise MissingExtra(f"{what} runs PySpark, which is not installed: {SPARK_INSTALL}")


def require_pyarrow(what: str) -> None:
    if not installed("pyarrow"):
        raise MissingExtra(f"{what} reads Parquet with pyarrow, which is not installed: pip install pyarrow")
