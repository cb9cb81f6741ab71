"""Rows of the local stream relation in PostgreSQL's binary COPY format, built in bulk.

`ingest` writes one row per Kafka record; psycopg's row-by-row adaptation, and the
server's parsing of the text format (timestamps, bytea in hex), cost more than reading
and parsing the events file. The binary format carries the values as the server stores
them. PostgreSQL documents it (COPY, "Binary Format"): "The file header consists of 15
bytes of fixed fields, followed by a variable-length header extension area. The fixed
fields are: Signature -- 11-byte sequence PGCOPY\\n\\377\\r\\n\\0 ... Flags field -- 32-bit
integer bit mask ... Header extension area length -- 32-bit integer"; "Each tuple begins
with a 16-bit integer count of the number of fields in the tuple ... Then, repeated for
each field in the tuple, there is a 32-bit length word followed by that many bytes of
field data ... As a special case, -1 indicates a NULL field value"; "The file trailer
consists of a 16-bit integer word containing -1". A value's bytes are its type's
binary send format: `bigint` 8 bytes, big-endian; `timestamp` microseconds since
2000-01-01 as a bigint; `bytea` and `char(1)` their bytes; `jsonb` a version byte (1),
then the JSON text in UTF-8.
"""

from __future__ import annotations

import struct
from datetime import datetime, timedelta

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
NULL = struct.pack(">i", -1)
JSONB_VERSION = b"\x01"
POSTGRES_EPOCH_MS = 946_684_800_000  # 2000-01-01 00:00:00 in Unix epoch milliseconds
_POSTGRES_EPOCH = datetime(2000, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
# Field count, partition and offset (bigint), the timestamp type (char(1)).
_LEAD = struct.Struct(">hiqiqi")
_TIMESTAMP = struct.Struct(">iq")
_LENGTH = struct.Struct(">i")


def timestamp_ms(ms: int) -> bytes:
    """A `timestamp` field of Unix epoch milliseconds (exact: no float on the way)."""
    return _TIMESTAMP.pack(8, (ms - POSTGRES_EPOCH_MS) * 1000)


def timestamp(value: datetime) -> bytes:
    """A `timestamp` field of a naive datetime."""
    return _TIMESTAMP.pack(8, (value - _POSTGRES_EPOCH) // _MICROSECOND)


def data(value: bytes | None) -> bytes:
    """A `bytea` field (None: NULL)."""
    return NULL if value is None else _LENGTH.pack(len(value)) + value


def jsonb(text: str | None) -> bytes:
    """A `jsonb` field of JSON text (None: NULL); the server parses the text."""
    if text is None:
        return NULL
    encoded = text.encode("utf-8")
    return _LENGTH.pack(len(encoded) + 1) + JSONB_VERSION + encoded


def lead(fields: int, partition: int, offset: int, timestamp_type: str) -> bytes:
    """A tuple's field count, then its partition, offset and timestamp type fields."""
    return _LEAD.pack(fields, 8, partition, 8, offset, 1) + timestamp_type.encode("ascii")
