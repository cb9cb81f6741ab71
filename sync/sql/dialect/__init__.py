"""SQL dialects: what the generated SQL spells differently per engine, and nothing else.

PostgreSQL, the embedded warehouse, is the base (`postgres.PostgresDialect`, with the
helper functions it needs); Redshift, production, derives from it and overrides only
where the engine differs (`redshift.RedshiftDialect`, whose docstring lists that delta,
one line per override, with the reason), the way sqlglot layers `Redshift(Postgres)`.
Code outside this package asks a dialect object for SQL and capabilities; it never
branches on the engine's name.
"""

from __future__ import annotations

from decimal import Decimal

from sync.sql.dialect.postgres import ZONED_TEXT, PostgresDialect, quote_ident, quote_literal
from sync.sql.dialect.redshift import RedshiftDialect

DIALECTS: dict[str, type[PostgresDialect]] = {"postgres": PostgresDialect, "redshift": RedshiftDialect}

# The real/double magnitudes every engine stores: what a backfill's files hold, since they
# may be loaded into either (a value outside is a rejected row, not a failed COPY).
LOADABLE_FLOAT_RANGES = {
    family: (
        min((d.float_ranges[family][0] for d in DIALECTS.values()), key=Decimal),
        max((d.float_ranges[family][1] for d in DIALECTS.values()), key=Decimal),
    )
    for family in PostgresDialect.float_ranges
}

__all__ = [
    "DIALECTS",
    "LOADABLE_FLOAT_RANGES",
    "ZONED_TEXT",
    "PostgresDialect",
    "RedshiftDialect",
    "dialect_for",
    "quote_ident",
    "quote_literal",
]


def dialect_for(name: str, schema: str = "public") -> PostgresDialect:
    """The dialect called `name`, naming its helper functions in `schema`."""
    try:
        return DIALECTS[name]().bind_schema(schema)
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; choose one of: {', '.join(DIALECTS)}") from None
