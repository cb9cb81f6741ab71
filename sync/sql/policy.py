"""Column policies (`policy = "hash" | "mask" | "drop"` in the pipeline file): what of a
field's value may land in the warehouse, applied where the typed value is computed, so
the target, the stage and every copy made from them hold the policy's value, never the
clear one.

- hash: a keyed SHA-256, as 64 hexadecimal characters. Redshift has SHA2(string, bits),
  which hashes text and returns hex text, and no HMAC function. RFC 2104's HMAC XORs the
  key's bytes with pads and hashes the binary inner digest, which a text function cannot
  take; the construction here nests two keyed hashes over text instead:
  SHA-256(key || ':' || SHA-256(key || ':' || value)), hex at each step (the outer hash
  also stops SHA-256's length extension). Without the key, a value cannot be confirmed
  by hashing guesses. The key lives in the warehouse (`KEY_TABLE`), read by the
  procedure into a variable: never in generated SQL, the pipeline file or a revision.
- mask: a fixed value of the column's type (`mask_literal`); NULL stays NULL.
- drop: the field is not a column at all (`TableConfig.dropped`).

Quarantined records keep their envelope redacted (`redacted_sql`): each policy field of
the row images replaced by its hash or mask text (NULL for drop); a raw value that did not
parse cannot be redacted and is not stored.
"""

from __future__ import annotations

from sync.config import ColumnConfig, Pipeline, Policy, TableConfig
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.envelope import unwrap_schema
from sync.sql.names import table_names
from sync.sql.schemas import Column, definitions
from sync.sql.types import SqlType

# The pipeline's hash keys, newest (highest key_id) in use. Readable by its owner only,
# who owns the procedures too (SECURITY DEFINER): callers run them without reading it.
KEY_TABLE = "sync_policy_key"
KEY_COLUMNS = (
    Column("key_id", "integer", "NOT NULL"),
    Column("secret", "varchar(256)", "NOT NULL"),
    Column("created_at", "timestamp", "NOT NULL"),
)
# The procedure's copy of the newest key.
KEY_VARIABLE = "v_policy_key"
MISSING_KEY = "no column policy key in {table}: run redshift-sync policy rotate-key"
# Fixed values by column family; text masks are cut to the column's length.
MASKS = {
    "smallint": "0",
    "integer": "0",
    "bigint": "0",
    "decimal": "0",
    "real": "0",
    "double": "0",
    "boolean": "false",
    "char": "****",
    "varchar": "****",
    "date": "1970-01-01",
    "timestamp": "1970-01-01 00:00:00",
    "timestamptz": "1970-01-01 00:00:00+00",
    "time": "00:00:00",
    "timetz": "00:00:00+00",
}


def has_policies(table: TableConfig) -> bool:
    return bool(table.dropped) or any(c.policy is not None for c in table.columns)


def any_policies(pipeline: Pipeline) -> bool:
    return any(has_policies(t) for t in pipeline.tables)


def key_table(d: PostgresDialect, pipeline: Pipeline) -> str:
    return d.qualified(pipeline.schema, KEY_TABLE)


def newest_key_sql(d: PostgresDialect, pipeline: Pipeline) -> str:
    """The newest key as a scalar subquery (for statements outside the procedures)."""
    k = key_table(d, pipeline)
    return f"(SELECT secret FROM {k} WHERE key_id = (SELECT MAX(key_id) FROM {k}))"


def hash_sql(d: PostgresDialect, value: str, key: str = KEY_VARIABLE) -> str:
    """The keyed hash of a text `value` (NULL stays NULL)."""
    inner = d.sha256_hex(f"{key} || ':' || ({value})")  # PostgreSQL: || and -> share a precedence
    return d.sha256_hex(f"{key} || ':' || {inner}")


def mask_literal(d: PostgresDialect, t: SqlType) -> str:
    text = MASKS[t.family]
    if t.byte_limit is not None:  # char(1) by default: the mask fits the column, never cut by a cast
        text = text[: t.byte_limit]
    return f"CAST({quote_literal(text)} AS {d.type_sql(t)})"


def _kept_hash(d: PostgresDialect, value: str, key: str, replayed: str | None) -> str:
    """The keyed hash of `value`, or `value` itself where it is a hash already (`replayed`:
    the condition of a replayed quarantined record, sync.sql.policy_replay)."""
    hashed = hash_sql(d, value, key)
    return f"CASE WHEN {replayed} THEN {value} ELSE {hashed} END" if replayed else hashed


def policy_value_sql(
    d: PostgresDialect, col: ColumnConfig, value: str, key: str = KEY_VARIABLE, replayed: str | None = None
) -> str:
    """The column's typed `value` as its policy stores it (unchanged without one)."""
    if col.policy == Policy.HASH:
        return _kept_hash(d, value, key, replayed)
    if col.policy == Policy.MASK:
        return f"CASE WHEN {value} IS NOT NULL THEN {mask_literal(d, col.sql_type)} END"
    return value


def _redacted_text(
    d: PostgresDialect,
    policy: Policy,
    col_type: SqlType | None,
    obj: str,
    name: str,
    key: str,
    text: str | None = None,
    replayed: str | None = None,
) -> str:
    """What stands in a payload for the policy field `name` of the row image `obj` (`text`:
    the field's text where a step before named it once)."""
    if policy == Policy.HASH:
        return _kept_hash(d, text or d.json_get_text(obj, name), key, replayed)
    if policy == Policy.MASK and col_type is not None:
        return f"CASE WHEN NOT {d.json_is_null(d.json_get(obj, name))} THEN {quote_literal(MASKS[col_type.family])} END"
    return "NULL"


