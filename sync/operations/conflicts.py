"""Serialization conflicts: the one failure every CALL path retries, with backoff.

A Redshift database runs at SERIALIZABLE or at SNAPSHOT isolation. At SERIALIZABLE,
Redshift stops one of two overlapping transactions whose reads and writes would not
serialize: "ERROR: 1023 DETAIL: Serializable isolation violation on table". Its answer is
to run the transaction again ("Isolation levels in Amazon Redshift",
https://docs.aws.amazon.com/redshift/latest/dg/c_serial_isolation.html; re:Post "Resolve
serializable isolation errors in Amazon Redshift"). PostgreSQL reports the same class of
failure, at SERIALIZABLE and at REPEATABLE READ, with SQLSTATE 40001
`serialization_failure` ("could not serialize access ..."; PostgreSQL manual, 13.2
"Transaction Isolation": "applications using this level must be prepared to retry
transactions due to serialization failures").

The stopped transaction is rolled back whole (a CALL run in autocommit is one
transaction; the commands that CALL inside their own transaction roll all of it back), so
running it again is safe. Every other error (a bad cast, a missing table, a permission)
fails the same way on a second try and is reported at once. Retrying is the last line:
the procedures are built not to conflict in the first place (docs/redshift.md).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sync.config import Pipeline

SERIALIZATION_FAILURE = "40001"  # SQLSTATE, PostgreSQL (Appendix A) and Redshift's PostgreSQL protocol
_CONFLICT = re.compile(
    r"error:?\s*1023\b|serializable isolation violation|concurrent transaction|could not serialize access",
    re.IGNORECASE,
)
T = TypeVar("T")


def is_serialization_conflict(message: str | None, sqlstate: str | None = None) -> bool:
    """Whether a failed statement was stopped by a serialization conflict: SQLSTATE 40001,
    or (the Data API gives no SQLSTATE) the engine's words for it."""
    return sqlstate == SERIALIZATION_FAILURE or (bool(message) and _CONFLICT.search(message) is not None)


def jittered_delay(attempt: int, base_seconds: float, cap_seconds: float, rng: random.Random | None = None) -> float:
    """Full jitter: after failed attempt n (1-based), a uniform random time in
    [0, min(cap, base * 2**(n-1))]."""
    ceiling = min(cap_seconds, base_seconds * (2 ** min(attempt - 1, 62)))
    return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter for serialization conflicts: attempt n
    (1-based) that failed waits `jittered_delay(n)` before attempt n+1. One attempt is no retry."""

    max_attempts: int = 4
    base_seconds: float = 1.0
    cap_seconds: float = 20.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_seconds < 0 or self.cap_seconds < 0:
            raise ValueError("retry delays must not be negative")

    def should_retry(self, attempt: int, error: str | None, sqlstate: str | None = None) -> bool:
        return attempt < self.max_attempts and is_serialization_conflict(error, sqlstate)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        return jittered_delay(attempt, self.base_seconds, self.cap_seconds, rng)


def conflict_policy(pipeline: Pipeline) -> RetryPolicy:
    """The retries of the commands run against a warehouse (`[operations] conflict_attempts`)."""
    return RetryPolicy(max_attempts=pipeline.operations.conflict_attempts)


def retry_conflicts(
    policy: RetryPolicy,
    attempt: Callable[[], T],
    sleep: Callable[[float], None] = time.sleep,
    may_retry: Callable[[], bool] = lambda: True,
) -> tuple[T, int]:
    """Run `attempt` (one whole transaction) until it does not fail with a serialization
    conflict (WarehouseError's SQLSTATE, or the error's words), at most
    `policy.max_attempts` times; returns its value and the retries. The last conflict, and
    any other error, propagates."""
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt(), attempts - 1
        except Exception as exc:
            if not (policy.should_retry(attempts, str(exc), getattr(exc, "sqlstate", None)) and may_retry()):
                raise
        sleep(policy.delay(attempts))
