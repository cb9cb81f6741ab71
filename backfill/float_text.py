"""The exact text form of a float on the Spark side: the twin of `sync/sql/float_text.py`
(which explains the form), column for column, so a row hashes alike in both engines."""

from __future__ import annotations

import math

from pyspark.sql import Column
from pyspark.sql import functions as F

from sync.sql.float_text import MAX_EXPONENT, MIN_EXPONENT, SIGNIFICAND_BITS

MAX_DOUBLE = 1.7976931348623157e308


def float_text(c: Column) -> Column:
    """The canonical text of a float or double column (NULL stays NULL)."""
    v, two = c.cast("double"), F.lit(2.0)
    a = F.abs(v)
    e0 = F.least(F.greatest(F.floor(F.log(a) / F.lit(math.log(2.0))), F.lit(MIN_EXPONENT)), F.lit(MAX_EXPONENT))
    scaled = a / F.pow(two, e0)
    e = e0 + F.when(scaled >= 2, 1).when(scaled < 1, -1).otherwise(0)
    k = F.lit(SIGNIFICAND_BITS) - e
    half = F.floor(k / 2.0)
    m = (a * F.pow(two, half) * F.pow(two, k - half)).cast("long")
    finite = F.concat(
        F.when(v < 0, F.lit("-")).otherwise(F.lit("")),
        m.cast("string"),
        F.lit("p"),
        (e - SIGNIFICAND_BITS).cast("long").cast("string"),
    )
    return (
        F.when(v.isNull(), F.lit(None).cast("string"))
        .when(v == 0, F.lit("0"))
        .when(v > F.lit(MAX_DOUBLE), F.when(-v < 0, F.lit("Infinity")).otherwise(F.lit("NaN")))
        .when(v < F.lit(-MAX_DOUBLE), F.lit("-Infinity"))
        .otherwise(finite)
    )
