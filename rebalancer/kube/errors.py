"""Kubernetes API errors, translated once at the boundary into a small tree of our own."""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """An API call that failed. `kind` is a bounded metric label; `retryable`: the same call may
    succeed if sent again (after `retry_after` seconds, when the server said so)."""

    kind = "error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.body = body or {}

    @property
    def retryable(self) -> bool:
        return False


class NotFound(KubeError):
    kind = "not_found"


class Conflict(KubeError):
    """The object changed since it was read: read it again, check again, write again."""

    kind = "conflict"

    @property
    def retryable(self) -> bool:
        return True


class Gone(KubeError):
    """A watch or list from a resourceVersion that is too old: list again."""

    kind = "gone"


class TooManyRequests(KubeError):
    """Rate limited, or an eviction blocked by a PodDisruptionBudget (`is_disruption_budget`)."""

    kind = "too_many_requests"

    @property
    def retryable(self) -> bool:
        # A PodDisruptionBudget's refusal stands until pods become Ready: the next pass asks again.
        return not self.is_disruption_budget

    @property
    def is_disruption_budget(self) -> bool:
        # StatusCause's Go field is Type, but its JSON name is "reason".
        causes = (self.body.get("details") or {}).get("causes") or []
        return any(
            "DisruptionBudget" in (cause.get("reason"), cause.get("type")) for cause in causes
        )


class Forbidden(KubeError):
    kind = "forbidden"


class Invalid(KubeError):
    kind = "invalid"


class ServerError(KubeError):
    kind = "server_error"

    @property
    def retryable(self) -> bool:
        return True


class Unavailable(KubeError):
    """No answer: connection refused, reset, or timed out."""

    kind = "unavailable"

    @property
    def retryable(self) -> bool:
        return True


class Fenced(KubeError):
    """Not sent: this replica may no longer hold the Lease by the time the write would land
    (`rebalancer.kube.fence`). Sending it again cannot help; a new leader plans it afresh."""

    kind = "fenced"


_BY_STATUS: dict[int, type[KubeError]] = {
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    400: Invalid,
    429: TooManyRequests,
}


def from_response(status: int, body: bytes, headers: Any = None) -> KubeError:
    """Build the error for a non-2xx answer from its `Status` body."""
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    message = str(parsed.get("message") or body[:200].decode("utf-8", "replace") or status)
    retry_after: float | None = None
    header = headers.get("Retry-After") if headers is not None else None
    details = parsed.get("details") or {}
    try:
        if header:
            retry_after = float(header)
        elif isinstance(details, dict) and details.get("retryAfterSeconds"):
            retry_after = float(details["retryAfterSeconds"])
    except (TypeError, ValueError):
        retry_after = None
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else KubeError)
    return cls(
        f"HTTP {status}: {message}",
        status=status,
        reason=str(parsed.get("reason", "")),
        retry_after=retry_after,
        body=parsed,
    )
