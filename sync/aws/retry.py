"""Which failures are worth retrying, and how long to wait before the next attempt.

Two kinds of failure are retried, and nothing else:

- A serialization conflict of the CALL itself. Redshift aborts one of two transactions that
  would not serialize with error 1023 ("Serializable isolation violation"); the documented
  fix is to run the transaction again. PostgreSQL says "could not serialize access" for the
  same situation. Every other SQL error (a bad cast, a missing table, a permission) fails
  the same way on a second try, so it is reported at once instead of retried.
- A Data API request the service refused for load, or did not answer. botocore's
  `redshift-data` service model lists `ActiveStatementsExceededException` ("The number of
  active statements exceeds the limit") and `ActiveSessionsExceededException` among
  ExecuteStatement's errors; `ThrottlingException` is the request-rate error every AWS
  service returns (botocore's standard retry mode treats it as throttling). A timed-out or
  dropped connection may have reached the service: ExecuteStatement is retried with the
  same ClientToken, so the service answers with the statement it already started.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError

_CONFLICT = re.compile(
    r"error:?\s*1023\b|serializable isolation violation|concurrent transaction|could not serialize access",
    re.IGNORECASE,
)
# Refused for load: the request did not run, and the same request may succeed later.
THROTTLING_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ActiveStatementsExceededException",
        "ActiveSessionsExceededException",
    }
)
# The service failed on its side: the request may or may not have taken effect.
SERVER_CODES = frozenset({"InternalServerException", "ServiceUnavailable", "ServiceUnavailableException"})


def is_serialization_conflict(message: str | None) -> bool:
    return bool(message) and _CONFLICT.search(message) is not None


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError (or of anything shaped like one)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return (response.get("Error") or {}).get("Code")
    return None


def is_throttled(exc: BaseException) -> bool:
    """The service refused the request for load; it did not run."""
    return error_code(exc) in THROTTLING_CODES


def is_transient(exc: BaseException) -> bool:
    """Worth sending again: refused for load, a server-side failure, or no answer at all
    (botocore's connection and timeout errors)."""
    return is_throttled(exc) or error_code(exc) in SERVER_CODES or isinstance(exc, (BotoConnectionError, HTTPClientError))


def jittered_delay(attempt: int, base_seconds: float, cap_seconds: float, rng: random.Random | None = None) -> float:
    """Full jitter: after failed attempt n (1-based), a uniform random time in
    [0, min(cap, base * 2**(n-1))]."""
    ceiling = min(cap_seconds, base_seconds * (2 ** min(attempt - 1, 62)))
    return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter for serialization conflicts: attempt n
    (1-based) that failed waits `jittered_delay(n)` before attempt n+1."""

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
        return jittered_delay(attempt, self.base_seconds, self.cap_seconds, rng)
