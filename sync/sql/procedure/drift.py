"""6. Schema drift: fields of the row images the pipeline file does not list, and
configured fields the images lack, counted per run."""

from __future__ import annotations

from sync.sql import schemas
from sync.sql.dialect import quote_literal
from sync.sql.policy import known_fields
from sync.sql.procedure.context import CALL_TIME, TableSql
from sync.sql.procedure.text import WIDE, indent, packed, wrapped


def schema_drift_sql(ctx: TableSql) -> str:
    """6. Schema drift over this run's row images (c/r/u): fields the pipeline file does not
    list (counted, never dropped without a trace) and configured fields the events lack.
    Reads the images the stage query set aside (`drift_image_sql`): the others have exactly
    the configured fields, so counts over these alone are the counts over the batch. One
    pass over their member names (jsonb_object_keys / PartiQL UNPIVOT); the number of
    images rides along as a window count."""
    d, table = ctx.d, ctx.table
    images = f"SELECT s._drift_img AS img, COUNT(*) OVER () AS images\nFROM {ctx.rel.stage} s\nWHERE s._drift_img IS NOT NULL"
    keys_join, field = d.object_keys_join("x0.img", "x")
    # The configured fields (and those a policy drops), as many to a line as fit.
    configured = "\n            " + packed(
        [f"UNION ALL SELECT {quote_literal(name)}, 1, 0, 0" for name in known_fields(table)], " " * 12, WIDE, separator=" "
    )
    drift = {
        "table_name": quote_literal(table.name),
        "run_started_at": CALL_TIME,
        "kind": "CASE WHEN k.configured = 1 THEN 'missing' ELSE 'unknown' END",
        "field": "k.field",
        "events": "CASE WHEN k.configured = 1 THEN k.images - k.seen ELSE k.seen END",
    }
    columns, values = schemas.ordered(d, schemas.SCHEMA_DRIFT, drift)
    return (
        f"INSERT INTO {ctx.rel.schema_drift} ({', '.join(columns)})\n"
        f"SELECT {wrapped(values, (2, 4), ' ' * 7)}\n"
        "FROM (SELECT u.field, MAX(u.configured) AS configured, SUM(u.seen) AS seen,\n"
        "             MAX(MAX(u.images)) OVER () AS images\n"
        f"      FROM (SELECT {d.prefix_bytes(field, 256)} AS field, 0 AS configured, 1 AS seen, x0.images\n"
        f"            FROM (\n{indent(images, 14)}\n            ) x0{keys_join}"
        f"{configured}) u\n"
        "      GROUP BY u.field) k\n"
        "WHERE (k.configured = 1 AND k.seen < k.images)\n"
        "   OR (k.configured = 0 AND SUBSTRING(k.field, 1, 2) <> '__');  -- '__' fields: unwrap metadata"
    )


def drift_sql(ctx: TableSql) -> str:
    return (
        "-- 6. Schema drift: unknown fields in the row images, configured fields missing from them\n"
        "--    (only images set aside by the stage query can have either).\n"
        "IF v_drift > 0 THEN\n" + indent(schema_drift_sql(ctx), 2) + "\nEND IF;"
    )