def _image_paths(table: TableConfig) -> list[tuple[str, ...]]:
    """Where a row image sits in an envelope without the schemas.enable wrapper."""
    return [("after",), ("before",)] if table.format == "debezium" else [()]


def redacted_sql(
    d: PostgresDialect,
    table: TableConfig,
    env: str,
    key: str = KEY_VARIABLE,
    images: list[tuple[str, ...]] | None = None,
    only: str | None = None,
    texts: dict[tuple[str, ...], str] | None = None,
    blank: bool = False,
    replayed: str | None = None,
) -> str:
    """The envelope `env` (schemas.enable wrapper removed) with every policy field of its
    row images replaced (PostgreSQL: jsonb_set, which leaves a missing path alone; Redshift:
    OBJECT_TRANSFORM ... SET, which adds a missing path, here with a NULL). `texts`: the
    text of a hashed field by its path, named once before (`hashed_texts`); `blank`: every
    policy field NULL (a copy that only its field names are read from); `replayed`: the
    condition of a replayed record, whose hashed fields are hashes already."""
    fields: list[tuple[str, Policy, SqlType | None]] = [(c.name, c.policy, c.sql_type) for c in table.columns if c.policy]
    fields += [(name, Policy.DROP, None) for name in table.dropped]
    fields = [f for f in fields if only is None or f[0] == only]
    pairs = []
    for image in _image_paths(table) if images is None else images:
        obj = env
        for step in image:
            obj = d.json_get(obj, step)
        for name, policy, col_type in fields:
            path = (*image, name)
            text = (texts or {}).get(path)
            value = _redacted_text(d, policy, col_type, obj, name, key, text, replayed)
            pairs.append(([*path], "NULL" if blank else value))
    return d.json_with_members(env, pairs) if pairs else env


def redacted_image_sql(d: PostgresDialect, table: TableConfig, img: str) -> str:
    """A row image `img` with its policy fields NULL (the schema-drift step's copy, of
    which only the field names are read)."""
    return redacted_sql(d, table, img, images=[()], blank=True) if has_policies(table) else img


def hashed_texts(d: PostgresDialect, table: TableConfig, env: str) -> tuple[list[dict[str, str]], dict[tuple[str, ...], str]]:
    """The text of each hashed field of the envelope's row images, named once where the
    dialect names texts: the levels that compute them (over `f`), and each path's column
    name (empty where the dialect reads a member as text in place)."""
    levels: list[dict[str, str]] = []
    names: dict[tuple[str, ...], str] = {}
    hashed = [c.name for c in table.columns if c.policy == Policy.HASH]
    for n, image in enumerate(_image_paths(table)):
        obj = env
        for step in image:
            obj = d.json_get(obj, step)
        for i, name in enumerate(hashed):
            text = d.text_levels(d.json_get(obj, name), f"h{n}_{i}")
            if text is None:
                continue
            for depth, values in enumerate(text[0]):
                levels += [{} for _ in range(depth + 1 - len(levels))]
                levels[depth].update(values)
            names[(*image, name)] = text[1].removeprefix("f.")
    return levels, names


def known_fields(table: TableConfig) -> list[str]:
    """The fields the pipeline file lists in the row image: its columns' (but the routing
    SMT's key field, which only the Kafka key carries) and the dropped ones."""
    return [*(c.name for c in table.image_columns), *table.dropped]


def key_read(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> tuple[str, str, str] | None:
    """For a table with policies: the newest key as a scalar subquery, the variable it is
    read into, and the check that stops the call without one (a NULL key would hash every
    value to NULL). None for a table without policies."""
    if not has_policies(table):
        return None
    missing = MISSING_KEY.format(table=f"{pipeline.schema}.{KEY_TABLE}")
    check = f"IF {KEY_VARIABLE} IS NULL THEN\n  RAISE EXCEPTION {quote_literal(missing)};\nEND IF;"
    return newest_key_sql(d, pipeline), KEY_VARIABLE, check


def key_check_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> str:
    """The key read on its own (the record isolation procedure, which has no watermark read)."""
    key = key_read(d, pipeline, table)
    assert key is not None
    return f"-- Column policies: the newest hash key (readable by the procedure's owner only).\n{key[1]} := {key[0]};\n{key[2]}"


def key_declaration() -> str:
    return f"{KEY_VARIABLE} varchar(256);"


def key_table_sql(d: PostgresDialect, pipeline: Pipeline) -> str:
    """The key table: created empty; `redshift-sync policy rotate-key` adds each key."""
    columns = ",\n".join(f"  {line}" for line in [*definitions(d, KEY_COLUMNS), "PRIMARY KEY (key_id)"])
    return f"CREATE TABLE IF NOT EXISTS {key_table(d, pipeline)} (\n{columns}\n);"


def conversion_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, col: ColumnConfig) -> list[str]:
    """A policy added to a stored column: its stored values converted in place with the
    newest key, and the table's quarantined records redacted (their raw values, which
    cannot be, removed)."""
    n = table_names(pipeline, table)
    value = policy_value_sql(d, col, d.q(col.target_name), newest_key_sql(d, pipeline))
    return [
        f"UPDATE {d.qualified(n.schema, n.target)} SET {d.q(col.target_name)} = {value};",
        quarantine_redaction_sql(d, pipeline, table, col.name),
    ]


def quarantine_redaction_sql(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, field: str) -> str:
    """The table's quarantined records with the policy `field` redacted (and no raw value)."""
    n = table_names(pipeline, table)
    redacted = redacted_sql(d, table, unwrap_schema(d, "payload"), newest_key_sql(d, pipeline), only=field)
    return (
        f"UPDATE {d.qualified(n.schema, n.quarantine)} SET payload = {redacted},\n"
        f"  raw_value = NULL\nWHERE table_name = {quote_literal(table.name)};"
    )
