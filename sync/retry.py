"""Which failures are worth retrying, and how long to wait before the next attempt.

Redshift aborts one of two transactions that would not serialize with error 1023
("Serializable isolation violation"); the documented fix is to run the transaction again.
PostgreSQL says "could not serialize access" for the same situation. Every other error
(a bad cast, a missing table, a permission) fails the same way on a second try, so it is
reported at once instead of retried.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

_CONFLICT = re.compile(
    r"error:?\s*1023\b|serializable isolation violation|concurrent transaction|could not serialize access",
    re.IGNORECASE,
)


def is_serialization_conflict(message: str | None) -> bool:
    return bool(message) and _CONFLICT.search(message) is not None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter: attempt n (1-based) that failed waits a
    uniform random time in [0, min(cap, base * 2**(n-1))] before attempt n+1."""

    max_attempts: int = 4
    base_seconds: float = 1.0
    cap_seconds: float = 20.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_seconds < 0 or self.cap_seconds < 0:
            raise ValueError("retry delays must not be negative")

    def should_retry(self, attempt: int, error: str | None) -> bool:
        return attempt < self.max_attempts and is_serialization_conflict(error)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.cap_seconds, self.base_seconds * (2 ** (attempt - 1)))
        return (rng or random).uniform(0.0, ceiling)
