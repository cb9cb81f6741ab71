"""Shared by the reliability tests: random change histories, and the check that a
warehouse's state is exactly what the reference model (tests/cdc_model.py) says of the
records it has consumed."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sync.config import Pipeline, TableConfig
from sync.debezium.events import ChangeStream, MySqlSource
from sync.sql.dialect import quote_ident
from sync.sql.names import QUARANTINE, RUN_LOG, table_names
from sync.warehouse import Warehouse
from tests.cdc_model import TopicModel

ACCOUNT_COLUMNS = """columns = [
  { name = "ID", type = "bigint", target = "id" },
  { name = "NAME", type = "varchar(32)" },
  { name = "BALANCE", type = "decimal(12,2)" },
  { name = "ACTIVE", type = "boolean" },
]"""


def account_table(name: str = "account", delete_mode: str = "hard", order_by: str = "mysql-binlog") -> str:
    return (
        f'[[tables]]\nname = "{name}"\ntopic = "shop.shop.{name.upper()}"\nprimary_key = ["ID"]\n'
        f'delete_mode = "{delete_mode}"\norder_by = "{order_by}"\n{ACCOUNT_COLUMNS}\n'
    )


class History:
    """A random but realistic change history of an `account` table: MySQL binlog positions,
    full before images, keys hashed to partitions, tombstones after deletes, plus a
    sprinkling of records the procedure must quarantine. Offsets are assigned here, so
    the model and the stream agree on them."""

    def __init__(self, seed: int, keys: int = 200, partitions: int = 2):
        self.rng = random.Random(seed)
        self.keys = keys
        self.stream = ChangeStream(["ID"], MySqlSource(table="ACCOUNT"), partitions=partitions)
        self.rows: dict[int, dict[str, Any]] = {}
        self.next_offset: dict[int, int] = {}
        self.records: list[dict[str, Any]] = []

    def _row(self, key: int) -> dict[str, Any]:
        r = self.rng
        return {
            "ID": key,
            "NAME": None
            if r.random() < 0.15
            else r.choice(["ann", "bob", "cy", "dee", "Ölaf", "名前", "o'neil"]) + str(r.randint(0, 99)),
            "BALANCE": None if r.random() < 0.1 else round(r.uniform(-1e4, 1e4), 2),
            "ACTIVE": None if r.random() < 0.1 else r.random() < 0.5,
        }

    def _emit(self, record: dict[str, Any]) -> None:
        p = record["partition"]
        record["offset"] = self.next_offset.get(p, 0)
        self.next_offset[p] = record["offset"] + 1
        self.records.append(record)

    def events(self, n: int) -> list[dict[str, Any]]:
        """Append n more change events (plus their tombstones); returns the new records."""
        start = len(self.records)
        r = self.rng
        for _ in range(n):
            key = r.randrange(self.keys)
            roll = r.random()
            if roll < 0.01:
                self._emit({"partition": r.randrange(self.stream.partitions), "key": None, "value": "{not json"})
            elif roll < 0.02:
                bad = self.stream.insert({**self._row(key), "ACTIVE": "maybe"})
                self._emit(bad)
            elif key not in self.rows:
                self.rows[key] = self._row(key)
                self._emit(self.stream.insert(self.rows[key]))
            elif roll < 0.2:
                self._emit(self.stream.delete(self.rows.pop(key)))
                self._emit(self.stream.tombstone({"ID": key}))
            else:
                before, after = self.rows[key], self._row(key)
                self.rows[key] = after
                self._emit(self.stream.update(before, after))
        return self.records[start:]


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n")
    return path


def _normalise(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def target_rows(wh: Warehouse, pipeline: Pipeline, table: TableConfig) -> dict[tuple, dict[str, Any]]:
    """The target table in the model's shape."""
    n = table_names(pipeline, table)
    cols = [c.target_name for c in table.columns] + (["_deleted"] if table.delete_mode == "soft" else [])
    rows = wh.query(f"SELECT {', '.join(quote_ident(c) for c in cols)} FROM {quote_ident(n.schema)}.{quote_ident(n.target)}")
    nkey = len(table.key_columns)
    key_pos = [cols.index(c.target_name) for c in table.key_columns]
    assert nkey == len(key_pos)
    return {tuple(r[i] for i in key_pos): {c: _normalise(v) for c, v in zip(cols, r)} for r in rows}


