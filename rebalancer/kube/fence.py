"""The fence: whether a write may still leave this replica, asked at the moment it leaves.

The leader elector knows the renew deadline: the start of its last successful renewal plus
`renew_deadline`, by its own clock. The other replicas cannot take the Lease before that
renewal's start plus the longer `lease_duration`, by clocks that started counting later. A write
is sent only if it can be over before the renew deadline:

- at least `margin_seconds` must be left (a write needs time to land: Kubernetes' own SLO for
  single-object mutating calls is 1 s at the 99th percentile), else it is not sent (`Fenced`);
- it is sent with its timeout cut to the time left, so the client has its answer or has given
  up by the deadline. The gap between the renew deadline and the Lease's expiry covers a server
  that applies a write it received just before the client gave up.

Asked by `RequestGate` after the request budget's wait, never before it: a write that waited
behind others must be judged when it leaves, not when it queued. Not for reads.
"""

from __future__ import annotations

from collections.abc import Callable

from rebalancer.kube.errors import Fenced

WRITE_MARGIN_SECONDS = 1.0


class WriteFence:
    def __init__(
        self,
        deadline: Callable[[], float | None],
        *,
        monotonic: Callable[[], float],
        margin_seconds: float = WRITE_MARGIN_SECONDS,
    ) -> None:
        """`deadline()`: the monotonic time by which every write must be over, or None while
        this replica holds no Lease."""
        self._deadline = deadline
        self._monotonic = monotonic
        self.margin_seconds = margin_seconds
        self.refused = 0

    def seconds_left(self) -> float:
        deadline = self._deadline()
        return 0.0 if deadline is None else deadline - self._monotonic()

    def admit(self, timeout_seconds: float) -> float:
        """The timeout to send a write with, or `Fenced` when it cannot be over in time."""
        left = self.seconds_left()
        if left < self.margin_seconds:
            self.refused += 1
            raise Fenced(
                f"not sent: {max(0.0, left):.1f} s left before the renew deadline, "
                f"a write needs {self.margin_seconds:.1f} s"
            )
        return min(timeout_seconds, left)
