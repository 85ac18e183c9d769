"""How long on-demand GPU nodes stay empty after their GPU pods leave, until the cluster
autoscaler removes them: the evidence behind the doctor's `on-demand-fallback-kept-idle`.

The autoscaler's profile (scale-down-unneeded-time, scale-down-delay-after-add) is not visible in
the cluster on AKS (the autoscaler runs in the managed control plane; its status ConfigMap in
kube-system shows candidates, not settings, and is outside the controller's permissions). What
the controller does see is its own caches: Nodes and pods. So it watches: an on-demand node that
advertises GPUs and had a pod requesting GPUs, then none, is empty from the first snapshot that
shows it so; when the Node is gone, the spell between the first and the last snapshot that showed
it empty is recorded. A lower bound, as precise as the snapshots are frequent. A node first seen
already empty (the controller started during the spell) is not judged: its pods' leaving was not
seen. Pure: fed snapshots, reads no clock. Kept per replica, in memory: a restart starts again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from rebalancer.controller.checkup import IdleSpell
from rebalancer.controller.snapshot import Snapshot

WINDOW = timedelta(hours=24)  # spells older than this are forgotten
MAX_SPELLS = 500  # at most this many kept (a bound on memory, not a sample)


@dataclass
class _Empty:
    pool: str
    first: datetime
    last: datetime


class IdleWatch:
    def __init__(self, *, window: timedelta = WINDOW, max_spells: int = MAX_SPELLS) -> None:
        self._window = window
        self._had_pod: set[str] = set()  # on-demand GPU nodes seen with a GPU pod
        self._empty: dict[str, _Empty] = {}
        self._spells: deque[IdleSpell] = deque(maxlen=max_spells)

    def observe(self, snapshot: Snapshot) -> None:
        now = snapshot.now
        for name, empty in list(self._empty.items()):
            if name not in snapshot.nodes:
                seconds = (empty.last - empty.first).total_seconds()
                self._spells.append(IdleSpell(name, empty.pool, seconds, now))
                del self._empty[name]
        occupied = {
            pod.node_name
            for pod in snapshot.pods.values()
            if pod.gpus > 0 and pod.node_name and not pod.finished
        }
        fallback = {
            name: node
            for name, node in snapshot.nodes.items()
            if not node.spot and node.allocatable_gpus > 0
        }
        self._had_pod &= set(fallback)
        for name, node in fallback.items():
            if name in occupied:
                self._had_pod.add(name)
                self._empty.pop(name, None)
            elif name in self._had_pod:
                empty = self._empty.setdefault(name, _Empty(node.pool, now, now))
                empty.last = now
        while self._spells and now - self._spells[0].ended > self._window:
            self._spells.popleft()

    def spells(self) -> tuple[IdleSpell, ...]:
        """The spells that ended with the node removed, within the window, oldest first."""
        return tuple(self._spells)
