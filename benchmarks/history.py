"""The history phase: the same batch of events into the same target, synced by the
table's procedure with and without history mode, side by side. The history-mode copy of
the table lives in its own schema (`HISTORY_SCHEMA`) and starts with one version per
target row (M versions), as if every row had been written once."""

from __future__ import annotations

import tomllib

from benchmarks import baselines as bl
from benchmarks.measure import Measurement
from benchmarks.phases import Bench
from benchmarks.workload import PIPELINE, REPO, TABLE, Relations, batch_events_sql, load, relations
from sync.config import Pipeline, parse_pipeline
from sync.operations.runner import deploy
from sync.sql.dialect import quote_ident
from sync.sql.names import table_names

HISTORY_SCHEMA = "cdc_history"


def history_pipeline() -> Pipeline:
    """The benchmarked table alone, with history = true, in HISTORY_SCHEMA."""
    doc = tomllib.loads(PIPELINE.read_text())
    doc["pipeline"]["schema"] = HISTORY_SCHEMA
    doc["tables"] = [{**t, "history": True} for t in doc["tables"] if t["name"] == TABLE]
    return parse_pipeline(doc)


def history_table(pipeline: Pipeline) -> str:
    """The quoted name of the benchmarked table's history."""
    n = table_names(pipeline, pipeline.table(TABLE))
    return f"{quote_ident(n.schema)}.{quote_ident(n.history)}"


def fill_history_sql(pipeline: Pipeline, rel: Relations) -> str:
    """One current version per target row."""
    return (
        f"INSERT INTO {history_table(pipeline)} (customer_id, name, mktsegment, _valid_from, _valid_from_pos, _op, _is_current,\n"
        "  _kafka_partition, _kafka_offset, _kafka_timestamp)\n"
        "SELECT customer_id, name, mktsegment, _source_ts, _source_pos, 'c', true, _kafka_partition, _kafka_offset, _source_ts\n"
        f"FROM {rel.target}"
    )


def _side_by_side(b: Bench, calls: dict[str, Relations], label: str) -> dict[str, Measurement]:
    """Each call of `calls` `repeats` times, alternating, each rolled back; the first
    leaves the same target on both (checked by digest)."""
    runs = {name: Measurement() for name in calls}
    digests = {}
    for rep in range(b.sizes.repeats):
        for name, r in calls.items():
            b.progress(f"history: {label}{name}, run {rep + 1} of {b.sizes.repeats}")
            check = (lambda t=r.target: tuple(b.wh.query(bl.digest_sql(t))[0])) if rep == 0 else None  # noqa: E731
            wall, cpu, result = b.clock.rolled_back(b.wh, lambda p=r.procedure: b.wh.execute(f"CALL {p}()"), check)
            runs[name].add(wall, cpu)
            if result is not None:
                digests[name] = result
    if digests["current_state"] != digests["with_history"]:
        raise RuntimeError(f"history: {label}the target differs with history mode on")
    return runs


def history(b: Bench) -> None:
    """Part 3: N events against M rows (and M versions), current state alone and with history;
    then the same batch with one more record, read late from a lagging partition; then with
    a tenth of the stored versions holding a TOAST placeholder."""
    n, m = b.sizes.events, b.sizes.target_rows
    pipeline = history_pipeline()
    deploy(b.wh, pipeline, str(PIPELINE.relative_to(REPO)))
    rel = relations(pipeline, pipeline.table(TABLE))
    b.progress(f"history: the {m:,}-row target and {n:,}-event batch twice, one with a {m:,}-version history")
    load(b.wh, b.rel, m, n)
    load(b.wh, rel, m, n)
    b.wh.execute(fill_history_sql(pipeline, rel))
    b.wh.execute("VACUUM ANALYZE")
    calls = {"current_state": b.rel, "with_history": rel}
    runs = _side_by_side(b, calls, "")
    for name, m_ in runs.items():
        b.record(f"history.{name}", m_, n)
    b.ratio("history.ratio_history_current", "history.with_history", "history.current_state")
    b.notes.append(f"history: both calls left the same target; the history held {m:,} versions before the batch")
    # Each repeat runs the two calls one after the other: the ratio of each such pair shows
    # how far one call's cost moves on a shared machine (the figure is the ratio of medians).
    pairs = sorted(h / c for c, h in zip(runs["current_state"].runs, runs["with_history"].runs, strict=True))
    b.notes.append(f"history: the ratio of each pair of calls ran from {pairs[0]:.2f}x to {pairs[-1]:.2f}x")
    # A partition that lagged: one more update, of an old key, from the stored rows' binlog
    # file, older than the stored versions of most of the batch's other keys but after its
    # own key's. Each key is judged by its own first change, so the batch keeps the short path.
    for r in calls.values():
        b.wh.execute(batch_events_sql(r, 1, m, file_number=2))
    b.wh.execute("VACUUM ANALYZE")
    lagging = _side_by_side(b, calls, "a lagging partition's record added, ")
    for name, m_ in lagging.items():
        b.record(f"history.lagging.{name}", m_, n + 1)
    b.ratio("history.ratio_lagging_partition", "history.lagging.with_history", "history.lagging.current_state")
    # A TOASTed column: PostgreSQL sends an update that leaves it unchanged with the
    # placeholder, so many stored versions hold one (filled from the version before). The
    # batch follows them all, so it keeps the short path.
    b.wh.execute(f"UPDATE {history_table(pipeline)} SET _unavailable = '|name|' WHERE _kafka_offset % 10 = 0")
    b.wh.execute("VACUUM ANALYZE")
    placeholders = _side_by_side(b, calls, "stored placeholders, ")
    for name, m_ in placeholders.items():
        b.record(f"history.placeholders.{name}", m_, n + 1)
    b.ratio("history.ratio_stored_placeholders", "history.placeholders.with_history", "history.placeholders.current_state")
