"""A JSON object's members, each with the text of its value: `ingest` stores a record's
value as the input line wrote it, when that text is one jsonb reads as it would read the
value written back out (sync/local/values.py, `plain_json`), instead of writing it again.

The walk is the grammar of an object (RFC 8259, section 4: "An object structure is
represented as a pair of curly brackets surrounding zero or more name/value pairs ... A
single colon comes after each name, separating the name from the value. A single comma
separates a value from a following name"), with whitespace as JSON defines it; each name
and value is read by the standard library's own scanner, with the decoder's options
(`loads_exact`), so a walk that succeeds reads exactly what `loads_exact` reads. Whatever
the walk does not read (not an object, malformed) is left to `loads_exact`.
"""

from __future__ import annotations

import re
from json.decoder import scanstring
from typing import Any

from sync.local.values import DECODER, NUMBERS

# JSON's insignificant whitespace (json.decoder.WHITESPACE), and what may follow it: the end
# of an empty object; a name without escapes and its colon; a separator or the end.
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_EMPTY = re.compile(r"[ \t\n\r]*}")
_NAME = re.compile(r'[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
_AFTER = re.compile(r"[ \t\n\r]*([,}])")


def _name(text: str, i: int) -> tuple[str, int] | None:
    """A member's name at `i` (after whitespace), and where its value starts."""
    plain = _NAME.match(text, i)
    if plain:
        return plain.group(1), plain.end()
    i = _WHITESPACE.match(text, i).end()
    if text[i : i + 1] != '"':
        return None
    name, i = scanstring(text, i + 1, True)
    i = _WHITESPACE.match(text, i).end()
    return (name, _WHITESPACE.match(text, i + 1).end()) if text[i : i + 1] == ":" else None


def members(text: str) -> tuple[dict[str, Any], dict[str, tuple[str, bool]]] | None:
    """(the object `text` holds, each member's value as text and whether a number in it is
    written with an exponent), or None when `text` is not a JSON object this walk reads (a
    duplicated name keeps its last value, as in `loads_exact`)."""
    scan = DECODER.scan_once
    obj: dict[str, Any] = {}
    texts: dict[str, tuple[str, bool]] = {}
    try:
        i = _WHITESPACE.match(text).end()
        if text[i : i + 1] != "{":
            return None
        empty = _EMPTY.match(text, i + 1)
        i = empty.end() if empty else i + 1
        while not empty:
            named = _name(text, i)
            if named is None:
                return None
            name, start = named
            NUMBERS.exponent = False
            obj[name], i = scan(text, start)
            texts[name] = (text[start:i], NUMBERS.exponent)
            after = _AFTER.match(text, i)
            if after is None:
                return None
            i = after.end()
            empty = after.group(1) == "}"
    except (StopIteration, ValueError, RecursionError):
        return None
    return (obj, texts) if _WHITESPACE.match(text, i).end() == len(text) else None
