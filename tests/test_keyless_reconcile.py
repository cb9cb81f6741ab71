"""The keyless reconcile's comparison of copies (sync/operations/keyless_reconcile.py),
against the multiset difference computed with collections.Counter."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from sync.operations.keyless_reconcile import compare_copies
from sync.operations.reconcile import Difference

ROWS = st.sampled_from(["h1", "h2", "h3", "h4"])


@given(
    snapshot=st.lists(ROWS, max_size=12),
    warehouse=st.lists(st.tuples(ROWS, st.booleans()), max_size=12),
    changes_after=st.none() | st.integers(0, 6),
)
def test_missing_and_extra_copies_are_the_multiset_difference(snapshot, warehouse, changes_after):
    """`warehouse`: (row hash, written by the stream after the snapshot) per stored row."""
    wanted = Counter(snapshot)
    held = Counter(h for h, _ in warehouse)
    streamed = Counter(h for h, after in warehouse if after)
    diffs = compare_copies(
        {h: (n, {"h": h}) for h, n in wanted.items()},
        {h: (n, streamed[h], {"h": h}) for h, n in held.items()},
        changes_after,
    )
    missing = {d.row_hash: d.copies for d in diffs if d.kind is Difference.MISSING}
    extra = {d.row_hash: d.copies for d in diffs if d.kind is Difference.EXTRA}
    assert missing == dict(wanted - held)
    assert extra == dict(held - wanted)
    for d in diffs:
        if d.kind is Difference.EXTRA:
            # Explained only when the stream wrote at least the copies beyond the snapshot's.
            assert d.explained == (d.copies <= streamed[d.row_hash])
        else:
            # Explained only while the stream's changes after the snapshot cover every missing copy.
            assert d.explained == (bool(changes_after) and sum(missing.values()) <= changes_after)
