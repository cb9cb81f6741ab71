"""History mode against the source: each key's TRUE sequence of states, from the generated
source history alone (tests/delivery.py), and the sequence a history table holds.

A state is a row's values, or None (the key absent). Sequences are compared with runs of
equal states merged and a leading None dropped: a re-snapshot reads rows that did not
change (a version with the same values, at a new position), and a delete of a key never
seen is no state. Transactions lost with a PostgreSQL replication slot are never streamed:
the re-snapshot reads their effect, so their states count from it on."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.delivery import Connector, History, Key, apply_change, key_of

State = tuple[Any, ...] | None


def _state(row: dict[str, Any] | None) -> State:
    return None if row is None else (row["NAME"], Decimal(row["AMOUNT"]))


def merged(states: list[State]) -> list[State]:
    """Runs of equal states as one, without a leading None."""
    out: list[State] = []
    for s in states:
        if (out and out[-1] == s) or (not out and s is None):
            continue
        out.append(s)
    return out


def is_subsequence(part: list[State], whole: list[State]) -> bool:
    rest = iter(whole)
    return all(any(s == w for w in rest) for s in part)


def true_sequences(history: History, connector: Connector) -> dict[Key, list[State]]:
    """Each key's states in commit order, as the source went through them (merged)."""
    state = {key_of(r): dict(r) for r in history.initial}
    seq: dict[Key, list[State]] = {k: [_state(r)] for k, r in state.items()}
    lost = range(-1)
    if connector.resnapshot_at is not None:
        lost = range(connector.resnapshot_at - connector.lost, connector.resnapshot_at)

    def record(key: Key) -> None:
        seq.setdefault(key, []).append(_state(state.get(key)))

    for n, tx in enumerate(history.transactions):
        if n == connector.resnapshot_at:
            for key in state:
                record(key)
        for change in tx:
            apply_change(state, change)
            if n not in lost:
                record(change.key)
                if change.kind == "move":
                    record(key_of(change.row or {}))
    if connector.resnapshot_at == len(history.transactions):
        for key in state:
            record(key)
    return {k: merged(v) for k, v in seq.items() if merged(v)}


def weak_problems(held: dict[Key, list[State]], true: dict[Key, list[State]], current: dict[Key, State]) -> list[str]:
    """The weaker property of a complete delivery whose restarts re-sent records of a
    compressed MySQL transaction (records no field tells from the transaction changing a
    key back and forth, docs/correctness.md): every true version is in the history, in
    order, and each key's last version is its current state (`current`; a key absent from
    it is deleted). Extra versions in between are allowed."""
    problems = [
        f"history of {k}: {held.get(k)} lacks or reorders the source's {s}"
        for k, s in true.items()
        if not is_subsequence(s, held.get(k, []))
    ]
    for key in held.keys() | current.keys():
        last = held[key][-1] if held.get(key) else None
        if last != current.get(key):
            problems.append(f"history of {key} ends at {last}, the current state is {current.get(key)}")
    return problems


def history_versions(wh, relation: str) -> dict[Key, list[tuple]]:
    """Each key's versions in version order: (state, _valid_from_pos, _valid_to_pos, _is_current, _op)."""
    out: dict[Key, list[tuple]] = {}
    rows = wh.query(
        f"SELECT id, region, name, amount, _valid_from_pos, _valid_to_pos, _is_current, _op FROM {relation}\n"
        "ORDER BY id, region, _valid_from_pos ASC NULLS FIRST, _kafka_timestamp ASC NULLS FIRST, _kafka_partition, _kafka_offset"
    )
    for i, r, name, amount, pos_from, pos_to, current, op in rows:
        if op == "p":  # a tombstone waiting for its key's next record: no version
            continue
        state = None if op in ("d", "t") else (name, Decimal(amount))
        out.setdefault((i, r), []).append((state, pos_from, pos_to, current, op))
    return out


def history_sequences(wh, relation: str) -> dict[Key, list[State]]:
    seqs = {k: merged([v[0] for v in versions]) for k, versions in history_versions(wh, relation).items()}
    return {k: s for k, s in seqs.items() if s}


def interval_problems(wh, relation: str, deletes: str) -> list[str]:
    """Each version ends where the next begins (a closing marker, and in "close" mode a
    delete, at once); the last one is current when it is a row (or, in "tombstone" mode,
    a delete), and no other is."""
    problems = []
    for key, versions in history_versions(wh, relation).items():
        for n, (_state, pos_from, pos_to, current, op) in enumerate(versions):
            last = n == len(versions) - 1
            instant = op == "t" or (op == "d" and deletes == "close")
            expected_to = pos_from if instant else (None if last else versions[n + 1][1])
            if pos_to != expected_to:
                problems.append(f"{key} version {n} ({op} at {pos_from}) ends at {pos_to}, not {expected_to}")
            if current != (last and not instant):
                problems.append(f"{key} version {n} ({op} at {pos_from}) has _is_current = {current}")
    return problems
