"""Snapshot rows and Debezium events -> one normalised shape, before typing:

  f__<column>       the raw field (Spark type of the input; text for JSON inputs)
  n__<column>       numeric and boolean fields of JSON inputs, read from the JSON token
  _op               'r' for snapshot rows and rows of query-based topics; the event's op
                    ('c','r','u','d') for events
  _source_ts        source commit time (timestamp, UTC), NULL when unknown
  _source_pos       ordering position, the same zero-padded text as the SQL path
  _kafka_partition, _kafka_offset   where the record came from, NULL when unknown
  _kafka_timestamp  the record's Kafka timestamp (a record line's `timestamp`), else NULL
  _reason           why the record cannot be applied (the procedure's wording), else NULL
  _record           the original record as text, kept for the rejects output

The position and the envelope rules mirror `sync/sql/envelope.py` and the classification
of `sync/sql/procedure/`, so the backfill picks the same winner per key as the stream.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from backfill.compat import try_cast
from backfill.conform import exact_name, exact_value, raw_name
from sync.config import ColumnConfig, TableConfig
from sync.debezium.vocabulary import EPOCH_UNITS, Reason
from sync.sql.envelope import ISO_TIMESTAMP, LSN_PATTERN, LSN_WIDTH, NUMBER_PATTERN, POS_WIDTH, POSITION_FIELDS

SOURCE_TS_COLUMNS = ("_source_ts", "__source_ts_ms")


def _find_column(df: DataFrame, *names: str) -> str | None:
    by_lower = {c.lower(): c for c in df.columns}
    for name in names:
        if name in df.columns:
            return name
        if name.lower() in by_lower:
            return by_lower[name.lower()]
    return None


def _snapshot_rows(
    df: DataFrame,
    fields: list[Column],
    row_ts: Column | None,
    position: Column | None,
    record: Column,
    snapshot_ts: Column | None,
) -> DataFrame:
    if row_ts is None and snapshot_ts is None:
        raise ValueError(
            "the snapshot has no _source_ts or __source_ts_ms column: pass --snapshot-time (when the snapshot was taken)"
        )
    if row_ts is None:
        source_ts = snapshot_ts
    elif snapshot_ts is None:
        source_ts = row_ts
    else:
        source_ts = F.coalesce(row_ts, snapshot_ts)
    return df.select(
        *fields,
        F.lit("r").alias("_op"),
        source_ts.alias("_source_ts"),
        (position if position is not None else F.lit(None)).cast("string").alias("_source_pos"),
        F.lit(None).cast("long").alias("_kafka_partition"),
        F.lit(None).cast("long").alias("_kafka_offset"),
        F.lit(None).cast(T.TimestampNTZType()).alias("_kafka_timestamp"),
        F.lit(None).cast("string").alias("_reason"),
        record.alias("_record"),
    )


def column_names(col: ColumnConfig) -> str:
    """A column as the user knows it: its field name, and its target name when that is
    not just the field name in lower case."""
    if col.target_name == col.name.lower():
        return repr(col.name)
    return f"{col.name!r} (target {col.target_name!r})"


def flat_rows(df: DataFrame, table: TableConfig, snapshot_ts: Column | None) -> tuple[DataFrame, list[str]]:
    """A table-shaped snapshot (Parquet, CSV) and notes on what it lacks. Columns are found
    by field name, then by target name (case-insensitive). A `_source_ts` (timestamp or
    text) or `__source_ts_ms` (epoch ms) column gives each row its own source time;
    otherwise the snapshot time applies to every row. A value column the snapshot does not
    have (added to the table after the snapshot was taken) loads as NULL, with a note; a
    missing key column is refused."""
    fields = []
    notes = []
    for col in table.columns:
        found = _find_column(df, col.name, col.target_name)
        if found is None and col.name in table.primary_key:
            raise ValueError(
                f"snapshot has no column {column_names(col)}, a primary-key column of {table.name}; "
                f"it has: {', '.join(df.columns)}"
            )
        if found is None:
            notes.append(f"snapshot has no column {column_names(col)}: loaded as NULL (a column added after the snapshot)")
            fields.append(F.lit(None).cast("string").alias(raw_name(col)))
            continue
        fields.append(F.col(f"`{found}`").alias(raw_name(col)))
    ts_col = _find_column(df, "_source_ts")
    ms_col = _find_column(df, "__source_ts_ms")
    row_ts: Column | None = None
    if ts_col is not None:
        row_ts = try_cast(F.col(f"`{ts_col}`"), T.TimestampNTZType())
    elif ms_col is not None:
        row_ts = epoch_ms(F.col(f"`{ms_col}`").cast("string"))
    pos_col = _find_column(df, "_source_pos")
    position = F.col(f"`{pos_col}`") if pos_col else _flat_column_position(df, table)
    record = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
    return _snapshot_rows(df, fields, row_ts, position, record, snapshot_ts), notes


def json_rows(lines: DataFrame, table: TableConfig, snapshot_ts: Column | None) -> DataFrame:
    """JSON lines, one object per row (column `value`). Fields are read as JSON text, and
    numbers and booleans also straight from the JSON token (see `exact_value`)."""
    line = F.col("value")
    by_source = F.from_json(line, _strings(*[c.name for c in table.columns], "_source_ts", "__source_ts_ms", "_source_pos"))
    by_target = F.from_json(line, _strings(*[c.target_name for c in table.columns]))
    fields = []
    for col in table.columns:
        fields.append(F.coalesce(by_source[col.name], by_target[col.target_name]).alias(raw_name(col)))
        exact = exact_value(line, col.name, col)
        if exact is not None:
            exact = F.coalesce(exact, exact_value(line, col.target_name, col))
            fields.append(exact.alias(exact_name(col)))
    row_ts = F.coalesce(
        F.when(by_source["_source_ts"].rlike(r"^\s*[0-9]"), try_cast(by_source["_source_ts"], T.TimestampNTZType())),
        epoch_ms(by_source["__source_ts_ms"]),
    )
    position = by_source["_source_pos"]
    if table.order_column is not None:
        position = F.coalesce(position, column_position(by_source[table.order_column.name]))
    return _snapshot_rows(lines.where(F.trim(line) != ""), fields, row_ts, position, line, snapshot_ts)


def epoch_ms(text: Column) -> Column:
    """Epoch milliseconds (JSON number text) -> UTC timestamp without zone, NULL otherwise."""
    ms = F.when(text.rlike(r"^\s*-?[0-9]{1,18}\s*$"), try_cast(F.trim(text), T.LongType()))
    return F.timestamp_millis(ms).cast(T.TimestampNTZType())


def _pad(text: Column) -> Column:
    return F.lpad(F.coalesce(text, F.lit("")), POS_WIDTH, "0")


def _group(text: Column, pattern: str) -> Column:
    """First capture group, NULL when there is no match (like substring(x from pattern)).
    Java's `$` also matches before a final line break, POSIX's (the SQL's) does not: a
    final `$` is read as `\\z`, so '123\n' is no number here either."""
    if pattern.endswith("$"):
        pattern = pattern.removesuffix("$") + r"\z"
    return F.when(text.rlike(pattern), F.regexp_extract(text, pattern, 1))


def column_position(text: Column) -> Column:
    """The position of an order column's value, as `sync.sql.envelope.column_position`:
    a number's digits zero-padded, an ISO timestamp's digits to the microsecond."""
    number = _group(text, rf"^([0-9]{{1,{POS_WIDTH}}})$")
    digits = F.translate(_group(text, ISO_TIMESTAMP), "-:T .", "")
    return F.coalesce(F.lpad(number, POS_WIDTH, "0"), F.rpad(digits, POS_WIDTH, "0"))


def _flat_column_position(df: DataFrame, table: TableConfig) -> Column | None:
    """A typed snapshot's order column as the topic would carry it: a timestamp in its
    epoch unit when the column has one (a Connect Timestamp: milliseconds), else as
    text; anything else as its text."""
    col = table.order_column
    found = _find_column(df, col.name, col.target_name) if col is not None else None
    if found is None:
        return None
    value = F.col(f"`{found}`")
    if isinstance(df.schema[found].dataType, (T.TimestampType, T.TimestampNTZType)):
        ntz = value.cast(T.TimestampNTZType())
        unit = EPOCH_UNITS.get(col.semantic or "")
        if unit is None:
            return column_position(F.date_format(ntz, "yyyy-MM-dd HH:mm:ss.SSSSSS"))
        micros = F.unix_micros(ntz.cast(T.TimestampType()))  # the session time zone is UTC
        epoch = micros * (unit // 1_000_000) if unit >= 1_000_000 else F.floor(micros / (1_000_000 // unit))
        return column_position(epoch.cast(T.LongType()).cast("string"))
    return column_position(value.cast("string"))


def _mysql_position(file: Column, pos: Column, row: Column) -> Column:
    number = _group(file, "([0-9]+)$")
    return F.when(
        file.isNotNull() & pos.isNotNull(),
        F.concat(_pad(number), F.lit("."), _pad(pos), F.lit("."), _pad(row)),
    )


def _postgres_position(sequence: Column, lsn: Column) -> Column:
    """As the procedure's: a null or empty last-commit LSN ranks as the event's own LSN."""
    first = _group(sequence, r'^\["?([0-9]*)')
    change_lsn = F.coalesce(_group(sequence, r'([0-9]+)"?\]$'), lsn)
    commit_lsn = F.coalesce(F.when(first != "", first), change_lsn)
    return F.when(change_lsn.isNotNull(), F.concat(_pad(commit_lsn), F.lit("."), _pad(change_lsn)))


def _lsn_parts(commit_lsn: Column, change_lsn: Column, order_by: str) -> tuple[Column, Column]:
    def digits(lsn: Column) -> Column:
        return F.upper(F.regexp_replace(_group(lsn, LSN_PATTERN[order_by]), ":", ""))

    width = LSN_WIDTH[order_by]
    # A snapshot row (no change LSN) after every change of its commit, as the procedure's.
    return F.lpad(digits(commit_lsn), width, "0"), F.lpad(F.coalesce(digits(change_lsn), F.lit("F" * width)), width, "0")


def _sqlserver_position(commit_lsn: Column, change_lsn: Column, serial: Column) -> Column:
    commit, change = _lsn_parts(commit_lsn, change_lsn, "sqlserver-lsn")
    return F.concat(commit, F.lit("."), change, F.lit("."), _pad(_group(serial, NUMBER_PATTERN)))


def _db2_position(commit_lsn: Column, change_lsn: Column) -> Column:
    return F.concat(*_lsn_parts(commit_lsn, change_lsn, "db2-lsn"))


def _oracle_position(commit_scn: Column, scn: Column, tx_seq: Column) -> Column:
    change = _group(scn, NUMBER_PATTERN)
    commit = F.coalesce(_group(commit_scn, NUMBER_PATTERN), change)
    return F.concat(
        F.lpad(commit, POS_WIDTH, "0"),
        F.lit("."),
        F.lpad(change, POS_WIDTH, "0"),
        F.lit("."),
        _pad(_group(tx_seq, NUMBER_PATTERN)),
    )


# The source fields a position is read from, per `order_by`.
POSITIONS = {
    "mysql-binlog": _mysql_position,
    "postgres-lsn": _postgres_position,
    "sqlserver-lsn": _sqlserver_position,
    "oracle-scn": _oracle_position,
    "db2-lsn": _db2_position,
}


def _strings(*names: str) -> T.StructType:
    """String fields of these names, each once (a field may feed several columns)."""
    return T.StructType([T.StructField(n, T.StringType()) for n in dict.fromkeys(names)])


RECORD_SCHEMA = T.StructType(
    [
        T.StructField("partition", T.LongType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("value", T.StringType()),
        T.StructField("op", T.StringType()),
        T.StructField("payload", T.StringType()),
        T.StructField("schema", T.StringType()),
        T.StructField("__deleted", T.StringType()),
    ]
)


def _unwrap_schema(json_text: Column) -> Column:
    """{"schema": {...}, "payload": X} -> X (detected per message), else the message."""
    parsed = F.from_json(json_text, _strings("schema", "payload"))
    return F.when(parsed["schema"].startswith("{"), parsed["payload"]).otherwise(json_text)


def event_lines(lines: DataFrame) -> DataFrame:
    """Lines of Kafka records -> value, key, partition, offset, timestamp. A line is either
    our record wrapper {"partition","offset","timestamp","key","value"} or the message
    value itself (the S3 sink writes values only: no timestamp). Without an explicit offset, a record's offset is the file's start
    offset plus the number of records of its partition before it in the file: exact for
    the S3 sink layout, and the offsets `ingest` would assign to the same file."""
    rec = F.from_json(F.col("line"), RECORD_SCHEMA)
    is_wrapper = (
        rec["op"].isNull() & rec["payload"].isNull() & rec["__deleted"].isNull() & (F.col("line").rlike(r'^\s*\{.*"value"\s*:'))
    )
    partition = F.coalesce(F.when(is_wrapper, rec["partition"]), F.col("line_partition"), F.lit(0)).cast("long")
    with_partition = lines.select(
        "*",
        F.when(is_wrapper, rec["value"]).otherwise(F.col("line")).alias("value"),
        F.when(is_wrapper, rec["key"]).alias("key"),
        F.when(is_wrapper, rec["offset"]).alias("explicit_offset"),
        F.when(is_wrapper, epoch_ms(rec["timestamp"])).alias("_kafka_timestamp"),
        partition.alias("_kafka_partition"),
    )
    in_file = Window.partitionBy("file", "_kafka_partition").orderBy("pos")
    offset = F.coalesce(F.col("explicit_offset"), F.col("start_offset") + F.row_number().over(in_file) - 1)
    return with_partition.select(
        F.col("line").alias("_record"),
        "value",
        "key",
        "_kafka_partition",
        offset.cast("long").alias("_kafka_offset"),
        "_kafka_timestamp",
    )


def debezium_events(records: DataFrame, table: TableConfig) -> DataFrame:
    """Kafka records (value/key JSON text, partition, offset, optionally the Kafka
    timestamp) -> normalised events, for the table's `format` (full envelope with or
    without the schema wrapper, or unwrapped)."""
    known = "_kafka_timestamp" in records.columns
    kafka_timestamp = F.col("_kafka_timestamp") if known else F.lit(None).cast(T.TimestampNTZType())
    value = F.col("value")
    valid_json = F.get_json_object(value, "$").isNotNull() | (F.trim(value) == "null") | value.isNull()
    env = _unwrap_schema(value)
    key_env = _unwrap_schema(F.col("key"))
    pos_fields = POSITION_FIELDS.get(table.order_by, ())
    if table.format == "debezium":
        e = F.from_json(
            env,
            T.StructType(
                [
                    T.StructField("op", T.StringType()),
                    T.StructField("before", T.StringType()),
                    T.StructField("after", T.StringType()),
                    T.StructField("source", _strings("ts_ms", *pos_fields)),
                ]
            ),
        )
        op = e["op"]
        image = F.when(op == "d", e["before"]).otherwise(e["after"])
        src = e["source"]
        source_ts_text = src["ts_ms"]
        position_args = [src[f] for f in pos_fields]
        tombstone_deletes = False
    elif table.format == "row":
        # A query-based topic: the row as polled, an upsert; no source block, no deletes.
        op = F.when(F.trim(env).startswith("{"), F.lit("r"))
        image = env
        source_ts_text = F.lit(None).cast("string")
        position_args = []
        tombstone_deletes = False
    else:
        e = F.from_json(env, _strings("__deleted", "__op", "__source_ts_ms", *["__" + f for f in pos_fields]))
        op = F.when(e["__deleted"] == "true", F.lit("d")).otherwise(F.coalesce(e["__op"], F.lit("u")))
        op = F.when(env.isNotNull(), op)
        image = env
        source_ts_text = e["__source_ts_ms"]
        position_args = [e["__" + f] for f in pos_fields]
        tombstone_deletes = True

    if table.order_column is not None:
        position = column_position(F.from_json(image, _strings(table.order_column.name))[table.order_column.name])
    elif pos_fields:
        position = POSITIONS[table.order_by](*position_args)
    else:
        position = F.lit(None).cast("string")

    names = [c.name for c in table.columns]
    img = F.from_json(image, _strings(*names))
    key_img = F.from_json(key_env, _strings(*table.primary_key))
    fields = []
    for col in table.columns:
        raw = img[col.name]
        if col.name in table.primary_key:
            raw = F.coalesce(raw, key_img[col.name])
        fields.append(raw.alias(raw_name(col)))
        exact = exact_value(image, col.name, col)
        if exact is not None:
            if col.name in table.primary_key:
                exact = F.coalesce(exact, exact_value(key_env, col.name, col))
            fields.append(exact.alias(exact_name(col)))

    is_object = F.trim(env).startswith("{")
    reason = (
        F.when(~valid_json, F.lit(str(Reason.NOT_JSON)))
        .when(value.isNull(), F.lit("tombstone"))
        .when(~is_object, F.lit(str(Reason.NOT_OBJECT)))
        .when(op.isNull(), F.lit(str(Reason.NO_OP)))
        .when(op == "t", F.lit("truncate event: not applied by a backfill"))
        .when(~op.isin("c", "r", "u", "d"), F.concat(F.lit('unknown op "'), F.substring(op, 1, 64), F.lit('"')))
    )
    if tombstone_deletes:
        # debezium-unwrap: a tombstone with a key is the delete (as in the procedure).
        op = F.when(value.isNull(), F.lit("d")).otherwise(op)
        reason = F.when(value.isNull(), F.lit(None).cast("string")).otherwise(reason)
    return records.select(
        *fields,
        op.alias("_op"),
        epoch_ms(source_ts_text).alias("_source_ts"),
        position.alias("_source_pos"),
        "_kafka_partition",
        "_kafka_offset",
        kafka_timestamp.alias("_kafka_timestamp"),
        reason.alias("_reason"),
        "_record",
    )
