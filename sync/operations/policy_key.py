"""`redshift-sync policy rotate-key`: a new hash key for the pipeline's column policies.

The key is generated here (32 random bytes, hex) or read from an environment variable
(a key shared with another system, so both hash a value alike), and sent as a bound
parameter: it is never part of a statement's text, generated SQL or the pipeline file.
A keyed hash cannot be re-keyed without the clear value, so rotation changes what new
values hash to; stored hashes keep the key they were made with (docs: README, "Column
policies").
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sync.config import Pipeline
from sync.sql.policy import key_table, key_table_sql
from sync.warehouse import Warehouse

# Bounds of a key given through the environment: at least 128 bits as hex, and what the column holds.
MIN_SECRET, MAX_SECRET = 32, 256


class KeyRefused(ValueError):
    """The given key is too short or too long."""


@dataclass(frozen=True)
class Rotated:
    key_id: int
    created_at: datetime
    generated: bool  # False: taken from the environment


def check_secret(secret: str) -> str:
    if not MIN_SECRET <= len(secret) <= MAX_SECRET:
        raise KeyRefused(f"a policy key has {MIN_SECRET} to {MAX_SECRET} characters; the one given has {len(secret)}")
    return secret


def rotate_key(wh: Warehouse, pipeline: Pipeline, secret: str | None = None) -> Rotated:
    """Add a key (the newest is the one in use), in one transaction; returns its id."""
    given = secret is not None
    secret = check_secret(secret) if given else secrets.token_hex(32)
    now = datetime.now(UTC).replace(tzinfo=None)
    k = key_table(wh.dialect, pipeline)
    with wh.transaction():
        wh.execute(key_table_sql(wh.dialect, pipeline))
        key_id = int(wh.scalar(f"SELECT COALESCE(MAX(key_id), 0) + 1 FROM {k}"))
        wh.execute(f"INSERT INTO {k} (key_id, secret, created_at) VALUES (%s, %s, %s)", (key_id, secret, now))
    return Rotated(key_id, now, not given)
