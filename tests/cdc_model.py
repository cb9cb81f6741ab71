"""A plain-Python reference model of what a topic's records must make of a target table.

Derived from the procedure contract (README, "How a sync works") and the streaming
relation's columns, not from the generated SQL, so tests can compare the real procedure
against it:

    expected_rows(records, table)       -> {key tuple: {target column: value}}
    expected_quarantine(records, table) -> {(partition, offset): (reason kind, field)}
    TopicModel(table).add(records).rows() / .quarantine()   (the same, incrementally)

`records` are the Kafka records of one topic, as `ingest` reads them: mappings with
`partition`, `offset` (both required here), `key` and `value`. A `value` (or `key`) is the
record as Kafka holds it: None (a tombstone), `bytes`/`str` (the raw message text, which
may or may not be JSON), or an already decoded JSON value (dict, list, number, ...).
`table` is a `sync.config.TableConfig`.

The rules, in order (contract steps 3-5):
- a value that is not JSON is quarantined ("not-json"); so is JSON PostgreSQL's jsonb
  cannot store (NUL characters, lone surrogates), nesting deeper than a parser's stack,
  and the non-standard NaN/Infinity;
- the `{"schema", "payload"}` wrapper (schemas.enable=true) is removed, per message;
- null value: a tombstone, skipped (format "debezium-unwrap": a delete by the Kafka key);
- not an object ("not-object"), no `op` ("no-op"), an op other than c/r/u/d/t
  ("unknown-op"): quarantined; `t` (truncate) is skipped (on_truncate = "ignore");
- the row image is `after` (`before` for `d`); a c/r/u event whose `after` is not an
  object has no row to apply ("no-image"); each key field comes from the image, else
  from the Kafka key; a key field missing or not convertible: ("key", field);
- a non-key field present and not null that does not convert to its column type:
  ("field", field) (a missing field is NULL; deletes are not checked);
- per key, the latest event wins: by source position when `order_by` is a source order
  (events without a position rank below those with one), then Kafka order: offset within
  a partition; across partitions the newest `timestamp` (ms) of the record's partition up
  to it, then partition, then offset;
  that also makes replays and older positions no-ops (step 5);
- hard mode: a winning delete removes the key; soft mode: the row stays with
  `_deleted = True` and its last values: each field from the delete's before image where
  it is not null, else from the latest upsert of the key before the delete (a key-only
  image, as PostgreSQL's REPLICA IDENTITY DEFAULT sends it, keeps the row's values).

Preconditions (outside them the result legitimately depends on batch boundaries): with
`order_by = "kafka"`, a key's records in two partitions (a topic whose partition count
grew) carry timestamps, and a partition's clock never steps back across a batch boundary
(the sync takes the newest timestamp of the batch only); with a source order, every applicable event carries a well-formed position and two
different events of one key never share a position (replayed duplicates are the same
event). Conversions are modelled for the integer types, decimal, real/double, boolean
and varchar; other types (and semantic types) raise `Unmodelled`.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from sync.config import ColumnConfig, TableConfig
from sync.sql.types import INTEGER_BOUNDS, SqlType, parse_type

_parse_type = functools.lru_cache(maxsize=None)(parse_type)

__all__ = [
    "NOT_JSON",
    "TopicModel",
    "Unmodelled",
    "classify",
    "decode",
    "expected_quarantine",
    "expected_rows",
    "position",
    "source_block",
    "unwrap_schema",
]

NUMERIC_TEXT = re.compile(r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?\s*$")
# Magnitudes a real/double column holds: largest, and smallest normal (beyond them a
# value does not convert: it is quarantined, never rounded to infinity or zero).
FLOAT_RANGE = {
    "real": (Decimal("3.4028234e38"), Decimal("1.1754944e-38")),
    "double": (Decimal("1.7976931348623157e308"), Decimal("2.2250738585072014e-308")),
}
NOT_JSON = object()  # a value the stream keeps raw


# Debezium's `unavailable.value.placeholder` (default): a PostgreSQL column value stored out
# of line (TOAST) that an update left unchanged is not in the replication message; "Debezium
# cannot safely provide the column value ... it returns a placeholder value" (Debezium
# PostgreSQL connector, "Toasted values": under REPLICA IDENTITY DEFAULT, for UPDATE events).
UNAVAILABLE = "__debezium_unavailable_value"


class Unmodelled(ValueError):
    """The input is outside what this model describes (see the module docstring)."""


class _NotConvertible(Exception):
    pass


# ---- the streaming relation: what is JSON --------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(obj: Any) -> bool:
    """jsonb holds neither NUL characters nor lone surrogates, in keys or strings."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if UNSTORABLE.search(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def decode(value: Any) -> Any:
    """A Kafka value/key as the stream stores it: decoded JSON, None, or NOT_JSON."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, str)):
        raw = bytes(value) if not isinstance(value, str) else value.encode("utf-8", "surrogatepass")
        try:
            obj = json.loads(raw.decode("utf-8"), parse_float=Decimal, parse_int=_parse_int, parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return NOT_JSON
    else:
        # Already decoded: normalise numbers as a JSON reader would see them.
        try:
            obj = json.loads(json.dumps(value), parse_float=Decimal, parse_int=_parse_int, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return NOT_JSON
    return obj if _storable(obj) else NOT_JSON


def _parse_int(text: str) -> int:
    return int(text)


def unwrap_schema(obj: Any) -> Any:
    """The payload of the `{"schema", "payload"}` wrapper (schemas.enable=true), else `obj`."""
    if isinstance(obj, dict) and isinstance(obj.get("schema"), dict):
        return obj.get("payload")
    return obj


# ---- conversions ---------------------------------------------------------------------------


def _number(j: Any) -> Decimal:
    if isinstance(j, bool) or j is None:
        raise _NotConvertible
    if isinstance(j, int):
        return Decimal(j)
    if isinstance(j, Decimal):
        return j
    if isinstance(j, str) and NUMERIC_TEXT.match(j):
        return Decimal(j.strip())
    raise _NotConvertible


def convert(j: Any, t: SqlType) -> Any:
    """A JSON value as a column of type `t`; None for JSON null; _NotConvertible otherwise."""
    if j is None:
        return None
    if t.is_integer:
        n = _number(j)
        lo, hi = INTEGER_BOUNDS[t.family]
        if n != n.to_integral_value() or not lo <= n <= hi:
            raise _NotConvertible
        return int(n)
    if t.family == "decimal":
        n = _number(j)
        try:
            rounded = n.quantize(Decimal(1).scaleb(-(t.scale or 0)), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            raise _NotConvertible from None
        if abs(rounded) >= Decimal(10) ** ((t.precision or 18) - (t.scale or 0)):
            raise _NotConvertible
        return rounded
    if t.family in ("real", "double"):
        n = _number(j)
        largest, smallest = FLOAT_RANGE[t.family]
        if abs(n) > largest or (n != 0 and abs(n) < smallest):
            raise _NotConvertible
        if t.family == "real":
            return struct.unpack("f", struct.pack("f", float(n)))[0]
        return float(n)
    if t.family == "boolean":
        if isinstance(j, bool):
            return j
        if isinstance(j, int) and j in (0, 1):
            return j == 1
        raise _NotConvertible
    if t.family == "varchar":
        if isinstance(j, bool):
            text = "true" if j else "false"
        elif isinstance(j, (int, str)):
            text = str(j)
        else:
            raise Unmodelled(f"text rendering of {type(j).__name__} values into {t}")
        if len(text.encode("utf-8")) > t.byte_limit:
            raise _NotConvertible
        return text
    raise Unmodelled(f"conversion to {t}")


def _column(j: Any, col: ColumnConfig) -> Any:
    if col.semantic is not None:
        raise Unmodelled(f"semantic type {col.semantic}")
    return convert(j, _parse_type(col.type))


# ---- positions -----------------------------------------------------------------------------


def _text(j: Any) -> str | None:
    if j is None:
        return None
    if isinstance(j, str):
        return j
    if isinstance(j, int) and not isinstance(j, bool):
        return str(j)
    return json.dumps(j, default=str)


def _digits(text: str | None) -> int:
    if text is None or text == "":
        return 0
    if not text.isdigit():
        raise Unmodelled(f"position part {text!r}")
    return int(text)


def source_block(env: dict, table: TableConfig) -> tuple[dict, str] | None:
    """Where an event's source fields are, and their name prefix: the `source` block, or
    the row itself with `__` names (format "debezium-unwrap"); None when there is none."""
    unwrap = table.format == "debezium-unwrap"
    src = env if unwrap else env.get("source")
    return (src, "__" if unwrap else "") if isinstance(src, dict) else None


def position(env: dict, table: TableConfig) -> tuple[int, ...] | None:
    """The source position of an event (None: none), per `order_by` and `format`."""
    block = source_block(env, table)
    if block is None:
        return None
    src, prefix = block
    if table.order_by == "mysql-binlog":
        file, pos = _text(src.get(prefix + "file")), _text(src.get(prefix + "pos"))
        if file is None or pos is None:
            return None
        m = re.search(r"([0-9]+)$", file)
        return (_digits(m.group(1) if m else None), _digits(pos), _digits(_text(src.get(prefix + "row"))))
    if table.order_by == "postgres-lsn":
        seq, lsn = _text(src.get(prefix + "sequence")), _text(src.get(prefix + "lsn"))
        commit = change = None
        if seq is not None:
            parts = json.loads(seq) if seq.startswith("[") else None
            if isinstance(parts, list) and len(parts) == 2:
                commit, change = _text(parts[0]), _text(parts[1])
        change = change or lsn
        if change is None:
            return None
        return (_digits(commit), _digits(change))
    if table.order_by in ("sqlserver-lsn", "db2-lsn"):
        # TxLogPosition.compareTo: commit LSN, then change LSN; the SQL Server page: "The
        # event_serial_no field differentiates events that have the same commit and change
        # LSN". A snapshot read (no change LSN) reads at the max LSN, the newest captured
        # commit, and streaming resumes after it ("LSN should be increased for the first
        # run only immediately after snapshot completion", the SQL Server and Db2
        # streaming sources): the read follows every change of its commit.
        commit = _lsn(_text(src.get(prefix + "commit_lsn")), table.order_by)
        if commit is None:
            return None
        change = _lsn(_text(src.get(prefix + "change_lsn")), table.order_by)
        change = AFTER_COMMIT if change is None else change
        if table.order_by == "db2-lsn":
            return (commit, change)
        return (commit, change, _digits(_text(src.get(prefix + "event_serial_no"))))
    if table.order_by == "oracle-scn":
        # Transactions in commit order (`commit_scn`); a snapshot row has none and reads
        # at its `scn`; within a transaction, SCN then the event's index (`txSeq`).
        scn = _text(src.get(prefix + "scn"))
        if scn is None:
            return None
        commit = _text(src.get(prefix + "commit_scn"))
        return (_digits(commit or scn), _digits(scn), _digits(_text(src.get(prefix + "txSeq"))))
    return None


# A change LSN above any of 16 bytes: a snapshot read's, after its commit's changes.
AFTER_COMMIT = 1 << 128


def _lsn(text: str | None, order_by: str) -> int | None:
    """An LSN as the number its bytes spell (Debezium's `Lsn.toString()`: hex bytes, ':'
    after bytes 4 and 8; SQL Server 10 bytes, Db2 16, or 10 as in the Db2 page's examples)."""
    if text is None:
        return None
    last = "4" if order_by == "sqlserver-lsn" else "4,16"
    if not re.fullmatch(rf"[0-9A-Fa-f]{{8}}:[0-9A-Fa-f]{{8}}:[0-9A-Fa-f]{{{last}}}", text):
        raise Unmodelled(f"LSN {text!r}")
    return int(text.replace(":", ""), 16)


# ---- classification ------------------------------------------------------------------------

Decision = tuple[str, Any]  # ("upsert"|"delete", (key, row)) | ("quarantine", (kind, field)) | ("skip", why)


def classify(record: Mapping[str, Any], table: TableConfig) -> Decision:
    """What one record is: an upsert or delete (with its key and row), a quarantine (with
    the reason kind and field), or skipped (tombstone, truncate)."""
    value = decode(record.get("value"))
    if value is NOT_JSON:
        return "quarantine", ("not-json", None)
    env = unwrap_schema(value)
    key_env = unwrap_schema(decode(record.get("key")))
    key_env = key_env if isinstance(key_env, dict) else {}
    unwrap = table.format == "debezium-unwrap"

    def key_of(image: Any) -> tuple[tuple, str | None]:
        image = image if isinstance(image, dict) else {}
        values = []
        for col in table.key_columns:
            found = None
            for source in (image, key_env):
                try:
                    found = _column(source.get(col.name), col)
                except _NotConvertible:
                    found = None
                if found is not None:
                    break
            if found is None:
                return (), col.name
            values.append(found)
        return tuple(values), None

    if env is None:
        if unwrap:
            key, missing = key_of({})
            if missing is None:
                return "delete", (key, {}, None)
        return "skip", "tombstone"
    if not isinstance(env, dict):
        return "quarantine", ("not-object", None)
    if unwrap:
        op = "d" if _text(env.get("__deleted")) == "true" else (_text(env.get("__op")) or "u")
        image = env
    else:
        op = _text(env.get("op"))
        if op is None:
            return "quarantine", ("no-op", None)
        image = env.get("before") if op == "d" else env.get("after")
    if op == "t":
        if table.on_truncate != "ignore":
            raise Unmodelled("on_truncate = 'delete'")
        return "skip", "truncate"
    if op not in ("c", "r", "u", "d"):
        return "quarantine", ("unknown-op", None)
    if op != "d" and not isinstance(image, dict):
        return "quarantine", ("no-image", None)
    key, missing = key_of(image)
    if missing is not None:
        return "quarantine", ("key", missing)
    image = image if isinstance(image, dict) else {}
    row: dict[str, Any] = {c.target_name: v for c, v in zip(table.key_columns, key)}
    for col in table.value_columns:
        if image.get(col.name) == UNAVAILABLE and _parse_type(col.type).family in ("char", "varchar"):
            row[col.target_name] = UNAVAILABLE  # the value is unchanged (TOAST): the previous one
            continue
        try:
            row[col.target_name] = _column(image.get(col.name), col)
        except _NotConvertible:
            if op != "d":
                return "quarantine", ("field", col.name)
            row[col.target_name] = None
    pos = position(env, table) if table.order_by != "kafka" else None
    return ("delete" if op == "d" else "upsert"), (key, row, pos)


def _order(record: Mapping[str, Any], pos: tuple | None, table: TableConfig, time: int) -> tuple:
    kafka = (time, int(record["partition"]), int(record["offset"]))
    if table.order_by == "kafka":
        return kafka
    return (pos is not None, pos or (), *kafka)


def _first(event: tuple) -> tuple:
    return event[0]


class TopicModel:
    """The model fed incrementally: `add` records (each is classified once), then read
    `rows()` / `quarantine()` for everything added so far. `expected_rows` and
    `expected_quarantine` are the one-shot forms."""

    def __init__(self, table: TableConfig):
        self.table = table
        self._events: dict[tuple, list[tuple[tuple, str, dict]]] = {}
        self._quarantine: dict[tuple[int, int], tuple[str, str | None]] = {}
        self._time: dict[int, int] = {}  # partition -> its newest timestamp so far (ms)

    def add(self, records: Iterable[Mapping[str, Any]]) -> TopicModel:
        for record in records:
            action, detail = classify(record, self.table)
            partition = int(record["partition"])
            time = self._time[partition] = max(self._time.get(partition, 0), record.get("timestamp") or 0)
            if action in ("upsert", "delete"):
                key, row, pos = detail
                self._events.setdefault(key, []).append((_order(record, pos, self.table, time), action, row))
            elif action == "quarantine":
                self._quarantine[(int(record["partition"]), int(record["offset"]))] = detail
        return self

    def rows(self) -> dict[tuple, dict[str, Any]]:
        table = self.table
        soft = table.delete_mode == "soft"
        out: dict[tuple, dict[str, Any]] = {}
        for key, evs in self._events.items():
            order, action, row = max(evs, key=_first)
            if action == "upsert":
                out[key] = {**row, "_deleted": False} if soft else dict(row)
            elif soft:
                kept = dict(row) or {c.target_name: v for c, v in zip(table.key_columns, key)}
                earlier = [e for e in evs if e[1] == "upsert" and e[0] < order]
                last = max(earlier, key=_first)[2] if earlier else {}
                for col in table.value_columns:
                    if kept.get(col.target_name) is None:
                        kept[col.target_name] = last.get(col.target_name)
                out[key] = {**{c.target_name: None for c in table.columns}, **kept, "_deleted": True}
        return out

    def quarantine(self) -> dict[tuple[int, int], tuple[str, str | None]]:
        return dict(self._quarantine)


def expected_rows(records: Iterable[Mapping[str, Any]], table: TableConfig) -> dict[tuple, dict[str, Any]]:
    """The target table after every record was synced: {key tuple: {column: value}} with
    the table's data columns by target name (plus `_deleted` in soft mode)."""
    return TopicModel(table).add(records).rows()


def expected_quarantine(
    records: Iterable[Mapping[str, Any]], table: TableConfig
) -> dict[tuple[int, int], tuple[str, str | None]]:
    """{(partition, offset): (kind, field)} of every record the procedure must quarantine;
    kind is one of not-json, not-object, no-op, unknown-op, no-image, key, field."""
    return TopicModel(table).add(records).quarantine()
