"""Which errors are retried and how long the handler waits, against a plain model."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.aws.data_api import RateLimit
from sync.aws.retry import is_throttled, is_transient
from sync.operations.conflicts import RetryPolicy, is_serialization_conflict

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
    'ERROR: invalid input syntax for type bigint: "1023"',
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


# Error codes: botocore's redshift-data service model lists ActiveStatementsExceededException and
# ActiveSessionsExceededException for ExecuteStatement; ThrottlingException is the request-rate
# error of every AWS API; ValidationException and ResourceNotFoundException are final.
@pytest.mark.parametrize(
    "code, throttled, transient",
    [
        ("ThrottlingException", True, True),
        ("ActiveStatementsExceededException", True, True),
        ("ActiveSessionsExceededException", True, True),
        ("InternalServerException", False, True),
        ("ValidationException", False, False),
        ("ResourceNotFoundException", False, False),
        ("AccessDeniedException", False, False),
        ("ExecuteStatementException", False, False),
    ],
)
def test_data_api_errors_are_sorted_by_code(code, throttled, transient):
    from botocore.exceptions import ClientError

    exc = ClientError({"Error": {"Code": code, "Message": "m"}}, "ExecuteStatement")
    assert (is_throttled(exc), is_transient(exc)) == (throttled, transient)


def test_no_answer_is_transient_but_not_throttled():
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    for exc in (
        ReadTimeoutError(endpoint_url="https://redshift-data"),
        ConnectTimeoutError(endpoint_url="https://x"),
        EndpointConnectionError(endpoint_url="https://x"),
    ):
        assert is_transient(exc) and not is_throttled(exc)
    assert not is_transient(RuntimeError("boom"))


@given(rate=st.floats(0.5, 50), gaps=st.lists(st.floats(0, 0.5), min_size=1, max_size=200))
def test_the_rate_limit_never_lets_more_through_than_its_rate(rate, gaps):
    """Token bucket: in any window of w seconds at most rate * w + max(1, rate) requests pass."""
    limit, now, taken = RateLimit(rate, 0.0), 0.0, []
    for gap in gaps:
        now += gap
        if limit.take(now):
            taken.append(now)
        assert limit.ready_at(now) >= now
    for i, start in enumerate(taken):
        within = [t for t in taken[i:] if t - start <= 1.0]
        assert len(within) <= rate * 1.0 + max(1.0, rate) + 1e-9