def normalised(rows: dict[tuple, dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return {k: {c: _normalise(v) for c, v in row.items()} for k, row in rows.items()}


def watermarks(wh: Warehouse, pipeline: Pipeline, table: TableConfig) -> dict[int, int]:
    n = table_names(pipeline, table)
    return {
        int(p): int(o)
        for p, o in wh.query(f"SELECT kafka_partition, last_offset FROM {quote_ident(n.schema)}.{quote_ident(n.watermark)}")
    }


def wm_key(wm: dict[int, int]) -> tuple:
    return tuple(sorted(wm.items()))


def consumed(records: Iterable[dict[str, Any]], wm: dict[int, int]) -> list[dict[str, Any]]:
    return [r for r in records if r["offset"] <= wm.get(r["partition"], -1)]


def assert_consistent(
    wh: Warehouse,
    pipeline: Pipeline,
    table: TableConfig,
    records: list[dict[str, Any]],
    known: dict[tuple, tuple[dict, dict]] | None = None,
) -> int:
    """The target, quarantine and run log are exactly what the records up to the
    watermark make, with no trace of a half-applied run. `known` may hold the model's
    (rows, quarantine) for watermarks (keyed by `wm_key`). Returns the records consumed."""
    wm = watermarks(wh, pipeline, table)
    done = consumed(records, wm)
    if known is not None and wm_key(wm) in known:
        rows, quarantine = known[wm_key(wm)]
    else:
        model = TopicModel(table).add(done)
        rows, quarantine = model.rows(), model.quarantine()
    actual, expected = target_rows(wh, pipeline, table), normalised(rows)
    assert actual == expected, "target differs from the model: " + _diff(actual, expected)
    n = table_names(pipeline, table)
    s = quote_ident(n.schema)
    quarantined = wh.query(
        f"SELECT kafka_partition, kafka_offset FROM {s}.{quote_ident(QUARANTINE)} WHERE table_name = %s", (table.name,)
    )
    assert sorted((int(p), int(o)) for p, o in quarantined) == sorted(quarantine), "quarantine differs"
    runs = wh.query(
        f"SELECT watermark_before, watermark_after, events_read, status FROM {s}.{quote_ident(RUN_LOG)} "
        "WHERE table_name = %s ORDER BY run_id",
        (table.name,),
    )
    # Every committed run logged exactly once, in commit order: each run starts where the
    # previous one ended, the last one ends at the current watermark, and the runs
    # together read every consumed record exactly once.
    previous = None
    for before, after, _, status in runs:
        assert status == "ok"
        assert before == previous, f"run-log chain broken: {previous!r} -> {before!r}"
        previous = after
    current = ",".join(f"{p}:{o}" for p, o in sorted(wm.items())) or None
    assert previous == current, f"watermark {current!r} but the last logged run ended at {previous!r}"
    stream = wh.scalar(
        f"SELECT COUNT(*) FROM {s}.{quote_ident(n.stream)} x LEFT JOIN {s}.{quote_ident(n.watermark)} w "
        "USING (kafka_partition) WHERE x.kafka_offset <= COALESCE(w.last_offset, -1)"
    )
    assert sum(int(r[2]) for r in runs) == stream, "the runs did not read each consumed record exactly once"
    return len(done)


# Figures for docs/correctness.md: tests add what they tried and survived here;
# `python -m tests.reliability_report` runs the suites in one process and writes them.
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="session")
def reliability_counts() -> Counter[str]:
    return COUNTS


def _diff(actual: dict, expected: dict, limit: int = 5) -> str:
    keys = [k for k in sorted(set(actual) | set(expected), key=repr) if actual.get(k) != expected.get(k)]
    return "; ".join(f"{k}: warehouse {actual.get(k)} != model {expected.get(k)}" for k in keys[:limit]) + (
        f" (and {len(keys) - limit} more)" if len(keys) > limit else ""
    )
