"""Record isolation: the second line of defence against a record that makes the engine
raise.

Every expression the procedure evaluates over event data is meant to be total, so a bad
record is quarantined by the procedure itself. For what no one foresaw, a CALL that fails
with a *data* error (not a lock timeout, a serialization conflict or a lost connection)
is retried on prefixes of the pending records: the procedure takes a limit of records to
read, always a prefix of every partition in (refresh_time, partition, offset) order. A
prefix that applies is committed (progress is kept); the first record of a failing
prefix of one is the culprit. It goes to the quarantine with the engine's own error text
(`isolate_record_<table>(reason)`, which also moves the watermark past it), and the rest
of the batch is applied in the same run.

Pure logic over three callables, so the CLI (a direct connection) and the Lambda (the
Data API) run the same search.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# SQLSTATE classes of errors that depend on the data (PostgreSQL and Redshift): data
# exception, integrity constraint violation, program limit exceeded (an index entry too
# large). Redshift raises many data errors as XX000 ("Invalid digit, Value ..."); the
# Data API gives no SQLSTATE at all: then the words decide.
DATA_SQLSTATE_CLASSES = ("22", "23", "54")
NOT_DATA_WORDS = re.compile(
    r"serializ|\b1023\b|deadlock|lock|timeout|timed out|cancel|terminat|connection|network|shutdown|"
    r"does not exist|permission denied|syntax error|not authorized|out of memory|disk full|resource",
    re.I,
)
MAX_ISOLATED = 20  # records isolated per table and run; past that the table fails
SAME_ERROR_LIMIT = 10  # the same error for more records than this in a row: not one record's fault


def is_data_error(message: str, sqlstate: str | None = None) -> bool:
    """Whether a failed CALL failed because of a record (and may be isolated)."""
    if sqlstate and sqlstate[:2] in DATA_SQLSTATE_CLASSES:
        return True
    if sqlstate and sqlstate != "XX000":
        return False
    return not NOT_DATA_WORDS.search(message)


def _shape(message: str) -> str:
    """The error without the values it names (quoted text, numbers)."""
    return re.sub(r"\d+", "#", re.sub(r"'[^']*'|\"[^\"]*\"", "?", message.splitlines()[0] if message else ""))


@dataclass
class Isolation:
    """What a run did to get past records the engine could not apply."""

    isolated: list[str] = field(default_factory=list)  # the engine's error of each isolated record
    calls: int = 0  # bounded calls made (those that applied a prefix included)
    gave_up: str | None = None  # why the search stopped with records still failing


class CallFailed(Exception):
    """A bounded call failed with a data error (its text is the message)."""


def _first_failing(limit: int, call: Callable[[int], None], result: Isolation) -> str | None:
    """Bisect the first `limit` pending records, which hold a failing one: the prefixes
    before it are applied (and committed); returns the error of the first pending record
    then, or None when it applies on its own (the failure has passed)."""
    while limit > 1:
        half = limit // 2
        result.calls += 1
        try:
            call(half)
        except CallFailed:
            limit = half
        else:
            limit -= half
    result.calls += 1
    try:
        call(1)
    except CallFailed as exc:
        return str(exc)
    return None


def isolate(
    call: Callable[[int], None],
    pending: Callable[[], int],
    quarantine_first: Callable[[str], None],
    *,
    max_isolated: int = MAX_ISOLATED,
    max_calls: int = 400,
) -> Isolation:
    """After a full call failed with a data error: find and quarantine the failing records
    one by one, and apply everything else.

    `call(n)` runs the procedure on the first n pending records (0: none) and raises
    CallFailed on a data error (other errors propagate: the table fails as usual);
    `pending()` counts the pending records; `quarantine_first(error)` quarantines the
    first pending one."""
    result = Isolation()
    # A call that reads no record and still fails: the procedure fails, not a record.
    result.calls += 1
    try:
        call(0)
    except CallFailed as exc:
        result.gave_up = f"the procedure fails with no record read, so not because of a record ({exc})"
        return result
    same_in_a_row = 0
    while (limit := pending()) > 0:
        if result.calls >= max_calls:
            result.gave_up = f"no end after {max_calls} bounded calls"
            return result
        error = _first_failing(limit, call, result)
        if error is not None:
            repeated = bool(result.isolated) and _shape(result.isolated[-1]) == _shape(error)
            same_in_a_row = same_in_a_row + 1 if repeated else 1
            if same_in_a_row > SAME_ERROR_LIMIT:
                result.gave_up = (
                    f"the same error for more than {SAME_ERROR_LIMIT} records in a row (not one record's fault): {error}"
                )
                return result
            if len(result.isolated) >= max_isolated:
                result.gave_up = f"more than {max_isolated} records fail: {error}"
                return result
            quarantine_first(error)
            result.isolated.append(error)
        # Everything after it, in one call; on another failure the search starts again.
        if (limit := pending()) == 0:
            break
        result.calls += 1
        try:
            call(limit)
        except CallFailed:
            continue
        break
    return result
