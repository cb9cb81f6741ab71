"""Record values as the local stream stores them: exact JSON for the jsonb column, or the
raw bytes when a value is not JSON PostgreSQL can store (the procedure quarantines those).

A value `ingest` has already parsed with its line is written out once and checked, not
parsed again (`stored_json`); a value given as text is parsed (`parse_value`).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any


@dataclass
class ParsedValue:
    payload: str | None  # JSON text for the jsonb column, or None
    raw: bytes | None  # raw bytes when the value is not (storable) JSON


_NUMBER_MARKER = uuid.uuid4().hex  # random per process: no input can carry it
_MARKED_NUMBER = re.compile(f'"{_NUMBER_MARKER}([^"]*)"')


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class _Numbers(threading.local):
    exponent = False  # a number written with an exponent was read since it was last reset


NUMBERS = _Numbers()


def _decimal(literal: str) -> Decimal:
    """A number with a fraction or an exponent (the JSON scanner's floats), exact."""
    if "e" in literal or "E" in literal:
        NUMBERS.exponent = True
    return Decimal(literal)


DECODER = json.JSONDecoder(parse_float=_decimal, parse_constant=_reject_constant)


def loads_exact(text: str) -> Any:
    """Strict JSON (no NaN/Infinity), with numbers kept exact: a float would round
    12345678901234567890.12 and turn 1e999 into Infinity, which is not JSON."""
    return DECODER.decode(text)


def _marked_number(o: Any) -> str:
    if not isinstance(o, Decimal):
        raise TypeError(f"{type(o).__name__} is not JSON")
    return f"{_NUMBER_MARKER}{o}"


_ENCODERS = {
    separators: json.JSONEncoder(separators=separators, ensure_ascii=False, default=_marked_number)
    for separators in (None, (",", ":"))
}


def dumps_exact(value: Any, separators: tuple[str, str] | None = None) -> str:
    """JSON text of a `loads_exact` result: Decimals written as the numbers they are."""
    encoder = _ENCODERS.get(separators) or json.JSONEncoder(separators=separators, ensure_ascii=False, default=_marked_number)
    text = encoder.encode(value)
    return _MARKED_NUMBER.sub(r"\1", text) if _NUMBER_MARKER in text else text


def to_bytes(value: Any) -> bytes | None:
    """A record's key or value as the bytes Kafka would hold."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return dumps_exact(value, separators=(",", ":")).encode("utf-8", "surrogatepass")


# jsonb holds a number as numeric: "up to 131072 digits before the decimal point; up to
# 16383 digits after the decimal point" (PostgreSQL, Numeric Types). JSON has no limit.
NUMERIC_INTEGER_DIGITS, NUMERIC_FRACTION_DIGITS = 131072, 16383
# A text shorter than the fraction limit holds no number past either limit unless one is
# written with an exponent (str() of a Decimal writes "1E+131072", "1E-20000"): the walk
# over the parsed value is needed only then.
_EXPONENTS = ("E+", "E-")


def _numbers_fit_jsonb(value: Any) -> bool:
    """Every number of a `loads_exact` result is one jsonb can hold (an integer of more
    digits than numeric holds is refused by the JSON parser already)."""
    if isinstance(value, Decimal):
        fraction_digits = -int(value.as_tuple().exponent)
        return fraction_digits <= NUMERIC_FRACTION_DIGITS and (value.is_zero() or value.adjusted() < NUMERIC_INTEGER_DIGITS)
    if isinstance(value, dict):
        return all(_numbers_fit_jsonb(v) for v in value.values())
    if isinstance(value, list):
        return all(_numbers_fit_jsonb(v) for v in value)
    return True


def _storable(parsed: Any, text: str) -> bool:
    """PostgreSQL's jsonb cannot hold NUL characters, lone surrogates (from \\ud800
    escapes) or a number beyond numeric's range."""
    try:
        text.encode("utf-8")
    except UnicodeError:
        return False
    if "\\u0000" in text or "\x00" in text:
        return False
    if len(text) < NUMERIC_FRACTION_DIGITS and not any(e in text for e in _EXPONENTS):
        return True
    return _numbers_fit_jsonb(parsed)


def parse_value(value: bytes | None) -> ParsedValue:
    """What the streaming MV stores: parsed JSON, or the raw bytes when it does not parse
    or cannot be stored."""
    if value is None:
        return ParsedValue(None, None)
    try:
        parsed = loads_exact(value.decode("utf-8"))
        dumped = dumps_exact(parsed)
    except (UnicodeError, ValueError, RecursionError):
        return ParsedValue(None, value)
    return stored_json(parsed, dumped, value)


def parsed_json(parsed: Any) -> tuple[bytes | None, ParsedValue]:
    """(Kafka bytes, stored form) of a key or value parsed with its line (`loads_exact`):
    written out once, not parsed again; a string is the record's raw bytes."""
    if parsed is None or isinstance(parsed, str):
        raw = to_bytes(parsed)
        return raw, parse_value(raw)
    text = dumps_exact(parsed, separators=(",", ":"))
    raw = text.encode("utf-8", "surrogatepass")
    return raw, stored_json(parsed, text, raw)


def plain_json(parsed: Any, text: str, exponent: bool) -> str | None:
    """The text an object or array was parsed from (`loads_exact`; `exponent`: a number in
    it was written with one, `NUMBERS`), when jsonb stores it exactly as it stores the
    value written back out (`dumps_exact`), else None.

    So it is when the text has no backslash, no exponent and fewer characters than
    numeric's fraction digits: its strings then hold no escape, hence no NUL and no lone
    surrogate (a raw control character is not JSON), and every number has fewer digits
    than numeric holds; jsonb ignores whitespace, keeps the last of a duplicated name as
    the parse does, and reads a number's digits and scale from "0.0000001" as from the
    "1E-7" a Decimal writes. The value is then storable (`stored_json`)."""
    if exponent or not isinstance(parsed, (dict, list)) or "\\" in text or len(text) >= NUMERIC_FRACTION_DIGITS:
        return None
    return text


def stored_json(parsed: Any, text: str, value: bytes) -> ParsedValue:
    """The stored form of a value parsed (`loads_exact`) from the bytes `value` and
    written back as `text` (`dumps_exact`)."""
    return ParsedValue(text, None) if _storable(parsed, text) else ParsedValue(None, value)
