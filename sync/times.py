"""Times given on the command line: ISO 8601, a zone converted to UTC, returned without
one (the warehouse stores UTC in `timestamp` columns). Spark-free: the backfill job and
every command use it."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_utc(text: str | None, option: str) -> datetime | None:
    """`text` as a naive UTC time, None when empty; a ValueError names `option`."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{option} {text!r} is not an ISO 8601 time like 2024-05-01T00:00:00Z") from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value
