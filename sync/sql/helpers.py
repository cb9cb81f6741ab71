"""PostgreSQL helper functions: the null-on-error conversions Redshift's SUPER casts do
natively (cast_super_null_on_error = ON). A value that does not convert becomes NULL here
exactly as on Redshift, and the procedure turns that into a quarantine reason.

Plain SQL functions are inlined by the planner; the temporal ones need an exception
handler (PostgreSQL has no non-raising date parser before version 16), so they only run
for columns of those types.
"""

from __future__ import annotations

from sync.sql.dialects import ZONED_TEXT, quote_ident
from sync.vocabulary import BASE64_PATTERN, NUMBER_PATTERN


def _fn(schema: str, name: str, args: str, returns: str, body: str, language: str = "sql") -> str:
    volatility = "IMMUTABLE PARALLEL SAFE" if language == "sql" else "STABLE PARALLEL SAFE"
    return (
        f"CREATE OR REPLACE FUNCTION {quote_ident(schema)}.{quote_ident('sync_' + name)}({args})\n"
        f"RETURNS {returns} LANGUAGE {language} {volatility} AS $fn$\n{body}\n$fn$;"
    )


def _temporal(schema: str, family: str) -> str:
    # A `timestamp` column takes zoned text at UTC: a plain cast would drop the offset.
    zoned = (
        f"  IF (j #>> '{{}}') ~ '{ZONED_TEXT}' THEN\n    RETURN ((j #>> '{{}}')::timestamptz AT TIME ZONE 'UTC');\n  END IF;\n"
        if family == "timestamp"
        else ""
    )
    body = (
        "BEGIN\n"
        "  IF jsonb_typeof(j) IS DISTINCT FROM 'string' OR (j #>> '{}') !~ '^\\s*[0-9]' THEN\n"
        "    RETURN NULL;\n"
        "  END IF;\n" + zoned + f"  RETURN (j #>> '{{}}')::{family};\n"
        "EXCEPTION WHEN others THEN\n"
        "  RETURN NULL;\n"
        "END"
    )
    return _fn(schema, f"to_{family}", "j jsonb", family, body, language="plpgsql")


def helper_functions(schema: str) -> list[tuple[str, str]]:
    """(name, CREATE statement) for every helper, in dependency order."""
    s = quote_ident(schema)
    text = f"{s}.{quote_ident('sync_text')}"
    numeric = f"{s}.{quote_ident('sync_to_numeric')}"
    fns = [
        (
            "sync_text",
            _fn(
                schema,
                "text",
                "j jsonb",
                "text",
                # A string's value, a JSON null as NULL, anything else as JSON text; one
                # reference to j, so inlining never evaluates the argument twice.
                "SELECT j #>> '{}'",
            ),
        ),
        (
            "sync_to_text",
            _fn(
                schema,
                "to_text",
                "j jsonb, max_bytes integer",
                "text",
                f"SELECT CASE WHEN octet_length({text}(j)) <= max_bytes THEN {text}(j) END",
            ),
        ),
        (
            "sync_to_numeric",
            _fn(
                schema,
                "to_numeric",
                "j jsonb",
                "numeric",
                # JSON numbers convert directly; only strings need the pattern check.
                "SELECT CASE jsonb_typeof(j) WHEN 'number' THEN j::numeric\n"
                f"  WHEN 'string' THEN CASE WHEN (j #>> '{{}}') ~ '{NUMBER_PATTERN}' THEN (j #>> '{{}}')::numeric END END",
            ),
        ),
        (
            "sync_to_integer",
            _fn(
                schema,
                "to_integer",
                "j jsonb, lo numeric, hi numeric",
                "numeric",
                # A JSON number (the usual case) converts directly; a string goes the long way.
                "SELECT CASE jsonb_typeof(j)\n"
                "  WHEN 'number' THEN CASE WHEN j::numeric BETWEEN lo AND hi AND j::numeric = trunc(j::numeric) THEN j::numeric END\n"
                f"  WHEN 'string' THEN CASE WHEN {numeric}(j) = trunc({numeric}(j)) AND {numeric}(j) BETWEEN lo AND hi\n"
                f"    THEN {numeric}(j) END END",
            ),
        ),
        (
            "sync_to_float",
            _fn(
                schema,
                "to_float",
                "j jsonb, max_abs numeric, min_abs numeric",
                "numeric",
                # Outside the type's range the cast to real/double would raise and fail the run.
                f"SELECT CASE WHEN abs({numeric}(j)) <= max_abs AND ({numeric}(j) = 0 OR abs({numeric}(j)) >= min_abs)\n"
                f"  THEN {numeric}(j) END",
            ),
        ),
        (
            "sync_to_decimal",
            _fn(
                schema,
                "to_decimal",
                "j jsonb, p integer, s integer",
                "numeric",
                f"SELECT CASE WHEN abs(round({numeric}(j), s)) < 10::numeric ^ (p - s)\n  THEN round({numeric}(j), s) END",
            ),
        ),
        (
            "sync_to_boolean",
            _fn(
                schema,
                "to_boolean",
                "j jsonb",
                "boolean",
                "SELECT CASE WHEN jsonb_typeof(j) = 'boolean' THEN (j #>> '{}')::boolean\n"
                "  WHEN jsonb_typeof(j) = 'number' AND (j #>> '{}') IN ('0', '1') THEN (j #>> '{}') = '1' END",
            ),
        ),
        (
            "sync_to_json",
            _fn(
                schema,
                "to_json",
                "j jsonb",
                "jsonb",
                "SELECT CASE WHEN jsonb_typeof(j) <> 'null' THEN j END",
            ),
        ),
        (
            "sync_to_bytes",
            _fn(
                schema,
                "to_bytes",
                "j jsonb, max_bytes integer",
                "bytea",
                f"SELECT CASE WHEN jsonb_typeof(j) = 'string' AND (j #>> '{{}}') ~ '{BASE64_PATTERN}'\n"
                "  AND octet_length(decode(j #>> '{}', 'base64')) <= max_bytes\n"
                "  THEN decode(j #>> '{}', 'base64') END",
            ),
        ),
    ]
    for family in ("date", "timestamp", "timestamptz", "time", "timetz"):
        fns.append((f"sync_to_{family}", _temporal(schema, family)))
    fns.append(
        (
            "sync_parse_json",
            _fn(
                schema,
                "parse_json",
                "t text",
                "jsonb",
                "BEGIN\n  RETURN t::jsonb;\nEXCEPTION WHEN others THEN\n  RETURN NULL;\nEND",
                language="plpgsql",
            ),
        )
    )
    return fns
