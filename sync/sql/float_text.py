"""An exact text form of a float (`real`, `double precision`) that PostgreSQL, Redshift and
Spark compute alike, for reconcile's row hashes (`sync/sql/buckets.py`; the Spark twin is
`backfill/float_text.py`).

The engines' own texts differ: PostgreSQL's float8out prints the shortest round-trip
digits (`1e+21`, `1e-07`), Spark's cast to string Java's `Double.toString` (`1.0E21`,
`1.0E-7`), and Redshift's cast to text 15 or 17 significant digits. None is a form of
the others, and a rounded one is not exact. So the value is written as its binary
significand and exponent, computed with arithmetic that is exact for every double:

  0 (either sign)    '0'
  NaN, ±Infinity     'NaN', 'Infinity', '-Infinity'
  any other x        [-]M 'p' Q, with |x| = M * 2^Q and 2^52 <= M < 2^53 (one pair per x)

Q is found as FLOOR(LN(|x|) / LN(2)), clamped to the doubles' exponents and corrected by
one comparison (the logarithm may land one off next to a power of two); M as |x| times
2^(52 - e) in two steps, each by a power of two small enough to stay normal, so each
product is exact. A real is widened to double precision first (exact).

Functions, as the AWS docs define them: LN ("Returns the natural logarithm of the input
parameter"; DOUBLE PRECISION runs on user tables, r_LN.html), POWER ("Return type DOUBLE
PRECISION", r_POWER.html), FLOOR, ABS, LEAST, GREATEST and CAST. The docs do not say that
POWER(2, n) is exact, nor whether a REAL or DOUBLE PRECISION column can hold NaN or
Infinity: exactness on Redshift rests on IEEE 754 arithmetic, not on its documentation
(docs/correctness.md, "Reconcile of floats")."""

from __future__ import annotations

# The largest finite double: beyond it only Infinity (and NaN, which both engines order
# above every number).
MAX_DOUBLE = "1.7976931348623157E308"
# Exponents of a double's leading bit: subnormals down to 2^-1074, normals up to 2^1023.
MIN_EXPONENT, MAX_EXPONENT, SIGNIFICAND_BITS = -1074, 1023, 52


def finite_text(expr: str) -> str:
    """The [-]M p Q text of a finite non-zero value, NULL for any other: every step reads the
    value only where it is finite and non-zero, so no order of evaluation can take LN(0) or
    cast an infinite significand (Redshift may evaluate a CASE branch for rows the CASE does
    not select: `PostgresDialect.total_cast`)."""
    v = f"CAST({expr} AS double precision)"
    a = f"(CASE WHEN ABS({v}) > 0 AND ABS({v}) <= {MAX_DOUBLE} THEN ABS({v}) END)"
    e0 = f"LEAST(GREATEST(FLOOR(LN({a}) / LN(2.0)), {MIN_EXPONENT}), {MAX_EXPONENT})"
    scaled = f"({a} / POWER(2.0, {e0}))"
    e = f"({e0} + CASE WHEN {scaled} >= 2 THEN 1 WHEN {scaled} < 1 THEN -1 ELSE 0 END)"
    k = f"({SIGNIFICAND_BITS} - {e})"
    half = f"FLOOR({k} / 2.0)"
    m = f"CAST({a} * POWER(2.0, {half}) * POWER(2.0, {k} - {half}) AS bigint)"
    return (
        f"CASE WHEN {v} < 0 THEN '-' ELSE '' END || CAST({m} AS varchar(20)) || 'p' "
        f"|| CAST(CAST({e} - {SIGNIFICAND_BITS} AS bigint) AS varchar(8))"
    )


def float_text(expr: str) -> str:
    """The canonical text of a real or double precision value (NULL stays NULL)."""
    v = f"CAST({expr} AS double precision)"
    return (
        f"CASE WHEN {v} = 0 THEN '0'"
        f" WHEN {v} > {MAX_DOUBLE} THEN CASE WHEN -{v} < 0 THEN 'Infinity' ELSE 'NaN' END"
        f" WHEN {v} < -{MAX_DOUBLE} THEN '-Infinity'"
        f" ELSE {finite_text(expr)} END"
    )
