"""Every warehouse object of a pipeline, as an ordered list of single statements.

`pipeline_objects()` is the one model both `deploy` and `generate` (and the migrations)
read: the same objects, in the same order, in either dialect.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import Pipeline, TableConfig
from sync.sql import schemas
from sync.sql.dialect import PostgresDialect, dialect_for, quote_literal
from sync.sql.names import HEARTBEAT_STREAM, QUARANTINE, REFRESH_HISTORY, RUN_LOG, SCHEMA_DRIFT, table_names
from sync.sql.policy import KEY_TABLE, any_policies, key_table_sql
from sync.sql.procedure import isolate_record_sql, procedure_sql, scheduled_procedure_sql

# A quoted identifier keeps its case only when this is true (r_enable_case_sensitive_identifier).
CASE_SETTING = "enable_case_sensitive_identifier"


def auto_refresh_requirements(pipeline: Pipeline, d: PostgresDialect) -> list[str]:
    """What the cluster or workgroup must be set up with before the streaming views work.
    The procedures set what they need for their own session; a materialized view's AUTO
    REFRESH runs in no session of ours, and AWS recommends the parameter group for it."""
    heartbeat = [pipeline.heartbeat.topic] if pipeline.heartbeat else []
    topics = [t for t in [*(t.topic for t in pipeline.tables), *heartbeat] if t != t.lower()]
    if not topics or not d.streaming_ingestion:
        return []
    return [
        f"topic(s) {', '.join(topics)} have upper-case letters; a streaming materialized view names its "
        f"topic as a quoted identifier, which Redshift folds to lower case unless {CASE_SETTING} is true when "
        "the view refreshes, and AUTO REFRESH does not run in a session that set it. Set it in the parameter "
        f"group first (r_enable_case_sensitive_identifier): provisioned: aws redshift modify-cluster-parameter-group "
        f"--parameter-group-name NAME --parameters ParameterName={CASE_SETTING},ParameterValue=true; "
        "Serverless: aws redshift-serverless update-workgroup --workgroup-name NAME "
        f"--config-parameters parameterKey={CASE_SETTING},parameterValue=true"
    ]


@dataclass(frozen=True)
class SqlObject:
    kind: str  # setting | schema | external_schema | function | table | index | stream | procedure | view
    schema: str
    name: str
    sql: str
    table: str | None = None  # the pipeline table it belongs to, None for shared objects
    # Replaceable objects are re-created from the generator on every deploy; the others
    # are created once (CREATE ... IF NOT EXISTS, or after a catalog check).
    replaceable: bool = False
    check_exists: bool = False
    # Procedures: the argument types, as DROP PROCEDURE names them ("" for none).
    arguments: str = ""


def _columns_block(lines: list[str]) -> str:
    return "(\n" + ",\n".join("  " + line for line in lines) + "\n)"


def _create_table(d: PostgresDialect, schema: str, name: str, lines: list[str], attributes: str = "", prefix: str = "") -> str:
    return f"CREATE {prefix}TABLE IF NOT EXISTS {d.qualified(schema, name)} {_columns_block(lines)}{attributes};"


def _external_schema(d: PostgresDialect, pipeline: Pipeline) -> str:
    src = pipeline.source
    lines = [f"CREATE EXTERNAL SCHEMA IF NOT EXISTS {d.q(src.external_schema)}"]
    lines.append("FROM MSK" if src.kind == "msk" else "FROM KAFKA")
    if src.iam_role:
        lines.append(f"IAM_ROLE {quote_literal(src.iam_role)}")
    lines.append(f"AUTHENTICATION {src.authentication}")
    if src.authentication_arn:
        lines.append(f"AUTHENTICATION_ARN {quote_literal(src.authentication_arn)}")
    if src.secret_arn:
        lines.append(f"SECRET_ARN {quote_literal(src.secret_arn)}")
    if src.kind == "msk":
        lines.append(f"CLUSTER_ARN {quote_literal(src.cluster_arn or '')}")
    else:
        lines.append(f"URI {quote_literal(src.uri or '')}")
    return "\n".join(lines) + ";"


def _stream_objects(d: PostgresDialect, pipeline: Pipeline, topic: str, stream: str, table: str | None) -> list[SqlObject]:
    """The stream relation of one topic: a table's (`table` names it) or the heartbeat's."""
    schema = pipeline.schema
    prefix = stream.removesuffix("__stream")
    if d.streaming_ingestion:
        # Kept trivial: errors in a streaming MV block ingestion, and a re-created MV
        # re-reads the topic from offset 0. Records that do not parse keep their raw value;
        # JSON_PARSE only ever gets a value CAN_JSON_PARSE accepts (its argument is guarded:
        # a CASE around it may still evaluate it for every record).
        needs = (
            "-- The topic name has upper-case letters: AUTO REFRESH needs\n"
            f"-- {CASE_SETTING} = true in the parameter group (docs/redshift.md).\n"
            if topic != topic.lower()
            else ""
        )
        sql = (
            f"CREATE MATERIALIZED VIEW {d.qualified(schema, stream)}\n"
            f"{needs}AUTO REFRESH YES\n"
            "AS\n"
            "SELECT kafka_partition,\n"
            "       kafka_offset,\n"
            "       kafka_timestamp_type,\n"
            "       kafka_timestamp,\n"
            "       kafka_key,\n"
            "       kafka_headers,\n"
            "       refresh_time,\n"
            "       JSON_PARSE(CASE WHEN CAN_JSON_PARSE(kafka_value) THEN kafka_value END) AS payload,\n"
            "       CASE WHEN kafka_value IS NOT NULL AND NOT CAN_JSON_PARSE(kafka_value) THEN kafka_value END AS raw_value,\n"
            "       JSON_PARSE(CASE WHEN CAN_JSON_PARSE(kafka_key) THEN kafka_key END) AS key_payload\n"
            f"FROM {d.qualified(pipeline.source.external_schema, topic)};"
        )
        return [SqlObject("stream", schema, stream, sql, table, check_exists=True)]
    lines = schemas.definitions(d, schemas.STREAM)
    relation = d.qualified(schema, stream)
    return [
        SqlObject("stream", schema, stream, _create_table(d, schema, stream, lines), table),
        SqlObject(
            "index",
            schema,
            f"{prefix}__s_pos",
            f"CREATE INDEX IF NOT EXISTS {d.q(prefix + '__s_pos')} ON {relation} (kafka_partition, kafka_offset);",
            table,
        ),
        SqlObject(
            "index",
            schema,
            f"{prefix}__s_rt",
            f"CREATE INDEX IF NOT EXISTS {d.q(prefix + '__s_rt')} ON {relation} (refresh_time);",
            table,
        ),
    ]


def table_objects(d: PostgresDialect, pipeline: Pipeline, table: TableConfig, origin: str) -> list[SqlObject]:
    n = table_names(pipeline, table)
    q = d.q
    keys = [c.target_name for c in table.key_columns]
    # A keyless table (primary_key = []) has no PRIMARY KEY, and is distributed as configured;
    # its deleted-keys table holds the positions applied, sorted by the one it is joined on.
    pk = [f"PRIMARY KEY ({', '.join(q(k) for k in keys)})"] if keys else []
    dist = table.distkey_name
    sort = [c.target_name for c in table.sortkey_columns]

    target_lines = [*schemas.definitions(d, schemas.target(table), quoted=True), *pk]
    target = _create_table(d, n.schema, n.target, target_lines, d.table_attributes(dist, sort))
    stage_lines = schemas.definitions(d, schemas.stage(table))
    stage = _create_table(
        d, n.schema, n.stage, stage_lines, d.table_attributes(dist, keys, backup=False), prefix=d.stage_table_prefix
    )

    watermark = _create_table(
        d,
        n.schema,
        n.watermark,
        [*schemas.definitions(d, schemas.WATERMARK), "PRIMARY KEY (kafka_partition)"],
        d.control_table_attributes.get("watermark", ""),
    )
    objects = [
        # One streaming view per topic: the first table reading it creates it.
        *(_stream_objects(d, pipeline, table.topic, n.stream, table.name) if n.stream_owner == table.name else []),
        SqlObject("table", n.schema, n.target, target, table.name),
        SqlObject("table", n.schema, n.stage, stage, table.name),
        SqlObject("table", n.schema, n.watermark, watermark, table.name),
        *control_tables(d, pipeline, table),
    ]
    if table.delete_mode == "hard":
        deleted_lines = [*schemas.definitions(d, schemas.deleted_keys(table), quoted=True), *pk]
        objects.append(
            SqlObject(
                "table",
                n.schema,
                n.deleted_keys,
                _create_table(
                    d,
                    n.schema,
                    n.deleted_keys,
                    deleted_lines,
                    d.table_attributes(dist if keys else None, keys or ["_source_pos"]),
                ),
                table.name,
            )
        )
    if table.history is not None:
        objects += history_objects(d, pipeline, table)
    # The sync (bounded by p_max_records), its scheduled call, and record isolation.
    procedures = [
        (n.procedure, procedure_sql, "bigint"),
        (n.procedure, scheduled_procedure_sql, ""),
        (n.isolate_procedure, isolate_record_sql, d.long_text_argument),
    ]
    objects += [
        SqlObject("procedure", n.schema, name, render(d, pipeline, table, origin), table.name, replaceable=True, arguments=args)
        for name, render, args in procedures
    ]
    return objects


def history_objects(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> list[SqlObject]:
    """The history table: distributed on the key like the target (a key's versions on one
    slice, so the procedure's join with the stage is collocated), sorted by the key, then
    `_valid_from` (a key's versions in order; a range of times is a range of blocks per key).
    PostgreSQL, which has neither, gets an index on the key instead: every lookup names a
    key, whose few versions are read whole, and an index entry without the position (about
    40 bytes of text) keeps the index small, which is what each batch's inserts pay for
    (`python -m benchmarks --phase history`)."""
    n = table_names(pipeline, table)
    keys = [c.target_name for c in table.key_columns]
    lines = schemas.definitions(d, schemas.history(table), quoted=True)
    attributes = d.history_storage + d.table_attributes(table.distkey_column.target_name, [*keys, "_valid_from"])
    sql = _create_table(d, n.schema, n.history, lines, attributes)
    objects = [SqlObject("table", n.schema, n.history, sql, table.name)]
    if not d.streaming_ingestion:
        index = f"{table.name}__h_key"
        columns = ", ".join(d.q(k) for k in keys)
        on = d.qualified(n.schema, n.history)
        objects.append(
            SqlObject("index", n.schema, index, f"CREATE INDEX IF NOT EXISTS {d.q(index)} ON {on} ({columns});", table.name)
        )
    return objects


def shared_objects(d: PostgresDialect, pipeline: Pipeline) -> list[SqlObject]:
    schema = pipeline.schema
    objects: list[SqlObject] = []
    for setting in d.session_settings:
        objects.append(SqlObject("setting", schema, "session", setting, replaceable=True))
    objects.append(SqlObject("schema", schema, schema, f"CREATE SCHEMA IF NOT EXISTS {d.q(schema)};"))
    if d.streaming_ingestion:
        objects.append(
            SqlObject(
                "external_schema", pipeline.source.external_schema, pipeline.source.external_schema, _external_schema(d, pipeline)
            )
        )
    for name, sql in d.helper_functions(schema):
        objects.append(SqlObject("function", schema, name, sql, replaceable=True))
    objects.append(SqlObject("table", schema, RUN_LOG, run_log_sql(d, schema)))
    if any_policies(pipeline):  # column policies: the hash keys
        objects.append(SqlObject("table", schema, KEY_TABLE, key_table_sql(d, pipeline)))
    return objects + heartbeat_objects(d, pipeline)


def run_log_sql(d: PostgresDialect, schema: str, columns: tuple[schemas.Column, ...] = schemas.RUN_LOG) -> str:
    """The shared run log's CREATE TABLE (`columns`: as an earlier layout had it)."""
    return _create_table(d, schema, RUN_LOG, schemas.definitions(d, columns), d.control_table_attributes.get("run_log", ""))


def heartbeat_objects(d: PostgresDialect, pipeline: Pipeline) -> list[SqlObject]:
    """The heartbeat topic's stream relation and, on PostgreSQL, the refresh history
    `ingest` writes (Redshift keeps its own): nothing without `[heartbeat]`."""
    if pipeline.heartbeat is None:
        return []
    objects = _stream_objects(d, pipeline, pipeline.heartbeat.topic, HEARTBEAT_STREAM, None)
    if not d.streaming_ingestion:
        lines = schemas.definitions(d, schemas.REFRESH_HISTORY)
        objects.append(
            SqlObject("table", pipeline.schema, REFRESH_HISTORY, _create_table(d, pipeline.schema, REFRESH_HISTORY, lines))
        )
    return objects


# The per-table control tables behind each shared view, and their columns.
SHARED_VIEWS = ((QUARANTINE, "quarantine", schemas.QUARANTINE), (SCHEMA_DRIFT, "schema_drift", schemas.SCHEMA_DRIFT))


def control_tables(d: PostgresDialect, pipeline: Pipeline, table: TableConfig) -> list[SqlObject]:
    """The table's own quarantine and schema-drift tables (its procedure's only)."""
    n = table_names(pipeline, table)
    return [
        SqlObject(
            "table",
            n.schema,
            getattr(n, attr),
            control_table_sql(d, n.schema, getattr(n, attr), cols),
            table.name,
        )
        for _, attr, cols in SHARED_VIEWS
    ]


def control_table_sql(d: PostgresDialect, schema: str, name: str, columns: tuple[schemas.Column, ...]) -> str:
    return _create_table(d, schema, name, schemas.definitions(d, columns))


def shared_views(d: PostgresDialect, pipeline: Pipeline) -> list[SqlObject]:
    """`sync_quarantine` and `sync_schema_drift`: every table's rows, for users, `status`
    and the Lambda (created after the tables, re-created when a table comes or goes)."""
    out = []
    for view, attr, cols in SHARED_VIEWS:
        columns = ", ".join(schemas.names(cols))
        selects = "\nUNION ALL\n".join(
            f"SELECT {columns} FROM {d.qualified(pipeline.schema, getattr(table_names(pipeline, t), attr))}"
            for t in pipeline.tables
        )
        sql = f"CREATE OR REPLACE VIEW {d.qualified(pipeline.schema, view)} AS\n{selects}{d.view_binding};"
        out.append(SqlObject("view", pipeline.schema, view, sql, replaceable=True))
    return out


def pipeline_objects(pipeline: Pipeline, dialect: str, origin: str) -> list[SqlObject]:
    d = dialect_for(dialect, pipeline.schema)
    objects = shared_objects(d, pipeline)
    for table in pipeline.tables:
        objects.extend(table_objects(d, pipeline, table, origin))
    return objects + shared_views(d, pipeline)
