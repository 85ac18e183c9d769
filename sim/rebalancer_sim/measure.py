"""What users feel during an eviction, and what no handler could have avoided.

`ReadyDeficit` integrates, over time, how many Ready replicas a workload is short of the count
it serves with (its replicas before the eviction: a surge above it is not counted as a gain),
in replica-seconds, and keeps the lowest Ready count. `unavoidable_deficit` is the part of that
the scenario makes unavoidable: a doomed replica is gone at NotBefore at the latest, and its
replacement, started at notice time at the earliest, is Ready no sooner than the provisioning
of a node (0 when there is room) plus its model load later. The demo and the end-to-end tests
compare what happened with that figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReadyDeficit:
    baseline: int  # the Ready replicas the workload serves with
    replica_seconds: float = 0.0
    lowest: int | None = None
    _last: tuple[float, int] | None = None  # (time, Ready count) of the previous sample

    def sample(self, now: float, ready: int) -> None:
        """Record the Ready count seen at `now` (seconds); the count holds until the next one."""
        if self._last is not None:
            then, count = self._last
            self.replica_seconds += max(0, self.baseline - count) * max(0.0, now - then)
        self._last = (now, ready)
        self.lowest = ready if self.lowest is None else min(self.lowest, ready)


def unavoidable_deficit(
    *,
    notice_seconds: float,
    load_seconds: float,
    provisioning_seconds: float = 0.0,
    doomed_replicas: int = 1,
) -> float:
    """Replica-seconds of Ready capacity no handler can save: per doomed replica, the time from
    NotBefore to the earliest moment its replacement can be Ready."""
    return doomed_replicas * max(0.0, provisioning_seconds + load_seconds - notice_seconds)
