"""Karpenter's NodePools as the controller plans with them: listed once before the first pass, then
every `REFRESH_SECONDS`, so that a NodePool's parts (`karpenter.py` `nodepool_pools`) are fail-over
targets before any of their nodes exists.

A list rather than an informer: NodePools change rarely, a cluster without Karpenter answers 404
(no CRD: no NodePools, nothing logged), and a watch would need the CRD to exist when the
controller starts. A list that fails otherwise keeps the last NodePools read: a passing API error
must not take a fail-over target away in the middle of a wave. Not the doctor's list (it reads its
own, every run, and skips its NodePool checks when that fails).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rebalancer.controller.karpenter import NodePoolInfo
from rebalancer.kube.client import Requester
from rebalancer.kube.errors import KubeError, NotFound
from rebalancer.process import sleep_or_stop

NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
# How late a new or changed NodePool is planned with; a pass never waits for it.
REFRESH_SECONDS = 30.0


class NodePoolSource:
    def __init__(
        self,
        client: Requester,
        *,
        log: Any,
        on_change: Callable[[], None],
        on_error: Callable[[str], None],
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self._client = client
        self._log = log
        self._on_change = on_change
        self._on_error = on_error
        self._refresh_seconds = refresh_seconds
        self._versions: tuple[str, ...] | None = None
        self.nodepools: tuple[NodePoolInfo, ...] = ()

    async def refresh(self) -> None:
        """One list; a change of any NodePool wakes the loop."""
        try:
            listed = await self._client.request("GET", NODEPOOLS)
        except NotFound:
            listed = {}
        except KubeError as error:
            self._on_error(error.kind)
            self._log.warning("NodePools not read; the last ones read stay", reason=str(error))
            return
        items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
        versions = tuple(
            sorted(str((item.get("metadata") or {}).get("resourceVersion", "")) for item in items)
        )
        if versions == self._versions:
            return
        self._versions = versions
        self.nodepools = tuple(parsed for item in items if (parsed := self._parse(item)))
        self._on_change()

    def _parse(self, item: dict[str, Any]) -> NodePoolInfo | None:
        try:
            return NodePoolInfo.from_json(item)
        except Exception as error:  # one malformed NodePool must not hide the others
            name = (item.get("metadata") or {}).get("name", "")
            self._log.warning("NodePool skipped: cannot be read", nodepool=str(name)[:253],
                              error=f"{type(error).__name__}: {str(error)[:200]}")  # fmt: skip
            return None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await sleep_or_stop(stop, self._refresh_seconds)
            if stop.is_set():
                return
            try:
                await self.refresh()
            except Exception:  # a NodePool that cannot be read must not stop the loop
                self._log.exception("NodePools not read")
