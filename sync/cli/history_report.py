"""What `redshift-sync history rebuild` prints: its outcome, and each partition whose
records the stream no longer retains."""

from __future__ import annotations

from typing import Any

from sync.operations.history_rebuild import DIFFERING_SHOWN, Outcome, PartitionCover, Rebuild, Side, VersionDifference

VERDICTS = {
    Outcome.UNCHANGED: "equal: nothing to do",
    Outcome.WRITTEN: "written (no stored version replaced)",
    Outcome.REPLACED: "replaced",
}


def gap_line(p: PartitionCover) -> str:
    """What the stream misses of one partition, and what of the stored history it held."""
    parts = []
    if p.first_retained is None:
        parts.append(f"none of offsets 0-{p.last_applied} is retained ({p.not_retained} record(s))")
    elif p.not_retained:
        parts.append(
            f"offsets 0-{p.first_retained - 1} are not retained ({p.not_retained} record(s)); the first retained "
            f"record, offset {p.first_retained}, is of {p.first_retained_time}; no backfill snapshot is that new"
        )
    if p.missing_between:
        parts.append(f"{p.missing_between} offset(s) missing between retained records (lost before they were read, or pruned)")
    if p.lost_versions:
        parts.append(f"the stored history holds {p.lost_versions} version(s) of missing records")
    return f"partition {p.partition}: {'; '.join(parts)}"


def difference_line(v: VersionDifference) -> str:
    """One version only one history holds: whose, its key, position, interval, operation
    and the record that opened it."""
    key = ", ".join(f"{name}={value}" for name, value in v.key.items())
    position = f"at position {v.valid_from_pos}" if v.valid_from_pos is not None else "without a position"
    until = v.valid_to if v.valid_to is not None else "open"
    # A backfill's snapshot version has no Kafka record (partition and offset -1).
    origin = f"record {v.kafka_partition}:{v.kafka_offset}" if (v.kafka_partition or 0) >= 0 else "from a snapshot"
    return f"{v.side}: {key} {position} ({v.valid_from} to {until}), op {v.op}, {origin}"


def changed_lines(differing: list[VersionDifference]) -> list[str]:
    """For each record whose version both histories hold otherwise (a stored and a rebuilt
    version with one key, position and Kafka record), what differs: the interval, the
    operation or a value, stored then rebuilt."""

    def record(v: VersionDifference) -> tuple:
        return (tuple(v.key.items()), v.valid_from_pos, v.kafka_partition, v.kafka_offset)

    stored = {record(v): v for v in differing if v.side == Side.STORED}
    lines = []
    for new in (v for v in differing if v.side == Side.REBUILT and record(v) in stored):
        old = stored[record(new)]
        told = {"valid_from": (old.valid_from, new.valid_from), "valid_to": (old.valid_to, new.valid_to), "op": (old.op, new.op)}
        told.update({name: (old.values.get(name), value) for name, value in new.values.items()})
        changed = [f"{name} {_shown(a)} -> {_shown(b)}" for name, (a, b) in told.items() if a != b]
        key = ", ".join(f"{name}={value}" for name, value in new.key.items())
        position = f"at position {new.valid_from_pos}" if new.valid_from_pos is not None else "without a position"
        lines.append(f"{key} {position}: " + ("; ".join(changed) or "a column not shown differs"))
    return lines


def _shown(value: Any) -> str:
    """A value as a difference line shows it: NULL, text quoted, anything else as printed."""
    return "NULL" if value is None else repr(value) if isinstance(value, str) else str(value)


def summary(result: Rebuild) -> str:
    snapshot = f", {result.snapshot_versions} snapshot version(s) below them" if result.snapshot_versions else ""
    quarantined = f" ({result.quarantined} quarantined: no version)" if result.quarantined else ""
    return (
        f"history rebuild {result.table}: {result.rebuilt} version(s) from {result.records} retained record(s)"
        f"{quarantined}{snapshot}; the stored history had {result.stored}"
    )


def refusal(result: Rebuild) -> str:
    """Why nothing was changed, and what to run."""
    if result.outcome is Outcome.GAP:
        lines = "".join(f"\n  {gap_line(p)}" for p in result.gaps)
        return (
            f"the stream no longer retains every record the history of {result.table} comes from: "
            f"a rebuild would present a history with a hole as complete.{lines}\n"
            "Nothing was changed. Backfill a snapshot taken at or after the first retained record of each such "
            "partition, then rebuild again; or pass --accept-gap to rebuild without those records."
        )
    lost = sum(p.lost_versions for p in result.partitions)
    gone = f" {lost} of them are versions of records the stream no longer retains: no rebuild restores them." if lost else ""
    shown = "".join(f"\n  {difference_line(v)}" for v in result.differing)
    changed = "".join(f"\n  {line}" for line in changed_lines(result.differing))
    told = f"\nVersions of one record that differ (stored -> rebuilt):{changed}" if changed else ""
    return (
        f"history rebuild would replace {result.stored_only} of the {result.stored} stored version(s) of "
        f"{result.table} ({result.rebuilt_only} of the {result.rebuilt} rebuilt ones differ from them or are new).{gone}\n"
        f"The first versions of each (by key and position, at most {DIFFERING_SHOWN}):{shown}{told}\n"
        "Nothing was changed: run it again with --yes."
    )


def print_rebuild(result: Rebuild, out: Any, err: Any) -> None:
    """The summary and verdict on `out`; an accepted gap's partitions on `err`."""
    out.print(f"{summary(result)}: {VERDICTS[result.outcome]}", highlight=False, soft_wrap=True)
    for p in result.gaps:
        err.print(f"incomplete: {gap_line(p)}", style="yellow", highlight=False, soft_wrap=True)
