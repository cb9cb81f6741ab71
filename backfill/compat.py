"""One job on every Spark AWS runs: Glue 5.x and EMR 7.x (Spark 3.5), EMR 8 (Spark 4.0)
and newer. The transforms use only what these versions share, plus `try_cast`, which
Spark SQL has had since 3.2 but PySpark's `Column` has only since 4.0."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import types as T


def try_cast(col: Column, dtype: T.DataType | str) -> Column:
    """`CAST` that yields NULL instead of failing (SQL `try_cast`), on any Spark >= 3.5."""
    if hasattr(Column, "try_cast"):
        return col.try_cast(dtype)
    return _try_cast_35(col, T._parse_datatype_string(dtype) if isinstance(dtype, str) else dtype)


def _try_cast_35(col: Column, dtype: T.DataType) -> Column:
    # PySpark 3.5: the Cast expression in TRY mode, the one SQL's `try_cast(x AS t)` builds.
    from pyspark import SparkContext

    jvm = SparkContext._active_spark_context._jvm
    expressions = jvm.org.apache.spark.sql.catalyst.expressions
    eval_mode = getattr(getattr(expressions, "EvalMode$"), "MODULE$").TRY()
    jtype = jvm.org.apache.spark.sql.types.DataType.fromJson(dtype.json())
    cast = expressions.Cast(col._jc.expr(), jtype, jvm.scala.Option.apply(None), eval_mode)
    return Column(jvm.org.apache.spark.sql.Column(cast))
