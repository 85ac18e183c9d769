"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

- Expiry is judged from when *this* client last saw the lease record change, plus its
  `leaseDurationSeconds`, never from the holder's `renewTime`: clocks of two pods may disagree.
- Updates are PUTs of the object last read, so its resourceVersion makes a race a 409 Conflict.
- A leader that cannot renew within `renew_deadline` steps down; on shutdown it releases the lease
  (empty holder, duration 1 s) so the other replica takes over at once.
- Fencing: `may_write()` is true only while this replica leads and its last successful renewal
  started less than `renew_deadline` ago by its own clock (the others wait `lease_duration` from
  when they saw that renewal, which is later). A process that was paused, or whose renewals
  fail, stops writing before anyone else may start, whatever its loop was doing. Its own Lease
  writes follow the same rule: an update is not sent once the renew deadline of the attempt it
  belongs to has passed (a pause between the read and the write). `fence` asks
  the same of each write at the moment it leaves (`rebalancer.kube.fence`, through
  `rebalancer.kube.gate`): only a write that can be over before the renew deadline is sent.
- Its own requests go straight to the client, outside the controller's request budget: a
  renewal never waits behind the writes it keeps safe.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from rebalancer.clock import Clock, SystemClock
from rebalancer.kube.client import Requester
from rebalancer.kube.errors import Conflict, KubeError, NotFound
from rebalancer.kube.fence import WRITE_MARGIN_SECONDS, WriteFence
from rebalancer.process import sleep_or_stop


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: Requester,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        log: Any = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period * 1.2 > 0:
            raise ValueError("need lease_duration > renew_deadline > 1.2 x retry_period > 0")
        self._client = client
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._namespace = namespace
        self.identity = identity
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._clock = clock or SystemClock()
        self._log = log
        self._observed: dict[str, Any] | None = None  # the whole Lease object last read
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # start of the last successful acquire or renew
        self.leading = asyncio.Event()
        self.transitions = 0
        self.holder: str = ""
        # A leader renewing on time has about renew_deadline - retry_period left at worst: the
        # margin stays well inside that, or short settings would fence a healthy leader.
        margin = min(WRITE_MARGIN_SECONDS, (renew_deadline - retry_period) / 2)
        self.fence = WriteFence(
            self.renew_deadline_at, monotonic=self._clock.monotonic, margin_seconds=margin
        )

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def lease_fresh(self) -> bool:
        """This replica renewed the lease recently enough that nobody else can hold it yet."""
        renewed = self._renewed_at
        return renewed is not None and self._clock.monotonic() - renewed < self._renew_deadline

    def renew_deadline_at(self) -> float | None:
        """The monotonic time by which this replica stops writing; None: it holds no Lease."""
        renewed = self._renewed_at
        return None if renewed is None else renewed + self._renew_deadline

    def may_write(self) -> bool:
        return self.is_leader and self.lease_fresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign, lead while renewals succeed, campaign again; release when stopped."""
        try:
            while not stop.is_set():
                while not stop.is_set() and not await self.try_acquire_or_renew():
                    await sleep_or_stop(stop, self._retry)
                if stop.is_set():
                    break
                self._became_leader()
                last_renewal = self._clock.monotonic()
                while not stop.is_set():
                    await sleep_or_stop(stop, self._retry)
                    if stop.is_set():
                        break
                    if await self.try_acquire_or_renew():
                        last_renewal = self._clock.monotonic()
                    elif self._clock.monotonic() - last_renewal >= self._renew_deadline:
                        self._lost_leadership("failed to renew the lease in time")
                        break
        finally:
            if self.is_leader:
                await self.release()

    async def try_acquire_or_renew(self) -> bool:
        started = self._clock.monotonic()
        if await self._acquire_or_renew(started):
            self._renewed_at = started
            return True
        return False

    def _too_late(self, started: float) -> bool:
        """An attempt that began a renew deadline ago can no longer make this replica fresh,
        and what it read may be another's by now: its write is not sent at all (the API server
        would refuse a stale one, but a paused leader must send nothing)."""
        late = self._clock.monotonic() - started >= self._renew_deadline
        if late and self._log is not None:
            self._log.warning("lease write not sent: the read it answers is too old")
        return late

    async def _acquire_or_renew(self, started: float) -> bool:
        now = self._clock.now()
        try:
            lease = await self._client.request("GET", f"{self._path}/{self._name}")
        except NotFound:
            return not self._too_late(started) and await self._create(now)
        except KubeError as error:
            self._note("lease read failed", error)
            return False
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock.monotonic()
        self._observed = lease
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or self._duration)
        valid = self._observed_at + duration > self._clock.monotonic()
        if holder and holder != self.identity and valid:
            return False
        new_spec = dict(spec)
        new_spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self._duration),
                "renewTime": micro_time(now),
            }
        )
        if holder != self.identity:
            new_spec["acquireTime"] = micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        return not self._too_late(started) and await self._update(lease, new_spec)

    async def release(self) -> None:
        """Give the lease up: an empty holder lets the other replica take it at once."""
        self.leading.clear()  # no more actions; Events already queued may still go (lease_fresh)
        if self._observed is None:
            return
        now = micro_time(self._clock.now())
        spec = dict(self._observed.get("spec") or {})
        spec.update(
            {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
        )
        for _ in range(3):
            try:
                await self._update(self._observed, spec, raise_errors=True)
                return
            except Conflict:
                try:
                    self._observed = await self._client.request("GET", f"{self._path}/{self._name}")
                except KubeError:
                    return
                if (self._observed.get("spec") or {}).get("holderIdentity") != self.identity:
                    return  # somebody else holds it already
            except KubeError as error:
                self._note("lease release failed", error)
                return

    async def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self._duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self._observed = await self._client.request("POST", self._path, body=body)
        except KubeError as error:
            self._note("lease create failed", error)
            return False
        self._observed_spec = self._observed.get("spec") or {}
        self._observed_at = self._clock.monotonic()
        self.holder = self.identity
        return True

    async def _update(
        self, lease: dict[str, Any], spec: dict[str, Any], *, raise_errors: bool = False
    ) -> bool:
        body = {**lease, "spec": spec}
        try:
            updated = await self._client.request("PUT", f"{self._path}/{self._name}", body=body)
        except KubeError as error:
            if raise_errors:
                raise
            self._note("lease update failed", error)
            return False
        self._observed = updated
        self._observed_spec = updated.get("spec") or {}
        self._observed_at = self._clock.monotonic()
        self.holder = str(self._observed_spec.get("holderIdentity") or "")
        return True

    def _became_leader(self) -> None:
        self.transitions += 1
        self.leading.set()
        if self._log is not None:
            self._log.info("became leader", identity=self.identity, lease=self._name)

    def _lost_leadership(self, why: str) -> None:
        self.leading.clear()
        self._renewed_at = None
        if self._log is not None:
            self._log.warning("stopped leading", identity=self.identity, reason=why)

    def _note(self, what: str, error: KubeError) -> None:
        if self._log is not None and not isinstance(error, Conflict):
            self._log.warning(what, kind=error.kind, reason=str(error))
