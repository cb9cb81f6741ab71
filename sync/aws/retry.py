"""Which Data API failures are worth retrying.

Two kinds of failure are retried, and nothing else:

- A serialization conflict of the CALL itself (sync/operations/conflicts.py: error 1023,
  SQLSTATE 40001), with `RetryPolicy`.
- A Data API request the service refused for load, or did not answer. botocore's
  `redshift-data` service model lists `ActiveStatementsExceededException` ("The number of
  active statements exceeds the limit") and `ActiveSessionsExceededException` among
  ExecuteStatement's errors; `ThrottlingException` is the request-rate error every AWS
  service returns (botocore's standard retry mode treats it as throttling). A timed-out or
  dropped connection may have reached the service: ExecuteStatement is retried with the
  same ClientToken, so the service answers with the statement it already started.
"""

from __future__ import annotations

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError

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
