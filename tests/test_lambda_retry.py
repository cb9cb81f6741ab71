"""Which errors are retried and how long the handler waits, against a plain model."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.retry import RetryPolicy, is_serialization_conflict

CONFLICTS = [
    "ERROR: 1023 DETAIL: Serializable isolation violation on table - 100167, transactions forming the cycle are: 1, 2",
    "ERROR:1023 DETAIL: Serializable isolation violation on table in Redshift",
    "1023 Details: Serializable isolation violation on table - 100167, transactions forming the cycle are: 3, 4 (pid:5)",
    "ERROR: could not serialize access due to concurrent update",
    "Query aborted: concurrent transaction modified the table",
]
OTHERS = [
    'ERROR: relation "cdc.customer" does not exist',
    "ERROR: permission denied for procedure incremental_sync_customer",
    "ERROR: invalid input syntax for type bigint: \"1023\"",
    "field TOTAL does not convert to decimal(12,2) at offset 1023",
    "ExecuteStatement refused: ActiveStatementsExceededException",
    "",
    None,
]


@pytest.mark.parametrize("message", CONFLICTS)
def test_serialization_conflicts_are_recognised(message):
    assert is_serialization_conflict(message)


@pytest.mark.parametrize("message", OTHERS)
def test_other_errors_are_not(message):
    assert not is_serialization_conflict(message)


@given(
    max_attempts=st.integers(1, 10),
    base=st.floats(0, 30, allow_nan=False),
    cap=st.floats(0, 120, allow_nan=False),
    attempt=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
    conflict=st.booleans(),
)
def test_backoff_is_bounded_and_jittered(max_attempts, base, cap, attempt, seed, conflict):
    policy = RetryPolicy(max_attempts, base, cap)
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = policy.delay(attempt, random.Random(seed))
    assert 0.0 <= delay <= ceiling
    error = CONFLICTS[seed % len(CONFLICTS)] if conflict else OTHERS[seed % len(OTHERS)]
    assert policy.should_retry(attempt, error) == (conflict and attempt < max_attempts)


def test_delays_spread_rather_than_repeat():
    rng = random.Random(7)
    delays = {round(RetryPolicy(base_seconds=1.0).delay(3, rng), 6) for _ in range(50)}
    assert len(delays) > 40 and max(delays) <= 4.0


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base_seconds": -1.0}, {"cap_seconds": -0.5}])
def test_a_policy_that_cannot_work_is_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
