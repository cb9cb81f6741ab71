"""Replaying quarantined records of a table with column policies (`quarantine replay`).

The quarantine stores a policy table's envelope redacted (`sync.sql.policy.redacted_sql`):
a hashed field holds its keyed hash, a masked one its mask, a dropped one null. Replayed,
a masked field loads as it would have (the mask of a mask is the mask), a dropped one is
not loaded, but a hashed field would be hashed again. So the replay marks its records
(`REPLAYED`, a member added to the envelope the batch reads, whose value is a keyed hash
only the procedure can make) and a hashed field of a marked record loads, and is
quarantined again, as the hash it already is.

A record quarantined because a policy field did not convert cannot be replayed at all:
the value it failed on is gone, only its hash or mask is stored. `unreplayable` names
such records' reasons; `quarantine replay` refuses them, and they can only be discarded."""

from __future__ import annotations

from sync.config import Policy, TableConfig
from sync.debezium.vocabulary import field_reason
from sync.sql.dialect import PostgresDialect, quote_literal
from sync.sql.policy import hash_sql

# The envelope member that marks a replayed record (never a Debezium envelope field).
REPLAYED = "__redshift_sync_replayed"


def hashes(table: TableConfig) -> bool:
    return any(c.policy == Policy.HASH for c in table.columns)


def _mark(d: PostgresDialect) -> str:
    """The marker's value: the keyed hash of its name, which a record from the stream cannot
    forge without the key (an unwrapped row could carry a field of that name)."""
    return hash_sql(d, quote_literal(REPLAYED))


def marked_replay(d: PostgresDialect, table: TableConfig, env: str) -> str:
    """The envelope of a replayed record, marked where the table hashes a field."""
    return d.json_with_new_member(env, REPLAYED, _mark(d)) if hashes(table) else env


def replay_text(d: PostgresDialect, table: TableConfig) -> tuple[list[dict[str, str]], str | None]:
    """The marker's text, named once where the dialect names texts (levels over `f.env`),
    and the condition of a replayed record over the step above them (`t`); None: the
    table hashes nothing."""
    if not hashes(table):
        return [], None
    named = d.text_levels(d.json_get("f._env", REPLAYED), "replayed")
    levels, text = named if named is not None else ([], d.json_get_text("t._env", REPLAYED))
    return levels, f"{'t.' + text.removeprefix('f.') if named else text} = {_mark(d)}"


def unreplayable(table: TableConfig) -> dict[str, str]:
    """The quarantine reasons that name a policy field (reason -> field): the stored value
    is its hash or mask, not the value that failed."""
    return {field_reason(c.name, c.semantic, c.sql_type): c.name for c in table.columns if c.policy is not None}
