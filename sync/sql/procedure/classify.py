"""The classification of a typed record: ordered rules (first match wins) that give each
record of the batch its action and, for a quarantined one, its reason."""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import TableConfig
from sync.debezium.vocabulary import Reason, field_reason, key_reason
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.procedure.context import Action
from sync.sql.procedure.fields import mark_alias, raw_alias, raw_is_null, toastable
from sync.sql.procedure.text import WIDE, packed

# source.ts_ms values that are a time (1970-01-01 to 9999-12-31 23:59:59.999): outside
# them (a nanosecond clock, garbage) the conversion would raise, so the record is
# quarantined and its conversion reads NULL.
SOURCE_TS_MS_RANGE = (0, 253402300799999)


@dataclass(frozen=True)
class Check:
    """One classification rule: records matching `condition` get `action` and `reason`."""

    condition: str
    action: Action
    reason: str  # SQL expression


def _key_checks(d: PostgresDialect, table: TableConfig) -> list[Check]:
    """Keys: present, convertible, and (where the warehouse indexes them) short enough."""
    q = d.q
    checks = [
        Check(
            f"t.{q(col.target_name)} IS NULL", Action.QUARANTINE, quote_literal(key_reason(col.name, col.semantic, col.sql_type))
        )
        for col in table.key_columns
    ]
    if d.key_byte_limit is not None:
        # An index entry of the primary key has a size limit (PostgreSQL's btree: about
        # 2.7 kB); a longer key would fail the whole CALL on every run.
        texts = [c for c in table.key_columns if c.sql_type.family in ("char", "varchar")]
        widths = [f"OCTET_LENGTH(t.{q(c.target_name)})" for c in texts]
        fixed = 16 * (len(table.key_columns) - len(widths))
        if widths and sum(c.sql_type.byte_limit for c in texts) + fixed > d.key_byte_limit:
            checks.append(
                Check(
                    f"{' + '.join(widths)} > {d.key_byte_limit - fixed}",
                    Action.QUARANTINE,
                    quote_literal(f"primary key is longer than the {d.key_byte_limit} bytes a warehouse index entry holds"),
                )
            )
    return checks


def classification_checks(d: PostgresDialect, table: TableConfig) -> list[Check]:
    """Ordered rules over the typed record `t`; the first match decides."""
    q = d.q
    key_present = " AND ".join(f"t.{q(c.target_name)} IS NOT NULL" for c in table.key_columns)
    no_image = f"{d.json_is_null('t._img')} OR NOT {d.json_is_object('t._img')}"
    checks = [Check("t._raw_value IS NOT NULL", Action.QUARANTINE, quote_literal(Reason.NOT_JSON))]
    if table.format == "debezium-unwrap":
        checks.append(Check(f"{d.json_is_null('t._env')} AND {key_present}", Action.DELETE, "NULL"))
    checks += [
        Check(d.json_is_null("t._env"), Action.TOMBSTONE, "NULL"),
        Check(f"NOT {d.json_is_object('t._env')}", Action.QUARANTINE, quote_literal(Reason.NOT_OBJECT)),
        Check("t._op IS NULL", Action.QUARANTINE, quote_literal(Reason.NO_OP)),
        Check("t._op = 't'", Action.TRUNCATE, "NULL"),
        Check(
            "t._op NOT IN ('c', 'r', 'u', 'd')", Action.QUARANTINE, f"'unknown op \"' || {d.prefix_bytes('t._op', 64)} || '\"'"
        ),
        # A c/r/u event without an after image would otherwise become a row of NULLs, and a
        # keyless delete without its before image would name the row of NULLs (it names the
        # row it removes by that image).
        Check(f"t._op <> 'd' AND ({no_image})", Action.QUARANTINE, "'no row image: after is missing or not an object'"),
        *(
            [Check(f"t._op = 'd' AND ({no_image})", Action.QUARANTINE, quote_literal(Reason.NO_DELETE_IMAGE))]
            if table.is_keyless
            else []
        ),
        *_key_checks(d, table),
    ]
    lo, hi = SOURCE_TS_MS_RANGE
    checks.append(
        Check(
            f"t._has_source_ts AND (t._source_ts_ms IS NULL OR t._source_ts_ms NOT BETWEEN {lo} AND {hi})",
            Action.QUARANTINE,
            "'source time (ts_ms) is not milliseconds since the epoch between 1970 and 9999'",
        )
    )
    # A keyed delete names its row by the key; a keyless one by every value of its before
    # image, so a value that does not convert would name another row (NULL in its place).
    image_values = "" if table.is_keyless else "t._op <> 'd' AND "
    for i, col in enumerate(table.value_columns):
        raw = f"t.{raw_alias(i)}"
        keeps_stored = f" AND NOT t.{mark_alias(i)}" if toastable(col) else ""
        checks.append(
            Check(
                f"{image_values}NOT {raw_is_null(d, raw, col)} AND t.{q(col.target_name)} IS NULL{keeps_stored}",
                Action.QUARANTINE,
                quote_literal(field_reason(col.name, col.semantic, col.sql_type)),
            )
        )
    checks.append(Check("t._op = 'd'", Action.DELETE, "NULL"))
    return checks


def first_match(checks: list[Check]) -> str:
    """The number (1, 2, ...) of the first check that matches, 0 when none does: the
    checks run once per record, and action and reason are looked up from the number."""
    lines = ["CASE"]
    lines += [f"  WHEN {chk.condition} THEN {i}" for i, chk in enumerate(checks, start=1)]
    lines += ["  ELSE 0", "END"]
    return "\n".join(lines)


def lookup(number: str, values: list[str], default: str) -> str:
    """values[n - 1] for the check numbered n (see `first_match`), else `default`: a check
    whose value is the default needs no branch, and a NULL default no ELSE."""
    branches = [f"  WHEN {i} THEN {v}" for i, v in enumerate(values, start=1) if v != default]
    lines = [f"CASE {number}", *branches, *([f"  ELSE {default}"] if default != "NULL" else []), "END"]
    return "\n".join(lines)


def action_of(number: str, checks: list[Check]) -> str:
    """The action of the check numbered `number` (see `first_match`), upsert when none
    matched (0): a branch per number whose action is not the most common one, which the
    ELSE gives (the quarantine: most checks find a record that cannot be applied)."""
    numbers: dict[Action, list[int]] = {Action.UPSERT: [0]}
    for i, chk in enumerate(checks, start=1):
        numbers.setdefault(chk.action, []).append(i)
    default = max(numbers, key=lambda action: len(numbers[action]))
    branches = sorted((n, action) for action, listed in numbers.items() if action != default for n in listed)
    items = [f"CASE {number}", *(f"WHEN {n} THEN '{action}'" for n, action in branches), f"ELSE '{default}' END"]
    return packed(items, "  ", WIDE - 20, " ")
